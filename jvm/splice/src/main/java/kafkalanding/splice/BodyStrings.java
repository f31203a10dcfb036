package kafkalanding.splice;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

import org.apache.avro.LogicalType;

/** The strict walk's reading of a string's bytes: UTF-8 as the strictest reader decodes it, a uuid's form. */
final class BodyStrings {
  private BodyStrings() {}

  private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long HIGH_BITS = 0x8080808080808080L;
  private static final ThreadLocal<CharsetDecoder> UTF8 = ThreadLocal.withInitial(
      () -> StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT));

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

  /** The string `b[at, at + n)` read by a strict UTF-8 decoder; null: it is not UTF-8. */
  static String decoded(byte[] b, int at, int n) {
    try {
      return UTF8.get().decode(ByteBuffer.wrap(b, at, n)).toString();
    } catch (CharacterCodingException e) {
      return null;
    }
  }

  static boolean isUuid(LogicalType t) {
    return t != null && "uuid".equals(t.getName());
  }

  /** The `n` bytes at `at` are a UUID as RFC 4122 writes it (8-4-4-4-12 hex digits), the form
   * every reader of a uuid string takes (the decode step's value check, route.py). */
  static boolean uuid(byte[] b, int at, int n) {
    if (n != 36) {
      return false;
    }
    for (int i = 0; i < 36; i++) {
      byte c = b[at + i];
      boolean ok = (i == 8 || i == 13 || i == 18 || i == 23) ? c == '-'
          : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!ok) {
        return false;
      }
    }
    return true;
  }
}
