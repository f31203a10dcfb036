package kafkalanding.splice;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.OutputWriter;

/**
 * One landing file written from Spark rows. Each record is appended already encoded: the body's
 * bytes as produced, then the Kafka columns ({@link LandingFile}). Every body that gets here was
 * read to its last byte by the strict walk ({@link BodyWalk}), which refuses bytes after a record:
 * the whole body is the record the walk read, so nothing here looks for where a record ends
 * (Avro's skip, which trusts the byte sizes of sized blocks where Avro's reader ignores them, cut
 * the wrong record once).
 */
final class SpliceWriter extends OutputWriter {
  private final String path;
  private final LandingFile file;
  private final int body, topic, partition, offset, timestamp, key, headers;

  /** `columns`: where the body column, then each of the Kafka columns, is in the input rows. */
  SpliceWriter(String path, Configuration conf, Schema landing, CodecFactory codec, int[] columns) {
    this.path = path;
    body = columns[0];
    topic = columns[1];
    partition = columns[2];
    offset = columns[3];
    timestamp = columns[4];
    key = columns[5];
    headers = columns[6];
    try {
      Path p = new Path(path);
      file = new LandingFile(landing, codec, p.getFileSystem(conf).create(p, false));
    } catch (IOException e) {
      throw new UncheckedIOException("cannot create the landing file " + path, e);
    }
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
      file.start(bytes, 0, bytes.length, row.getUTF8String(topic).getBytes(), row.getInt(partition),
          row.getLong(offset), Math.floorDiv(row.getLong(timestamp), 1000L), k, 0, k == null ? 0 : k.length)
          .append(row.isNullAt(headers) ? null : row.getArray(headers));
    } catch (IOException e) {
      throw new UncheckedIOException("cannot write " + where(row) + " to the landing file " + path, e);
    }
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
