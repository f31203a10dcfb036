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
 * then the Kafka columns, encoded into a buffer of its own. Both writers fill one and append it
 * through {@link #WRITER}, which copies the two slices straight into the file's block: a record
 * allocates nothing (Avro's appendEncoded copies every record into a new array first). A writer
 * keeps one and refills it per record.
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
   * The next record: its body `body[from, to)`, then the Kafka columns up to the headers, encoded as
   * the landing schema has them (META_FIELDS); the key is `key[keyFrom, keyFrom + keyLength)`, or
   * null. The headers follow through the encoder returned.
   */
  BinaryEncoder start(byte[] body, int from, int to, byte[] topic, int partition, long offset, long timestampMs,
      byte[] key, int keyFrom, int keyLength) throws IOException {
    this.body = body;
    this.from = from;
    this.to = to;
    kafka.reset();
    enc.writeBytes(topic);  // a string is encoded as bytes are: the length, then the UTF-8 bytes
    enc.writeInt(partition);
    enc.writeLong(offset);
    enc.writeLong(timestampMs);
    if (key == null) {
      enc.writeIndex(0);
    } else {
      enc.writeIndex(1);
      enc.writeBytes(key, keyFrom, keyLength);
    }
    return enc;
  }
}
