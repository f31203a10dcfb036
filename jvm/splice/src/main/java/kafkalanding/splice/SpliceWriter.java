package kafkalanding.splice;

import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;

import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.execution.datasources.OutputWriter;

/**
 * One landing file. Each record is appended already encoded: the body's bytes as produced, then
 * the Kafka columns, encoded here. Every body that gets here was read to its last byte by the
 * strict walk (FastCheck), which refuses bytes after a record: the whole body is the record the
 * walk read, so nothing here looks for where a record ends (Avro's skip, which trusts the byte
 * sizes of sized blocks where Avro's reader ignores them, cut the wrong record once).
 */
final class SpliceWriter extends OutputWriter {
  private final String path;
  private final DataFileWriter<SplicedRecord> file;
  private final SplicedRecord record = new SplicedRecord();
  private final int body, topic, partition, offset, timestamp, key, headers;

  SpliceWriter(String path, Configuration conf, Schema landing, CodecFactory codec, SpliceWriterFactory columns) {
    this.path = path;
    body = columns.index(SpliceWriterFactory.BODY);
    topic = columns.index("_kafka_topic");
    partition = columns.index("_kafka_partition");
    offset = columns.index("_kafka_offset");
    timestamp = columns.index("_kafka_timestamp");
    key = columns.index("_kafka_key");
    headers = columns.index("_kafka_headers");
    try {
      Path p = new Path(path);
      file = landingFile(landing, codec, p.getFileSystem(conf).create(p, false));
    } catch (IOException e) {
      throw new UncheckedIOException("cannot create the landing file " + path, e);
    }
  }

  /** A landing file's container: its schema, codec and header keys, whichever writer fills it. */
  static DataFileWriter<SplicedRecord> landingFile(Schema landing, CodecFactory codec, OutputStream out)
      throws IOException {
    DataFileWriter<SplicedRecord> file = new DataFileWriter<>(SplicedRecord.WRITER);
    file.setCodec(codec);
    // As Spark's Avro writer does: its readers take a file with this key as written by a Spark
    // that writes dates and timestamps in the proleptic Gregorian calendar, as this one does.
    file.setMeta("org.apache.spark.version", org.apache.spark.package$.MODULE$.SPARK_VERSION());
    return file.create(landing, out);
  }

  @Override
  public void write(InternalRow row) {
    if (row.isNullAt(body)) {  // a null value is a dead letter before any write
      throw new IllegalStateException(where(row) + " has no body; nothing of this landing is published");
    }
    byte[] bytes = row.getBinary(body);
    try {
      // Spark holds the Kafka timestamp in microseconds; the column is timestamp-millis, as
      // Spark's Avro writer converts it (floor division).
      byte[] k = row.isNullAt(key) ? null : row.getBinary(key);
      BinaryEncoder enc = record.start(bytes, 0, bytes.length, row.getUTF8String(topic).getBytes(),
          row.getInt(partition), row.getLong(offset), Math.floorDiv(row.getLong(timestamp), 1000L),
          k, 0, k == null ? 0 : k.length);
      if (row.isNullAt(headers)) {
        enc.writeIndex(0);
      } else {
        enc.writeIndex(1);
        writeHeaders(enc, row.getArray(headers));
      }
      file.append(record);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot write " + where(row) + " to the landing file " + path, e);
    }
  }

  private static void writeHeaders(BinaryEncoder enc, ArrayData list) throws IOException {
    int n = list.numElements();
    enc.writeArrayStart();
    enc.setItemCount(n);
    for (int i = 0; i < n; i++) {
      enc.startItem();
      InternalRow h = list.getStruct(i, 2);
      enc.writeBytes(h.getUTF8String(0).getBytes());
      if (h.isNullAt(1)) {
        enc.writeIndex(0);
      } else {
        enc.writeIndex(1);
        enc.writeBytes(h.getBinary(1));
      }
    }
    enc.writeArrayEnd();
  }

  private String where(InternalRow row) {
    return "the record at " + row.getUTF8String(topic) + " partition " + row.getInt(partition) + " offset "
        + row.getLong(offset);
  }

  @Override
  public void close() {
    try {
      file.close();
    } catch (IOException e) {
      throw new UncheckedIOException("cannot close the landing file " + path, e);
    }
  }

  @Override
  public String path() {
    return path;
  }
}
