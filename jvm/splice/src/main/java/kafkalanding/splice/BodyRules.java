package kafkalanding.splice;

/**
 * The rules the strict walk ({@link BodyWalk}) refuses a body by, a dead letter's reason. Their
 * words are in avro_landing/body_rules.py, under the same numbers (test_body_rules pins the two
 * sides): the body ends before its record does; a length or item count is negative or runs past
 * the bytes left (items of zero width, such as nulls, are walked one by one, up to {@link
 * #MAX_ITEMS} an array); an array or map block gives a byte size that is not the size of its
 * items (Avro's reader ignores it, Avro's skip trusts it); more than {@link #MAX_ITEMS} items; a
 * union or enum index out of range; a boolean byte other than 0 or 1 (Java reads 2 as false,
 * fastavro as true); an int varint with bits past 32 or a long's past 64 (Java drops them,
 * fastavro keeps them); bytes after the end of the record; a string that is not UTF-8; a date or
 * timestamp outside years 1-9999; a time of day outside [0, 24 h); a uuid string that is not
 * 8-4-4-4-12 hex digits; a decimal with more digits than its precision, or of zero bytes; a
 * string or bytes longer than {@link #MAX_LENGTH}. A varint padded with zero groups is read alike
 * by every reader, and lands.
 *
 * <p>The engine runs Avro's reader with the same limits ({@code org.apache.avro.limits.*},
 * spark_setup.AVRO_LIMITS), so a body the walk lets through never meets a reader's limit.
 */
final class BodyRules {
  private BodyRules() {}

  static final int RULE_TRUNCATED = 1;
  static final int RULE_BEYOND_BYTES = 2;
  static final int RULE_LYING_BLOCK = 3;
  static final int RULE_TOO_MANY_ITEMS = 4;
  static final int RULE_BAD_INDEX = 5;
  static final int RULE_BAD_BOOLEAN = 6;
  static final int RULE_BAD_VARINT = 7;
  static final int RULE_TRAILING_BYTES = 8;
  static final int RULE_NOT_UTF8 = 9;
  static final int RULE_TIME_RANGE = 10;
  static final int RULE_TIME_OF_DAY = 11;
  static final int RULE_NOT_UUID = 12;
  static final int RULE_DECIMAL_WIDE = 13;
  static final int RULE_TOO_LONG = 14;
  static final int RULE_EMPTY_DECIMAL = 15;

  /** Items of one array or map, over all its blocks: Avro's collection limit on the engine too. */
  static final int MAX_ITEMS = 10_000_000;
  /** Bytes of one string or bytes value: Avro's string and bytes limits on the engine too. */
  static final int MAX_LENGTH = 256 << 20;

  // Years 1-9999, as the decode step's value checks bound them (route.py).
  static final long MS_YEAR_1 = -62_135_596_800_000L;
  static final long MS_YEAR_10000 = 253_402_300_800_000L;
  static final int DAY_YEAR_1 = -719_162;  // 0001-01-01
  static final int DAY_YEAR_9999_END = 2_932_896;  // 9999-12-31
  static final long MS_PER_DAY = 86_400_000L;
}
