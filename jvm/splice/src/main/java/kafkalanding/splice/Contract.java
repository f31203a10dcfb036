package kafkalanding.splice;

import java.util.List;

/**
 * What the landing's Python and this jar say to each other, named once: the names Spark finds the
 * operators by, the direct landing's options and result rows, the body check's config and
 * verdicts, and the folders a staged file is written under. avro_landing/contract.py holds the
 * same names with the same values; unit/avro_landing/test_contract.py fails when one side changes
 * alone, and when a Java file spells one of these strings itself.
 */
final class Contract {
  private Contract() {}

  // The data sources' short names (META-INF/services) and the body check's UDF class.
  static final String DIRECT_FORMAT = "kafka-landing-direct";
  static final String SPLICE_FORMAT = "kafka-landing-splice";
  static final String ARCHIVE_FORMAT = "kafka-landing-archive";
  static final String BODY_CHECK_CLASS = "kafkalanding.splice.FastCheck";

  // How a value of an option holds many: items of a list, the numbers of one item, and where an
  // item may hold commas or colons (a schema's JSON, a routing value), its fields and the items.
  static final String LIST_SEP = ",";
  static final String NUMBER_SEP = ":";
  static final String FIELD_SEP = "\u0001";
  static final String ITEM_SEP = "\u0002";

  // The direct landing's options (Spark hands them over case-insensitively). Those under the
  // prefix are the Kafka consumer's settings, as Spark's Kafka source takes them.
  static final String OPTION_KAFKA_PREFIX = "kafka.";
  static final String OPTION_TOPIC = "topic";
  static final String OPTION_RANGES = "ranges";  // one Spark task each: partition:start:end, joined by LIST_SEP
  static final String OPTION_TASKS = "tasks";  // the frozen tasks: hourIndex:partition:start:end
  static final String OPTION_HOURS = "hours";  // the hour tags, by index
  static final String OPTION_SCHEMA_ID = "schemaId";
  static final String OPTION_CHECK = "check";  // the body check's config
  static final String OPTION_LANDING_SCHEMA = "landingSchema";
  static final String OPTION_TABLE = "table";  // every record's table, or:
  static final String OPTION_ROUTES = "routes";  // value FIELD_SEP table, joined by ITEM_SEP
  static final String OPTION_DEFAULT_TABLE = "defaultTable";
  static final String OPTION_OUT = "out";  // the folder the files go under
  static final String OPTION_TIMEOUT_MS = "timeoutMs";  // how long a task waits for Kafka to make progress
  static final String OPTION_EVENT_HOURS = "eventHours";  // MAY_VOUCH: a file per event hour too (the check's event time)

  // The splice writer's options (the first is format("avro")'s too) and its body column.
  static final String OPTION_AVRO_SCHEMA = "avroSchema";
  static final String OPTION_WRITER_SCHEMA = "writerSchema";
  static final String BODY_COLUMN = "_body";

  // The archive source's option: one Spark task each, joined by ITEM_SEP; an item is partition:start:end,
  // then each file it reads as its schema id (NO_SCHEMA_ID: a dead-letter file) and its path, all
  // joined by FIELD_SEP. Its rows are Spark's Kafka source's columns, but the timestamp is Kafka's
  // milliseconds, in TIMESTAMP_MS_COLUMN, and a dead letter's reason is in ARCHIVE_REASON_COLUMN.
  static final String OPTION_SEGMENTS = "segments";
  static final int NO_SCHEMA_ID = -1;
  static final String TIMESTAMP_MS_COLUMN = "_kl_ms";
  static final String ARCHIVE_REASON_COLUMN = "_kl_archived_reason";
  static final List<String> ARCHIVE_COLUMNS = List.of(
      "key", "value", "topic", "partition", "offset", TIMESTAMP_MS_COLUMN, "headers", ARCHIVE_REASON_COLUMN);
  // A dead-letter file's fields (avro_schemas.DEAD_LETTER_SCHEMA), in its order.
  static final List<String> DEAD_LETTER_FIELDS = List.of(
      "topic", "partition", "offset", "timestamp", "key", "value", "headers", "schema_id", "reason");

  // The body check's config is a session setting, BODY_CHECK_CONFIG + a key: MAY_VOUCH if it may
  // say LANDS (anything else, MAY_NOT_VOUCH, never), the routing field, the event time field (each
  // empty for none) and the writer schema's JSON, joined by FIELD_SEP. Its verdicts:
  static final String BODY_CHECK_CONFIG = "spark.kafka_landing.body_check.";
  static final String MAY_VOUCH = "1";
  static final String MAY_NOT_VOUCH = "0";
  static final int LANDS = 0;
  static final int UNSURE = 1;
  static final int DEAD = 2;

  // The direct landing's result rows, told apart by their kind.
  static final List<String> RESULT_COLUMNS =
      List.of("kind", "hour_ix", "chunk", "table", "schema_id", "n", "path", "part", "offset");
  static final String KIND_UNSURE = "unsure";  // the task removed its files: land the decoding way
  static final String KIND_SPREAD = "spread";  // the task removed its files: more event hours than MAX_EVENT_FILES
  static final String KIND_FILE = "file";  // a file written: hour_ix, chunk, table, n rows, path, part
  static final String KIND_HOUR = "hour";  // n records of the frozen tasks of hour_ix
  static final String KIND_GAPS = "gaps";  // n offsets of hour_ix in part the consumer gave no record for
  static final String KIND_GAP = "gap";  // one range of them: n offsets from offset
  static final String KIND_ID = "id";  // schema_id was seen in hour_ix
  static final String KIND_UNCLAIMED = "unclaimed";  // n records no frozen task holds
  static final String KIND_BAD_FRAMING = "bad_framing";  // n records without a schema id to land by
  static final String KIND_RECORDS = "records";  // n records of schema_id
  static final String KIND_DEAD = "dead";  // n of them the strict walk refused

  // A staged file's folders under `out`, in this order: key=value each, as Spark's partitioned
  // writes name theirs, so the Python side reads both writers' files alike.
  static final String HOUR_KEY = "_kl_hour";
  static final String CHUNK_KEY = "_kl_chunk";
  static final String TABLE_KEY = "_kl_table";
  static final String PART_KEY = "_kl_part";
  static final List<String> STAGED_KEYS = List.of(HOUR_KEY, CHUNK_KEY, TABLE_KEY, PART_KEY);
  // Then, in a topic split by event hour, the event hour's folder; a record with no event time, Spark's name for none.
  static final String EVENT_HOUR_KEY = "_kl_ehour";
  static final String NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__";
  // The event hours one frozen task of one table keeps files open for; more, and it goes the decoding way.
  static final int MAX_EVENT_FILES = 48;

  /** The folders of a staged file: STAGED_KEYS with their values, in order. */
  static String stagedFolder(String hour, long chunk, String table, int part) {
    Object[] values = {hour, chunk, table, part};
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < values.length; i++) {
      out.append(i == 0 ? "" : "/").append(STAGED_KEYS.get(i)).append('=').append(values[i]);
    }
    return out.toString();
  }
}
