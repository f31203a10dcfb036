package kafkalanding.splice;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The strict walk: a walk through a record body under its writer schema, reading it as the
 * strictest of the readers of a landing file would (fastavro, Avro's Java reader, Spark), without
 * building a value. It is total and bounded: every length and count is checked against the bytes
 * left before anything is read, so no body makes it allocate, and it says one of three things:
 *
 * <ul>
 *   <li>{@link #LANDS}: every reader reads the body to its last byte and gets the same values. For
 *       it, the routing value (as a string, as Spark casts it) and the event time (epoch
 *       microseconds).
 *   <li>{@link #DEAD}: it does not land; {@link Walk#rule} says why (the rules below), and the
 *       field it was in. The decode never runs on it: nothing that fails this walk reaches a
 *       decoder that could allocate beyond its bytes (a 6-byte array of nulls asked Avro's reader
 *       for an 8 GB array).
 *   <li>{@link #UNSURE}: the bytes land as they are (the walk read all of them, by every rule),
 *       but a value the landing needs is one this walk does not compute as Spark does: a routing
 *       field of another type than string, int, long, boolean or enum (Spark's cast decides its
 *       string), an event time field of another type or out of years 1-9999 (the decode names
 *       that reason), or a check that may not vouch. The decode reads those values; the bytes are
 *       still the walked ones, never a record Avro's skip cut.
 * </ul>
 *
 * <p>The rules (a dead letter's reason; their words are in avro_landing/body_rules.py, under the
 * same numbers): the body ends before its record does; a length or item count is negative or
 * runs past the bytes left (items of zero width, such as nulls, are walked one by one, up to
 * {@link #MAX_ITEMS} an array); an array or map block gives a byte size that is not the size of
 * its items (Avro's reader ignores it, Avro's skip trusts it); more than {@link #MAX_ITEMS}
 * items; a union or enum index out of range; a boolean byte other than 0 or 1 (Java reads 2 as
 * false, fastavro as true); an int varint with bits past 32 or a long's past 64 (Java drops them,
 * fastavro keeps them); bytes after the end of the record; a string that is not UTF-8; a date or
 * timestamp outside years 1-9999; a time of day outside [0, 24 h); a uuid string that is not
 * 8-4-4-4-12 hex digits; a decimal with more digits than its precision, or of zero bytes; a
 * string or bytes longer than {@link #MAX_LENGTH}. A varint padded with zero groups is read alike
 * by every reader, and lands.
 *
 * <p>The engine runs Avro's reader with the same limits ({@code org.apache.avro.limits.*},
 * spark_setup.AVRO_LIMITS), so a body this walk lets through never meets a reader's limit.
 *
 * <p>Its argument besides the body is a short key; the config it names is a session setting, {@link
 * #CONFIG_PREFIX} + key, which Spark hands every task of the query: "1" if it may say LANDS (else
 * never), the routing field, the event time field (each empty for none) and the writer schema's
 * JSON, joined by U+0001. A key, not the config itself: a UDF's string argument becomes a new Java
 * string on every row, and a schema can be tens of kilobytes.
 */
public final class FastCheck implements UDF2<byte[], String, Row> {
  private static final long serialVersionUID = 1L;
  public static final int LANDS = 0;
  public static final int UNSURE = 1;
  public static final int DEAD = 2;

  // The rules a body is refused by (body_rules.py has their words, under the same numbers).
  public static final int RULE_TRUNCATED = 1;
  public static final int RULE_BEYOND_BYTES = 2;
  public static final int RULE_LYING_BLOCK = 3;
  public static final int RULE_TOO_MANY_ITEMS = 4;
  public static final int RULE_BAD_INDEX = 5;
  public static final int RULE_BAD_BOOLEAN = 6;
  public static final int RULE_BAD_VARINT = 7;
  public static final int RULE_TRAILING_BYTES = 8;
  public static final int RULE_NOT_UTF8 = 9;
  public static final int RULE_TIME_RANGE = 10;
  public static final int RULE_TIME_OF_DAY = 11;
  public static final int RULE_NOT_UUID = 12;
  public static final int RULE_DECIMAL_WIDE = 13;
  public static final int RULE_TOO_LONG = 14;
  public static final int RULE_EMPTY_DECIMAL = 15;

  /** Items of one array or map, over all its blocks: Avro's collection limit on the engine too. */
  public static final int MAX_ITEMS = 10_000_000;
  /** Bytes of one string or bytes value: Avro's string and bytes limits on the engine too. */
  public static final int MAX_LENGTH = 256 << 20;

  public static final String CONFIG_PREFIX = "spark.kafka_landing.body_check.";
  private static final ConcurrentHashMap<String, Checker> CHECKERS = new ConcurrentHashMap<>();
  private static final Row NOT_SURE = RowFactory.create(UNSURE, null, null, null, null);

  @Override
  public Row call(byte[] body, String key) {
    if (body == null || key == null) {
      return NOT_SURE;
    }
    return CHECKERS.computeIfAbsent(key, FastCheck::checker).check(body);
  }

  private static Checker checker(String key) {
    TaskContext task = TaskContext.get();
    String config = task == null ? null : task.getLocalProperty(CONFIG_PREFIX + key);
    if (config == null) {
      throw new IllegalStateException("the body check has no config " + CONFIG_PREFIX + key + " in its query's "
          + "session settings: set it before the query runs (decode.register_body_check)");
    }
    return new Checker(config);
  }

  /** A body that does not land: the walk's `rule` says why. */
  private static final class Dead extends Exception {
    private static final long serialVersionUID = 1L;
    static final Dead IT = new Dead();

    private Dead() {
      super(null, null, false, false);
    }
  }

  // Years 1-9999, as the decode step's value checks bound them (route.py).
  static final long MS_YEAR_1 = -62_135_596_800_000L;
  static final long MS_YEAR_10000 = 253_402_300_800_000L;
  static final int DAY_YEAR_1 = -719_162;  // 0001-01-01
  static final int DAY_YEAR_9999_END = 2_932_896;  // 9999-12-31
  static final long MS_PER_DAY = 86_400_000L;

  static final class Checker {
    private final Schema writer;
    private final boolean mayVouch;
    private final int routeAt;
    private final int eventAt;
    /** The types whose values take no byte (null, fixed of size 0, records of only such fields):
     * an array of them may hold more items than the body has bytes. Read-only once built, so one
     * checker serves every task at once. */
    final Set<Schema> zeroWidth = Collections.newSetFromMap(new IdentityHashMap<>());

    Checker(String config) {
      String[] parts = config.split("\u0001", 4);
      writer = new Schema.Parser().setValidateDefaults(false).parse(parts[3]);
      routeAt = position(parts[1]);
      eventAt = position(parts[2]);
      mayVouch = parts[0].equals("1") && (routeAt < 0 || routeAt != eventAt);
      findZeroWidth(writer, Collections.newSetFromMap(new IdentityHashMap<>()));
    }

    private int position(String name) {
      Schema.Field f = name.isEmpty() ? null : writer.getField(name);
      return f == null ? -1 : f.pos();
    }

    /** Whether `s` takes no byte, noting every such type inside it; `seen` stops at recursion. */
    private boolean findZeroWidth(Schema s, Set<Schema> seen) {
      if (!seen.add(s)) {
        return zeroWidth.contains(s);  // a record inside itself: it takes bytes, or never ends
      }
      boolean zero;
      switch (s.getType()) {
        case NULL:
          zero = true;
          break;
        case FIXED:
          zero = s.getFixedSize() == 0;
          break;
        case RECORD:
          zero = true;
          for (Schema.Field f : s.getFields()) {
            zero &= findZeroWidth(f.schema(), seen);
          }
          break;
        case ARRAY:
          findZeroWidth(s.getElementType(), seen);
          zero = false;
          break;
        case MAP:
          findZeroWidth(s.getValueType(), seen);
          zero = false;
          break;
        case UNION:
          for (Schema b : s.getTypes()) {
            findZeroWidth(b, seen);
          }
          zero = false;  // its branch index takes a byte
          break;
        default:
          zero = false;
      }
      if (zero) {
        zeroWidth.add(s);
      }
      return zero;
    }

    Row check(byte[] body) {
      Verdict v = check(body, 0, body.length, new Verdict());  // a checker serves the UDF's tasks at once
      if (v.status == DEAD) {
        return RowFactory.create(DEAD, null, null, v.rule, v.field);
      }
      return v.status == UNSURE ? NOT_SURE : RowFactory.create(v.status, v.route, v.event, null, null);
    }

    /**
     * The verdict on the body `buf[start, limit)` in `into` (a task's own, reused with its walk: one
     * per record was about a tenth of what a landing allocated). A body lands whole or not at all:
     * bytes after its record are a rule broken, so the end of a record that lands is `limit`.
     */
    Verdict check(byte[] buf, int start, int limit, Verdict into) {
      Walk w = into.walk.reset(buf, start, limit, zeroWidth);
      List<Schema.Field> fields = writer.getFields();
      int i = 0;
      try {
        String route = null;
        Long event = null;
        for (; i < fields.size(); i++) {
          Schema s = fields.get(i).schema();
          if (i == routeAt) {
            route = w.routeValue(s);
          } else if (i == eventAt) {
            event = w.eventMicros(s);
          } else {
            w.walk(s);
          }
        }
        if (w.pos != limit) {
          w.rule = RULE_TRAILING_BYTES;
          throw Dead.IT;
        }
        return w.decode || !mayVouch ? into.set(UNSURE, null, null, limit) : into.set(LANDS, route, event, limit);
      } catch (Dead e) {
        into.set(DEAD, null, null, -1);
        into.rule = w.rule;
        into.field = i < fields.size() ? fields.get(i).name() : null;
        return into;
      }
    }
  }

  /** What the walk says of one body; `end`: where its record ends (all of it: LANDS or UNSURE);
   * `rule` and `field`: why a DEAD one does not land, and the top-level field it was in. */
  static final class Verdict {
    final Walk walk = new Walk();
    int status = UNSURE;
    String route;
    Long event;
    int end = -1;
    int rule;
    String field;

    Verdict set(int status, String route, Long event, int end) {
      this.status = status;
      this.route = route;
      this.event = event;
      this.end = end;
      this.rule = 0;
      this.field = null;
      return this;
    }
  }

  private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long HIGH_BITS = 0x8080808080808080L;

  /**
   * Whether `b[at, at + n)` is all ASCII, eight bytes at a time: most strings are, and a byte at a
   * time was about two fifths of what the tasks of a ~1 KB record landing spent in Java.
   */
  static boolean ascii(byte[] b, int at, int n) {
    int i = at;
    int end = at + n;
    for (; i + 8 <= end; i += 8) {
      if (((long) LONGS.get(b, i) & HIGH_BITS) != 0) {
        return false;
      }
    }
    for (; i < end; i++) {
      if (b[i] < 0) {
        return false;
      }
    }
    return true;
  }

  /** One body, read forward; `decode`: a value the landing needs is left to the decode (UNSURE). */
  static final class Walk {
    byte[] buf;
    int pos;
    int limit;  // where the body ends in buf
    boolean decode;
    int rule;  // why the body is DEAD, when Dead is thrown
    private Set<Schema> zeroWidth;

    Walk reset(byte[] buf, int pos, int limit, Set<Schema> zeroWidth) {
      this.buf = buf;
      this.pos = pos;
      this.limit = limit;
      this.zeroWidth = zeroWidth;
      decode = false;
      rule = 0;
      return this;
    }

    private Dead dead(int why) {
      rule = why;
      return Dead.IT;
    }

    String routeValue(Schema s) throws Dead {
      switch (s.getType()) {
        case UNION:
          return routeValue(branch(s));
        case NULL:
          return null;
        case STRING: {
          int n = length();
          int at = take(n);
          String v = decoded(at, n);
          if (isUuid(s.getLogicalType()) && !uuid(at, n)) {
            throw dead(RULE_NOT_UUID);
          }
          return v;
        }
        case ENUM:
          return s.getEnumSymbols().get(index(s.getEnumSymbols().size()));
        case INT:
          if (s.getLogicalType() == null) {
            return Integer.toString(readInt());
          }
          break;
        case LONG:
          if (s.getLogicalType() == null) {
            return Long.toString(readLong());
          }
          break;
        case BOOLEAN:
          return bool() ? "true" : "false";
        default:
          break;
      }
      walk(s);  // a value this walk does not cast as Spark would
      decode = true;
      return null;
    }

    Long eventMicros(Schema s) throws Dead {
      if (s.getType() == Schema.Type.UNION) {
        return eventMicros(branch(s));
      }
      if (s.getType() == Schema.Type.NULL) {
        return null;
      }
      LogicalType t = s.getLogicalType();
      if (s.getType() == Schema.Type.LONG && t == null) {  // epoch milliseconds
        long v = readLong();
        if (v < MS_YEAR_1 || v >= MS_YEAR_10000) {
          decode = true;  // the decode names the event time field out of range
          return null;
        }
        return v * 1000;
      }
      if (s.getType() == Schema.Type.LONG && (t instanceof LogicalTypes.TimestampMillis
          || t instanceof LogicalTypes.LocalTimestampMillis)) {
        return walkedLong(s) * 1000;  // out of years 1-9999 is a value rule, as in any other field
      }
      if (s.getType() == Schema.Type.LONG && (t instanceof LogicalTypes.TimestampMicros
          || t instanceof LogicalTypes.LocalTimestampMicros)) {
        return walkedLong(s);
      }
      walk(s);
      decode = true;
      return null;
    }

    /** A long walked by the rules of its logical type, and its value. */
    private long walkedLong(Schema s) throws Dead {
      int at = pos;
      walk(s);
      pos = at;
      return readLong();
    }

    private Schema branch(Schema union) throws Dead {
      return union.getTypes().get(index(union.getTypes().size()));
    }

    void walk(Schema s) throws Dead {
      LogicalType t = s.getLogicalType();
      switch (s.getType()) {
        case NULL:
          return;
        case BOOLEAN:
          bool();
          return;
        case INT: {
          int v = readInt();
          if (t instanceof LogicalTypes.Date && (v < DAY_YEAR_1 || v > DAY_YEAR_9999_END)) {
            throw dead(RULE_TIME_RANGE);
          }
          if (t instanceof LogicalTypes.TimeMillis && (v < 0 || v >= MS_PER_DAY)) {
            throw dead(RULE_TIME_OF_DAY);
          }
          return;
        }
        case LONG: {
          long v = readLong();
          if (t instanceof LogicalTypes.TimestampMillis || t instanceof LogicalTypes.LocalTimestampMillis) {
            if (v < MS_YEAR_1 || v >= MS_YEAR_10000) {
              throw dead(RULE_TIME_RANGE);
            }
          } else if (t instanceof LogicalTypes.TimestampMicros || t instanceof LogicalTypes.LocalTimestampMicros) {
            if (v < MS_YEAR_1 * 1000 || v >= MS_YEAR_10000 * 1000) {
              throw dead(RULE_TIME_RANGE);
            }
          } else if (t instanceof LogicalTypes.TimeMicros && (v < 0 || v >= MS_PER_DAY * 1000)) {
            throw dead(RULE_TIME_OF_DAY);
          }
          return;
        }
        case FLOAT:
          take(4);
          return;
        case DOUBLE:
          take(8);
          return;
        case STRING: {
          int n = length();
          int at = take(n);
          if (!ascii(buf, at, n)) {  // the strict decoder decides
            decoded(at, n);
          }
          if (isUuid(t) && !uuid(at, n)) {
            throw dead(RULE_NOT_UUID);
          }
          return;
        }
        case BYTES:
          decimalOrBytes(t, length());
          return;
        case FIXED:
          decimalOrBytes(t, s.getFixedSize());
          return;
        case ENUM:
          index(s.getEnumSymbols().size());
          return;
        case UNION:
          walk(branch(s));
          return;
        case RECORD:
          for (Schema.Field f : s.getFields()) {
            walk(f.schema());
          }
          return;
        case ARRAY:
        case MAP:
          items(s);
          return;
        default:
          throw dead(RULE_TRUNCATED);  // no other type is parsed
      }
    }

    /** An array's or a map's blocks, each item walked, whatever the blocks' byte sizes say. */
    private void items(Schema s) throws Dead {
      boolean map = s.getType() == Schema.Type.MAP;
      Schema item = map ? s.getValueType() : s.getElementType();
      boolean zero = !map && zeroWidth.contains(item);
      long total = 0;
      for (;;) {
        long n = readLong();
        if (n == 0) {
          return;
        }
        long end = -1;
        if (n < 0) {  // a block with its byte size, which Avro's reader ignores and its skip trusts
          if (n == Long.MIN_VALUE) {
            throw dead(RULE_BEYOND_BYTES);
          }
          n = -n;
          long size = readLong();
          if (size < 0) {
            throw dead(RULE_LYING_BLOCK);
          }
          end = pos + size;
        }
        total += n;
        if (total > MAX_ITEMS) {
          throw dead(RULE_TOO_MANY_ITEMS);
        }
        if (!zero && n > limit - pos) {  // every item takes a byte at least
          throw dead(RULE_BEYOND_BYTES);
        }
        for (long i = 0; i < n; i++) {
          if (map) {
            int k = length();
            int at = take(k);
            if (!ascii(buf, at, k)) {
              decoded(at, k);
            }
          }
          walk(item);
        }
        if (end >= 0 && pos != end) {
          throw dead(RULE_LYING_BLOCK);
        }
      }
    }

    private void decimalOrBytes(LogicalType t, int n) throws Dead {
      int at = take(n);
      if (!(t instanceof LogicalTypes.Decimal)) {
        return;  // plain bytes, or a logical type every reader reads as its bytes
      }
      if (n == 0) {
        throw dead(RULE_EMPTY_DECIMAL);  // fastavro reads 0, Avro's Java reader cannot read it
      }
      int precision = ((LogicalTypes.Decimal) t).getPrecision();
      if (new BigInteger(buf, at, n).abs().compareTo(BigInteger.TEN.pow(precision)) >= 0) {
        throw dead(RULE_DECIMAL_WIDE);
      }
    }

    private int take(int n) throws Dead {
      if (n > limit - pos) {
        throw dead(RULE_TRUNCATED);
      }
      int at = pos;
      pos += n;
      return at;
    }

    private int next() throws Dead {
      if (pos >= limit) {
        throw dead(RULE_TRUNCATED);
      }
      return buf[pos++] & 0xff;
    }

    /** An Avro int: at most 5 bytes, the fifth holding bits 28-31 only (Java drops the rest,
     * fastavro keeps them). */
    int readInt() throws Dead {
      long n = 0;
      for (int shift = 0; shift < 35; shift += 7) {
        int b = next();
        n |= (long) (b & 0x7f) << shift;
        if (b < 0x80) {
          if (shift == 28 && b > 0x0f) {
            throw dead(RULE_BAD_VARINT);
          }
          int u = (int) n;
          return (u >>> 1) ^ -(u & 1);
        }
      }
      throw dead(RULE_BAD_VARINT);
    }

    /** An Avro long: at most 10 bytes, the tenth holding bit 63 only. */
    long readLong() throws Dead {
      long n = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        int b = next();
        n |= (long) (b & 0x7f) << shift;
        if (b < 0x80) {
          if (shift == 63 && b > 0x01) {
            throw dead(RULE_BAD_VARINT);
          }
          return (n >>> 1) ^ -(n & 1);
        }
      }
      throw dead(RULE_BAD_VARINT);
    }

    private boolean bool() throws Dead {
      int b = next();
      if (b > 1) {
        throw dead(RULE_BAD_BOOLEAN);
      }
      return b == 1;
    }

    private int index(int size) throws Dead {
      int i = readInt();
      if (i < 0 || i >= size) {
        throw dead(RULE_BAD_INDEX);
      }
      return i;
    }

    /** A string's or bytes' length, which Avro's reader reads as an int, before anything is read. */
    private int length() throws Dead {
      int n = readInt();
      if (n < 0 || n > limit - pos) {
        throw dead(RULE_BEYOND_BYTES);
      }
      if (n > MAX_LENGTH) {
        throw dead(RULE_TOO_LONG);
      }
      return n;
    }

    private static final ThreadLocal<CharsetDecoder> UTF8 = ThreadLocal.withInitial(
        () -> StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
            .onUnmappableCharacter(CodingErrorAction.REPORT));

    private static boolean isUuid(LogicalType t) {
      return t != null && "uuid".equals(t.getName());
    }

    /** The `n` bytes at `at` are a UUID as RFC 4122 writes it (8-4-4-4-12 hex digits), the form
     * every reader of a uuid string takes (the decode step's value check, route.py). */
    private boolean uuid(int at, int n) {
      if (n != 36) {
        return false;
      }
      for (int i = 0; i < 36; i++) {
        byte b = buf[at + i];
        boolean ok = (i == 8 || i == 13 || i == 18 || i == 23) ? b == '-'
            : (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
        if (!ok) {
          return false;
        }
      }
      return true;
    }

    /** The string at `at`, read by a strict UTF-8 decoder. */
    private String decoded(int at, int n) throws Dead {
      try {
        return UTF8.get().decode(ByteBuffer.wrap(buf, at, n)).toString();
      } catch (CharacterCodingException e) {
        throw dead(RULE_NOT_UTF8);
      }
    }
  }
}
