package kafkalanding.splice;

import java.io.Closeable;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;

/**
 * One landing file, whichever writer fills it (the splice writer from Spark rows, the direct
 * landing from Kafka's records): its container (the landing schema, the codec, the header keys)
 * and each record's body followed by the Kafka columns, encoded as the landing schema has them
 * (avro_schemas.META_FIELDS, in {@link #KAFKA_COLUMNS}' order).
 */
final class LandingFile implements Closeable {
  /** The Kafka columns, in the landing schema's order, after the writer schema's fields. */
  static final List<String> KAFKA_COLUMNS = List.of(
      "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key", "_kafka_headers");

  private final DataFileWriter<SplicedRecord> file;
  private final SplicedRecord record = new SplicedRecord();
  private BinaryEncoder enc;  // the record being appended: its Kafka columns

  LandingFile(Schema landing, CodecFactory codec, OutputStream out) throws IOException {
    file = new DataFileWriter<>(SplicedRecord.WRITER);
    file.setCodec(codec);
    // As Spark's Avro writer does: its readers take a file with this key as written by a Spark
    // that writes dates and timestamps in the proleptic Gregorian calendar, as this one does.
    file.setMeta("org.apache.spark.version", org.apache.spark.package$.MODULE$.SPARK_VERSION());
    file.create(landing, out);
  }

  /** Spark's Avro codec setting ({@code spark.sql.avro.compression.codec}) as Avro's codec. */
  static CodecFactory codec(String name, int deflateLevel) {
    switch (name) {
      case "uncompressed":
        return CodecFactory.nullCodec();
      case "snappy":  // the default: Avro's blocks, without a new buffer per block
        return ReusedSnappyCodec.FACTORY;
      case "deflate":
        return CodecFactory.deflateCodec(deflateLevel);
      default:
        return CodecFactory.fromString(name);
    }
  }

  /**
   * Starts the next record: its body `body[from, to)`, then the Kafka columns up to the headers;
   * the key is `key[keyFrom, keyFrom + keyLength)`, or null. An append gives the headers.
   */
  LandingFile start(byte[] body, int from, int to, byte[] topic, int partition, long offset, long timestampMs,
      byte[] key, int keyFrom, int keyLength) throws IOException {
    enc = record.start(body, from, to);
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
    return this;
  }

  /** Appends the record started, with Kafka's headers: none is a null list, as Spark's Kafka source gives it. */
  void append(Header[] headers) throws IOException {
    if (headers.length == 0) {
      enc.writeIndex(0);
    } else {
      enc.writeIndex(1);
      enc.writeArrayStart();
      enc.setItemCount(headers.length);
      for (Header h : headers) {
        header(h.key().getBytes(StandardCharsets.UTF_8), h.value());
      }
      enc.writeArrayEnd();
    }
    file.append(record);
  }

  /** Appends the record started, with the headers column of Spark's Kafka source (null: a null list). */
  void append(ArrayData headers) throws IOException {
    if (headers == null) {
      enc.writeIndex(0);
    } else {
      int n = headers.numElements();
      enc.writeIndex(1);
      enc.writeArrayStart();
      enc.setItemCount(n);
      for (int i = 0; i < n; i++) {
        InternalRow h = headers.getStruct(i, 2);
        header(h.getUTF8String(0).getBytes(), h.isNullAt(1) ? null : h.getBinary(1));
      }
      enc.writeArrayEnd();
    }
    file.append(record);
  }

  private void header(byte[] key, byte[] value) throws IOException {
    enc.startItem();
    enc.writeBytes(key);
    if (value == null) {
      enc.writeIndex(0);
    } else {
      enc.writeIndex(1);
      enc.writeBytes(value);
    }
  }

  @Override
  public void close() throws IOException {
    file.close();
  }
}
