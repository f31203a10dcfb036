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
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * A walk through a record body under its writer schema, reading it as Avro's reader does, without
 * building a value. It says one of three things:
 *
 * <ul>
 *   <li>{@link #LANDS}: the body certainly lands: every length, index and varint in bounds, strings
 *       valid UTF-8, dates and times within years 1-9999, decimals within their precision. For it,
 *       the routing value (as a string, as Spark casts it) and the event time (epoch microseconds).
 *   <li>{@link #BAD_BLOCKS}: the body parses, but an array or map block in it gives a byte size that
 *       is not the size of its items. Avro's reader ignores the size and Avro's skip trusts it, so
 *       the two read different records: it cannot land as it is.
 *   <li>{@link #UNSURE}: anything else. The decode step decides, and names the reason if it does not
 *       land: a dead letter's reason always comes from there.
 * </ul>
 *
 * So it must never say LANDS for a body the decode step turns away; it may say UNSURE for one the
 * decode step lands (a boolean byte other than 0 or 1, a logical type it does not know, ...).
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
  public static final int BAD_BLOCKS = 2;
  public static final String CONFIG_PREFIX = "spark.kafka_landing.body_check.";
  private static final ConcurrentHashMap<String, Checker> CHECKERS = new ConcurrentHashMap<>();
  private static final Row NOT_SURE = RowFactory.create(UNSURE, null, null);

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

  /** A body Avro's reader cannot read: the decode step names it. */
  private static final class Corrupt extends Exception {
    private static final long serialVersionUID = 1L;
    static final Corrupt IT = new Corrupt();

    private Corrupt() {
      super(null, null, false, false);
    }
  }

  // Years 1-9999, as the decode step's value checks bound them (route.py).
  static final long MS_YEAR_1 = -62_135_596_800_000L;
  static final long MS_YEAR_10000 = 253_402_300_800_000L;
  static final int DAY_YEAR_1 = -719_162;  // 0001-01-01
  static final int DAY_YEAR_9999_END = 2_932_896;  // 9999-12-31

  static final class Checker {
    private final Schema writer;
    private final boolean mayVouch;
    private final int routeAt;
    private final int eventAt;

    Checker(String config) {
      String[] parts = config.split("\u0001", 4);
      writer = new Schema.Parser().setValidateDefaults(false).parse(parts[3]);
      routeAt = position(parts[1]);
      eventAt = position(parts[2]);
      mayVouch = parts[0].equals("1") && (routeAt < 0 || routeAt != eventAt);
    }

    private int position(String name) {
      Schema.Field f = name.isEmpty() ? null : writer.getField(name);
      return f == null ? -1 : f.pos();
    }

    Row check(byte[] body) {
      Verdict v = check(body, 0, body.length, new Verdict());  // a checker serves the UDF's tasks at once
      return v.status == UNSURE ? NOT_SURE : RowFactory.create(v.status, v.route, v.event);
    }

    /**
     * The verdict on the body `buf[start, limit)`, whose record may end before it does, in `into`
     * (a task's own, reused with its walk: one per record was about a tenth of what a landing allocated).
     */
    Verdict check(byte[] buf, int start, int limit, Verdict into) {
      Walk w = into.walk.reset(buf, start, limit);
      try {
        String route = null;
        Long event = null;
        List<Schema.Field> fields = writer.getFields();
        for (int i = 0; i < fields.size(); i++) {
          Schema s = fields.get(i).schema();
          if (i == routeAt) {
            route = w.routeValue(s);
          } else if (i == eventAt) {
            event = w.eventMicros(s);
          } else {
            w.walk(s);
          }
        }
        // Bytes after the record are ignored, as Avro's reader does.
        if (w.badBlocks) {
          return into.set(BAD_BLOCKS, null, null, w.pos);
        }
        return w.doubt || !mayVouch ? into.set(UNSURE, null, null, -1) : into.set(LANDS, route, event, w.pos);
      } catch (Corrupt e) {
        return into.set(UNSURE, null, null, -1);
      }
    }
  }

  /** What the check says of one body; `end`: where the record it holds ends (LANDS only). */
  static final class Verdict {
    final Walk walk = new Walk();
    int status = UNSURE;
    String route;
    Long event;
    int end = -1;

    Verdict set(int status, String route, Long event, int end) {
      this.status = status;
      this.route = route;
      this.event = event;
      this.end = end;
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

  /** One body, read forward; `doubt`: something the decode step should judge. */
  static final class Walk {
    byte[] buf;
    int pos;
    int limit;  // where the body ends in buf
    boolean doubt;
    boolean badBlocks;

    Walk reset(byte[] buf, int pos, int limit) {
      this.buf = buf;
      this.pos = pos;
      this.limit = limit;
      doubt = false;
      badBlocks = false;
      return this;
    }

    String routeValue(Schema s) throws Corrupt {
      switch (s.getType()) {
        case UNION:
          return routeValue(branch(s));
        case NULL:
          return null;
        case STRING: {
          int n = length();
          int at = take(n);
          doubt |= isUuid(s.getLogicalType()) && !uuid(at, n);
          return decoded(at, n);
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
      walk(s);  // a value this check does not cast as Spark would
      doubt = true;
      return null;
    }

    Long eventMicros(Schema s) throws Corrupt {
      if (s.getType() == Schema.Type.UNION) {
        return eventMicros(branch(s));
      }
      if (s.getType() == Schema.Type.NULL) {
        return null;
      }
      LogicalType t = s.getLogicalType();
      if (s.getType() == Schema.Type.LONG && (t == null || t instanceof LogicalTypes.TimestampMillis
          || t instanceof LogicalTypes.LocalTimestampMillis)) {
        long v = readLong();
        if (v < MS_YEAR_1 || v >= MS_YEAR_10000) {
          doubt = true;
          return null;
        }
        return v * 1000;
      }
      if (s.getType() == Schema.Type.LONG && (t instanceof LogicalTypes.TimestampMicros
          || t instanceof LogicalTypes.LocalTimestampMicros)) {
        long v = readLong();
        if (v < MS_YEAR_1 * 1000 || v >= MS_YEAR_10000 * 1000) {
          doubt = true;
          return null;
        }
        return v;
      }
      walk(s);
      doubt = true;
      return null;
    }

    private Schema branch(Schema union) throws Corrupt {
      return union.getTypes().get(index(union.getTypes().size()));
    }

    void walk(Schema s) throws Corrupt {
      LogicalType t = s.getLogicalType();
      switch (s.getType()) {
        case NULL:
          return;
        case BOOLEAN:
          bool();
          return;
        case INT: {
          int v = readInt();
          if (t instanceof LogicalTypes.Date) {
            doubt |= v < DAY_YEAR_1 || v > DAY_YEAR_9999_END;
          } else {
            doubt |= t != null;
          }
          return;
        }
        case LONG: {
          long v = readLong();
          if (t instanceof LogicalTypes.TimestampMillis || t instanceof LogicalTypes.LocalTimestampMillis) {
            doubt |= v < MS_YEAR_1 || v >= MS_YEAR_10000;
          } else if (t instanceof LogicalTypes.TimestampMicros || t instanceof LogicalTypes.LocalTimestampMicros) {
            doubt |= v < MS_YEAR_1 * 1000 || v >= MS_YEAR_10000 * 1000;
          } else {
            doubt |= t != null;
          }
          return;
        }
        case FLOAT:
          take(4);
          return;
        case DOUBLE:
          take(8);
          return;
        case STRING:
          if (isUuid(t)) {
            int n = length();
            doubt |= !uuid(take(n), n);
          } else {
            utf8(length());
          }
          return;
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
          for (;;) {
            long n = readLong();
            if (n == 0) {
              return;
            }
            long end = -1;
            if (n < 0) {  // a block with its byte size, which Avro's reader ignores and its skip trusts
              if (n == Long.MIN_VALUE) {
                throw Corrupt.IT;
              }
              n = -n;
              long size = readLong();
              end = size < 0 ? -1 : pos + size;
              badBlocks |= size < 0;
            }
            if (n > limit - pos) {  // more items than bytes left: the decode step judges
              throw Corrupt.IT;
            }
            for (long i = 0; i < n; i++) {
              if (s.getType() == Schema.Type.MAP) {
                utf8(length());
                walk(s.getValueType());
              } else {
                walk(s.getElementType());
              }
            }
            badBlocks |= end >= 0 && pos != end;
          }
        default:
          throw Corrupt.IT;
      }
    }

    private void decimalOrBytes(LogicalType t, int n) throws Corrupt {
      int at = take(n);
      if (t == null) {
        return;
      }
      if (!(t instanceof LogicalTypes.Decimal) || n == 0) {
        doubt = true;
        return;
      }
      int precision = ((LogicalTypes.Decimal) t).getPrecision();
      doubt |= new BigInteger(buf, at, n).abs().compareTo(BigInteger.TEN.pow(precision)) >= 0;
    }

    private int take(int n) throws Corrupt {
      if (n < 0 || n > limit - pos) {
        throw Corrupt.IT;
      }
      int at = pos;
      pos += n;
      return at;
    }

    private int next() throws Corrupt {
      if (pos >= limit) {
        throw Corrupt.IT;
      }
      return buf[pos++] & 0xff;
    }

    /** An Avro int as Avro's reader reads it: at most 5 bytes; bits past 32, which it drops, are a doubt. */
    int readInt() throws Corrupt {
      long n = 0;
      for (int shift = 0; shift < 35; shift += 7) {
        int b = next();
        n |= (long) (b & 0x7f) << shift;
        if (b < 0x80) {
          doubt |= shift == 28 && b > 0x0f;
          int u = (int) n;
          return (u >>> 1) ^ -(u & 1);
        }
      }
      throw Corrupt.IT;
    }

    /** An Avro long: at most 10 bytes; bits past 64 are a doubt. */
    long readLong() throws Corrupt {
      long n = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        int b = next();
        n |= (long) (b & 0x7f) << shift;
        if (b < 0x80) {
          doubt |= shift == 63 && b > 0x01;
          return (n >>> 1) ^ -(n & 1);
        }
      }
      throw Corrupt.IT;
    }

    private boolean bool() throws Corrupt {
      int b = next();
      doubt |= b > 1;
      return b == 1;
    }

    private int index(int size) throws Corrupt {
      int i = readInt();
      if (i < 0 || i >= size) {
        throw Corrupt.IT;
      }
      return i;
    }

    /** A string's or bytes' length, which Avro's reader reads as an int. */
    private int length() throws Corrupt {
      int n = readInt();
      if (n < 0 || n > limit - pos) {
        throw Corrupt.IT;
      }
      return n;
    }

    private static final ThreadLocal<CharsetDecoder> UTF8 = ThreadLocal.withInitial(
        () -> StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
            .onUnmappableCharacter(CodingErrorAction.REPORT));

    private static boolean isUuid(LogicalType t) {
      return t != null && "uuid".equals(t.getName());
    }

    /** The 36 bytes at `at` are a UUID as RFC 4122 writes it (8-4-4-4-12 hex digits), the form
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

    private void utf8(int n) throws Corrupt {
      int at = take(n);
      if (!ascii(buf, at, n)) {  // the strict decoder decides
        decoded(at, n);
      }
    }

    private String decoded(int at, int n) {
      try {
        return UTF8.get().decode(ByteBuffer.wrap(buf, at, n)).toString();
      } catch (CharacterCodingException e) {
        doubt = true;
        return null;
      }
    }
  }
}
