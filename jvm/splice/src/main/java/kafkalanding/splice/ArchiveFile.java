package kafkalanding.splice;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.avro.Schema;
import org.apache.avro.file.DataFileStream;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One archived file read record by record, in its order (offset order, as written): {@link
 * #advance} moves to the next record, whose offset is {@link #offset} and whose row is {@link #row}.
 */
abstract class ArchiveFile implements java.io.Closeable, SourceRecord {
  private static final Header[] NO_HEADERS = new Header[0];
  final String path;
  long offset;

  ArchiveFile(String path) {
    this.path = path;
  }

  @Override
  public long offset() {
    return offset;
  }

  static ByteBuffer wrap(byte[] b) {
    return b == null ? null : ByteBuffer.wrap(b);
  }

  /** Kafka's headers of byte keys and values; none (null) is none, as the landing writes it. */
  static Header[] headers(byte[][] keys, byte[][] values) {
    if (keys == null) {
      return NO_HEADERS;
    }
    Header[] out = new Header[keys.length];
    for (int i = 0; i < keys.length; i++) {
      out[i] = new RecordHeader(new String(keys[i], StandardCharsets.UTF_8), values[i]);
    }
    return out;
  }

  /** The same headers as Spark's Kafka source's column holds them. */
  static ArrayData headerColumn(byte[][] keys, byte[][] values) {
    if (keys == null) {
      return null;
    }
    Object[] out = new Object[keys.length];
    for (int i = 0; i < keys.length; i++) {
      out[i] = new GenericInternalRow(new Object[] {UTF8String.fromBytes(keys[i]), values[i]});
    }
    return new GenericArrayData(out);
  }

  /** The next record, false past the last. */
  abstract boolean advance() throws IOException;

  /** The current record as a row of {@link ArchiveSource#SCHEMA}. */
  abstract InternalRow row();

  static ArchiveFile open(String path, int schemaId, InputStream in) throws IOException {
    return schemaId == Contract.NO_SCHEMA_ID ? new DeadLetters(path, in) : new Landing(path, schemaId, in);
  }

  static IOException broken(String path, String why) {
    return new IOException(Contract.ARCHIVE_FORMAT + ": archived file " + path + " " + why
        + ": the archive of its hour cannot be landed again; restore the file from a copy, or land the hour from "
        + "Kafka while it holds its offsets");
  }

  /**
   * A landing file: each record is the body as produced, then the Kafka columns (the landing
   * schema's last fields, {@link LandingFile#KAFKA_COLUMNS}). The body's end is found by walking
   * the writer schema's fields, the file's schema less the Kafka columns; blocks are read whole,
   * decompressed, and no field is decoded into a value.
   */
  static final class Landing extends ArchiveFile {
    private final DataFileStream<Object> stream;
    private final BodyCheck body;
    private final BodyCheck.Verdict verdict = new BodyCheck.Verdict();
    private final byte[] framing;
    private byte[] buf;
    private int pos;
    private int limit;
    private long left;
    private long record;
    private byte[] value;
    private UTF8String topic;
    private int partition;
    private long ms;
    private byte[] key;
    private byte[][] headerKeys;  // null: no headers
    private byte[][] headerValues;

    Landing(String path, int schemaId, InputStream in) throws IOException {
      super(path);
      stream = new DataFileStream<>(in, new GenericDatumReader<>());
      Schema landing = stream.getSchema();
      List<Schema.Field> fields = landing.getType() == Schema.Type.RECORD ? landing.getFields() : List.of();
      int n = fields.size() - LandingFile.KAFKA_COLUMNS.size();
      for (int i = 0; i < LandingFile.KAFKA_COLUMNS.size(); i++) {
        if (n < 0 || !fields.get(n + i).name().equals(LandingFile.KAFKA_COLUMNS.get(i))) {
          throw broken(path, "is not a landing file: its schema does not end with the Kafka columns "
              + LandingFile.KAFKA_COLUMNS);
        }
      }
      List<Schema.Field> writer = new ArrayList<>();
      for (Schema.Field f : fields.subList(0, n)) {
        writer.add(new Schema.Field(f, f.schema()));
      }
      body = new BodyCheck(Schema.createRecord(landing.getName(), landing.getDoc(), landing.getNamespace(), false,
          writer));
      framing = new byte[] {0, (byte) (schemaId >>> 24), (byte) (schemaId >>> 16), (byte) (schemaId >>> 8),
          (byte) schemaId};
    }

    @Override
    boolean advance() throws IOException {
      while (left == 0) {
        if (!stream.hasNext()) {
          return false;
        }
        left = stream.getBlockCount();
        ByteBuffer block = stream.nextBlock();
        if (!block.hasArray()) {
          byte[] copy = new byte[block.remaining()];
          block.duplicate().get(copy);
          block = ByteBuffer.wrap(copy);
        }
        buf = block.array();
        pos = block.arrayOffset() + block.position();
        limit = block.arrayOffset() + block.limit();
      }
      record++;
      int end = body.end(buf, pos, limit, verdict);
      if (end < 0) {
        throw broken(path, "holds a record (the " + record + ". of the file) whose body breaks body rule "
            + verdict.rule + ": it is not what landing wrote");
      }
      value = new byte[framing.length + end - pos];
      System.arraycopy(framing, 0, value, 0, framing.length);
      System.arraycopy(buf, pos, value, framing.length, end - pos);
      pos = end;
      try {
        topic = UTF8String.fromBytes(bytes());
        partition = Math.toIntExact(varLong());
        offset = varLong();
        ms = varLong();
        key = varLong() == 0 ? null : bytes();
        headerKeys = headerValues = null;
        if (varLong() != 0) {
          readHeaders();
        }
      } catch (ArithmeticException | IndexOutOfBoundsException | NegativeArraySizeException e) {
        throw broken(path, "holds a record (the " + record + ". of the file) whose Kafka columns are cut short");
      }
      if (pos > limit) {
        throw broken(path, "holds a record (the " + record + ". of the file) that runs past its block");
      }
      left--;
      return true;
    }

    private void readHeaders() {
      List<byte[]> keys = new ArrayList<>();
      List<byte[]> values = new ArrayList<>();
      for (long n = varLong(); n != 0; n = varLong()) {
        if (n < 0) {  // a block with its byte size
          n = -n;
          varLong();
        }
        for (long i = 0; i < n; i++) {
          keys.add(bytes());
          values.add(varLong() == 0 ? null : bytes());
        }
      }
      headerKeys = keys.toArray(new byte[0][]);
      headerValues = values.toArray(new byte[0][]);
    }

    private long varLong() {
      long v = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        if (pos >= limit) {
          throw new IndexOutOfBoundsException();
        }
        int b = buf[pos++] & 0xff;
        v |= (long) (b & 0x7f) << shift;
        if (b < 0x80) {
          return (v >>> 1) ^ -(v & 1);
        }
      }
      throw new IndexOutOfBoundsException();
    }

    private byte[] bytes() {
      int n = Math.toIntExact(varLong());
      if (n < 0 || n > limit - pos) {
        throw new IndexOutOfBoundsException();
      }
      byte[] out = new byte[n];
      System.arraycopy(buf, pos, out, 0, n);
      pos += n;
      return out;
    }

    @Override
    InternalRow row() {
      return new GenericInternalRow(new Object[] {key, value, topic, partition, offset, ms,
          headerColumn(headerKeys, headerValues), null});
    }

    @Override
    public long timestamp() {
      return ms;
    }

    @Override
    public ByteBuffer value() {
      return wrap(value);
    }

    @Override
    public ByteBuffer key() {
      return wrap(key);
    }

    @Override
    public Header[] headers() {
      return headers(headerKeys, headerValues);
    }

    @Override
    public void close() throws IOException {
      stream.close();
    }
  }

  /** A dead-letter file (avro_schemas.DEAD_LETTER_SCHEMA): its records kept whole, with their reasons. */
  static final class DeadLetters extends ArchiveFile {
    private final DataFileStream<GenericRecord> stream;
    private GenericRecord current;

    DeadLetters(String path, InputStream in) throws IOException {
      super(path);
      stream = new DataFileStream<>(in, new GenericDatumReader<>());
      for (String f : Contract.DEAD_LETTER_FIELDS) {
        if (stream.getSchema().getType() != Schema.Type.RECORD || stream.getSchema().getField(f) == null) {
          throw broken(path, "is not a dead-letter file: its schema has no field " + f);
        }
      }
    }

    @Override
    boolean advance() throws IOException {
      if (!stream.hasNext()) {
        return false;
      }
      current = stream.next(current);
      offset = (Long) field(2);
      return true;
    }

    private static byte[] bytes(Object v) {
      if (v == null) {
        return null;
      }
      ByteBuffer b = ((ByteBuffer) v).duplicate();
      byte[] out = new byte[b.remaining()];
      b.get(out);
      return out;
    }

    /** The current record's field by its place in {@link Contract#DEAD_LETTER_FIELDS}. */
    private Object field(int i) {
      return current.get(Contract.DEAD_LETTER_FIELDS.get(i));
    }

    /** Its headers' keys and values, in order; keys null for none. */
    private byte[][][] headerFields() {
      Object hs = field(6);
      if (hs == null) {
        return new byte[][][] {null, null};
      }
      List<?> list = (List<?>) hs;
      byte[][] keys = new byte[list.size()][];
      byte[][] values = new byte[list.size()][];
      for (int i = 0; i < keys.length; i++) {
        GenericRecord h = (GenericRecord) list.get(i);
        keys[i] = h.get(0).toString().getBytes(StandardCharsets.UTF_8);
        values[i] = bytes(h.get(1));
      }
      return new byte[][][] {keys, values};
    }

    @Override
    InternalRow row() {
      byte[][][] h = headerFields();
      return new GenericInternalRow(new Object[] {bytes(field(4)), bytes(field(5)), UTF8String.fromString(
          field(0).toString()), field(1), offset, field(3), headerColumn(h[0], h[1]),
          UTF8String.fromString(field(8).toString())});
    }

    @Override
    public long timestamp() {
      Object ms = field(3);
      return ms == null ? Long.MIN_VALUE : (Long) ms;
    }

    @Override
    public ByteBuffer value() {
      return wrap(bytes(field(5)));
    }

    @Override
    public ByteBuffer key() {
      return wrap(bytes(field(4)));
    }

    @Override
    public Header[] headers() {
      byte[][][] h = headerFields();
      return headers(h[0], h[1]);
    }

    @Override
    public void close() throws IOException {
      stream.close();
    }
  }
}
