package kafkalanding.splice;

import java.io.ByteArrayOutputStream;
import java.io.IOException;

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

  /** A buffer whose array is read in place. */
  private static final class Bytes extends ByteArrayOutputStream {
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
