package kafkalanding.splice;

import static kafkalanding.splice.BodyRules.*;

import java.math.BigInteger;
import java.util.Set;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;

/**
 * The strict walk through one body under its writer schema, read forward as the strictest of the
 * readers of a landing file would (fastavro, Avro's Java reader, Spark), building no value. It is
 * total and bounded: every length and count is checked against the bytes left before anything is
 * read, so no body makes it allocate. A body that breaks one of {@link BodyRules} throws {@link
 * Dead}, with {@link #rule} saying which. One per task, reused from body to body.
 */
final class BodyWalk {
  /** A body that does not land: the walk's `rule` says why. */
  static final class Dead extends Exception {
    private static final long serialVersionUID = 1L;
    static final Dead IT = new Dead();

    private Dead() {
      super(null, null, false, false);
    }
  }

  byte[] buf;
  int pos;
  int limit;  // where the body ends in buf
  boolean decode;  // a value the landing needs is left to the decode (UNSURE)
  int rule;  // why the body is DEAD, when Dead is thrown
  private Set<Schema> zeroWidth;

  BodyWalk reset(byte[] buf, int pos, int limit, Set<Schema> zeroWidth) {
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

  /** The record read: a body lands whole or not at all, so bytes after it break a rule. */
  void end() throws Dead {
    if (pos != limit) {
      throw dead(RULE_TRAILING_BYTES);
    }
  }

  /** The routing field's value as Spark casts it to a string; null, with `decode` set, where the walk does not. */
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
        if (BodyStrings.isUuid(s.getLogicalType()) && !BodyStrings.uuid(buf, at, n)) {
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

  /** The event time field's value in epoch microseconds; null, with `decode` set, where the walk leaves it. */
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
      case INT:
        walkInt(t);
        return;
      case LONG:
        walkLong(t);
        return;
      case FLOAT:
        take(4);
        return;
      case DOUBLE:
        take(8);
        return;
      case STRING:
        walkString(t);
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
        items(s);
        return;
      default:
        throw dead(RULE_TRUNCATED);  // no other type is parsed
    }
  }

  private void walkInt(LogicalType t) throws Dead {
    int v = readInt();
    if (t instanceof LogicalTypes.Date && (v < DAY_YEAR_1 || v > DAY_YEAR_9999_END)) {
      throw dead(RULE_TIME_RANGE);
    }
    if (t instanceof LogicalTypes.TimeMillis && (v < 0 || v >= MS_PER_DAY)) {
      throw dead(RULE_TIME_OF_DAY);
    }
  }

  private void walkLong(LogicalType t) throws Dead {
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
  }

  private void walkString(LogicalType t) throws Dead {
    int n = length();
    checkString(t, take(n), n);
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
          checkString(null, take(k), k);
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

  /** A string's or bytes' length, checked against the bytes left before anything is read. */
  private int length() throws Dead {
    long n = readLong();  // a long to every reader: padded past an int's five bytes, it still reads
    if (n < 0 || n > limit - pos) {
      throw dead(RULE_BEYOND_BYTES);
    }
    if (n > MAX_LENGTH) {
      throw dead(RULE_TOO_LONG);
    }
    return (int) n;
  }

  /** The string at `at`, read by a strict UTF-8 decoder. */
  private String decoded(int at, int n) throws Dead {
    String v = BodyStrings.decoded(buf, at, n);
    if (v == null) {
      throw dead(RULE_NOT_UTF8);
    }
    return v;
  }

  /** A string's bytes checked as every reader reads them, and by its logical type. */
  private void checkString(LogicalType t, int at, int n) throws Dead {
    if (!BodyStrings.ascii(buf, at, n)) {  // the strict decoder decides
      decoded(at, n);
    }
    if (BodyStrings.isUuid(t) && !BodyStrings.uuid(buf, at, n)) {
      throw dead(RULE_NOT_UUID);
    }
  }
}
