package kafkalanding.splice;

import java.io.IOException;
import java.io.OutputStream;
import java.util.Arrays;

import org.apache.avro.Schema;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DatumWriter;
import org.apache.avro.io.Encoder;
import org.apache.avro.io.EncoderFactory;

/**
 * One landed record as its file takes it: the body's bytes up to the end of the record they hold,
 * then the Kafka columns, encoded into a buffer of its own. A {@link LandingFile} keeps one,
 * refills it per record and appends it through {@link #WRITER}, which copies the two slices
 * straight into the file's block: a record allocates nothing (Avro's appendEncoded copies every
 * record into a new array first).
 */
final class SplicedRecord {
  /** Writes a record's two slices as they are; the landing file's schema describes the result. */
  static final DatumWriter<SplicedRecord> WRITER = new DatumWriter<>() {
    @Override
    public void setSchema(Schema schema) {}

    @Override
    public void write(SplicedRecord r, Encoder out) throws IOException {
      out.writeFixed(r.body, r.from, r.to - r.from);
      out.writeFixed(r.kafka.array(), 0, r.kafka.size());
    }
  };

  /**
   * A buffer whose array is read in place. Not a ByteArrayOutputStream: its writes are synchronized,
   * and the encoder writes a varint a byte at a time, so each record took a lock some twenty times
   * (a sixth of a landing task's samples in a profile of 6M small records).
   */
  private static final class Bytes extends OutputStream {
    private byte[] buf = new byte[256];
    private int count;

    @Override
    public void write(int b) {
      if (count == buf.length) {
        buf = Arrays.copyOf(buf, buf.length * 2);
      }
      buf[count++] = (byte) b;
    }

    @Override
    public void write(byte[] b, int off, int len) {
      if (count + len > buf.length) {
        buf = Arrays.copyOf(buf, Math.max(buf.length * 2, count + len));
      }
      System.arraycopy(b, off, buf, count, len);
      count += len;
    }

    void reset() {
      count = 0;
    }

    int size() {
      return count;
    }

    byte[] array() {
      return buf;
    }
  }

  private final Bytes kafka = new Bytes();
  private final BinaryEncoder enc = EncoderFactory.get().directBinaryEncoder(kafka, null);
  private byte[] body;
  private int from;
  private int to;

  /**
   * The next record: its body `body[from, to)`, then what the encoder returned is given (the Kafka
   * columns, encoded by {@link LandingFile}).
   */
  BinaryEncoder start(byte[] body, int from, int to) {
    this.body = body;
    this.from = from;
    this.to = to;
    kafka.reset();
    return enc;
  }
}
