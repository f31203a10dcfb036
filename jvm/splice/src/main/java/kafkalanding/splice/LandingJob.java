package kafkalanding.splice;

import static kafkalanding.splice.Contract.DIRECT_FORMAT;
import static kafkalanding.splice.Contract.FIELD_SEP;
import static kafkalanding.splice.Contract.ITEM_SEP;
import static kafkalanding.splice.Contract.LIST_SEP;
import static kafkalanding.splice.Contract.NUMBER_SEP;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.util.SerializableConfiguration;

/**
 * Everything a task of the direct landing needs: its options ({@link Contract}'s OPTION_*),
 * parsed once on the driver, and the session's settings {@link LandScan} adds there; sent to the
 * tasks.
 */
final class LandingJob implements Serializable {
  private static final long serialVersionUID = 1L;
  final Map<String, String> kafka = new HashMap<>();
  final String topic;
  final long[][] ranges;  // partition, start, end
  final long[][] tasks;  // hour index, partition, start, end
  final String[] hours;
  final long schemaId;
  final String check;
  final String landingSchema;
  final String table;
  final Map<String, String> routes = new HashMap<>();
  final String defaultTable;
  final String out;
  final long timeoutMs;
  final boolean eventHours;  // a file per event hour too
  final ArchiveSegment[] archived;  // the ranges' archived files, read instead of Kafka; null: Kafka
  String codec = "snappy";
  int deflateLevel = -1;
  SerializableConfiguration hadoop;

  LandingJob(Map<String, String> options) {
    Map<String, String> o = new HashMap<>();
    options.forEach((k, v) -> o.put(k.toLowerCase(Locale.ROOT), v));
    options.forEach((k, v) -> {
      if (k.toLowerCase(Locale.ROOT).startsWith(Contract.OPTION_KAFKA_PREFIX)) {
        kafka.put(k.substring(Contract.OPTION_KAFKA_PREFIX.length()), v);
      }
    });
    topic = required(o, Contract.OPTION_TOPIC);
    ranges = longs(required(o, Contract.OPTION_RANGES), 3);
    tasks = longs(required(o, Contract.OPTION_TASKS), 4);
    hours = required(o, Contract.OPTION_HOURS).split(LIST_SEP);
    schemaId = Long.parseLong(required(o, Contract.OPTION_SCHEMA_ID));
    check = required(o, Contract.OPTION_CHECK);
    landingSchema = required(o, Contract.OPTION_LANDING_SCHEMA);
    table = optional(o, Contract.OPTION_TABLE);
    String r = optional(o, Contract.OPTION_ROUTES);
    for (String pair : r == null || r.isEmpty() ? new String[0] : r.split(ITEM_SEP)) {
      String[] kv = pair.split(FIELD_SEP, 2);
      routes.put(kv[0], kv[1]);
    }
    defaultTable = optional(o, Contract.OPTION_DEFAULT_TABLE);
    out = required(o, Contract.OPTION_OUT);
    String timeout = optional(o, Contract.OPTION_TIMEOUT_MS);
    timeoutMs = timeout == null ? 120_000 : Long.parseLong(timeout);
    eventHours = Contract.MAY_VOUCH.equals(optional(o, Contract.OPTION_EVENT_HOURS));
    String segments = optional(o, Contract.OPTION_SEGMENTS);
    archived = segments == null ? null : ArchiveSegment.parseAll(segments);
    if (table == null && defaultTable == null && routes.isEmpty()) {
      throw new IllegalArgumentException(DIRECT_FORMAT + " needs the option " + Contract.OPTION_TABLE + ", or "
          + Contract.OPTION_ROUTES + " and " + Contract.OPTION_DEFAULT_TABLE);
    }
  }

  /** `o` holds the options under lower-case names, as Spark matches them. */
  private static String optional(Map<String, String> o, String name) {
    return o.get(name.toLowerCase(Locale.ROOT));
  }

  private static String required(Map<String, String> o, String name) {
    String v = optional(o, name);
    if (v == null) {
      throw new IllegalArgumentException(DIRECT_FORMAT + " needs the option " + name);
    }
    return v;
  }

  private static long[][] longs(String text, int width) {
    String[] items = text.isEmpty() ? new String[0] : text.split(LIST_SEP);
    long[][] out = new long[items.length][];
    for (int i = 0; i < items.length; i++) {
      String[] parts = items[i].split(NUMBER_SEP);
      if (parts.length != width) {
        throw new IllegalArgumentException(DIRECT_FORMAT + ": " + items[i] + " is not " + width + " numbers");
      }
      out[i] = new long[width];
      for (int j = 0; j < width; j++) {
        out[i][j] = Long.parseLong(parts[j]);
      }
    }
    return out;
  }

  /** The table of a vouched record's routing value; null: not one this source can name. */
  String tableOf(String value) {
    if (table != null) {
      return table;
    }
    String t = value == null ? null : routes.get(value);
    return t != null ? t : defaultTable;
  }
}
