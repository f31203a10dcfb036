package kafkalanding.splice;

import java.util.List;

import org.apache.avro.Schema;
import org.apache.avro.file.CodecFactory;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** Serialised to every task: the schemas travel as JSON and are parsed once per file. */
final class SpliceWriterFactory extends OutputWriterFactory {
  static final String BODY = "_body";
  /** The Kafka columns, in the landing schema's order, with the types Spark's Kafka source gives them. */
  static final List<String> KAFKA_COLUMNS = List.of(
      "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key", "_kafka_headers");

  private final String landingJson;
  private final String writerJson;
  private final String codec;
  private final int deflateLevel;
  private final StructType dataSchema;

  SpliceWriterFactory(String landingJson, String writerJson, String codec, int deflateLevel, StructType dataSchema) {
    this.landingJson = landingJson;
    this.writerJson = writerJson;
    this.codec = codec;
    this.deflateLevel = deflateLevel;
    this.dataSchema = dataSchema;
  }

  /** Throws, naming what is wrong, when the schemas or the input columns do not fit together. */
  void check() {
    Schema landing = new Schema.Parser().parse(landingJson);
    Schema writer = new Schema.Parser().parse(writerJson);
    List<Schema.Field> lf = landing.getFields();
    List<Schema.Field> wf = writer.getFields();
    if (lf.size() != wf.size() + KAFKA_COLUMNS.size()) {
      throw new IllegalArgumentException(SpliceFileFormat.SHORT_NAME + ": the landing schema has " + lf.size()
          + " fields, not the writer schema's " + wf.size() + " plus the " + KAFKA_COLUMNS.size() + " Kafka columns");
    }
    for (int i = 0; i < lf.size(); i++) {
      String expected = i < wf.size() ? wf.get(i).name() : KAFKA_COLUMNS.get(i - wf.size());
      Schema actual = lf.get(i).schema();
      if (!lf.get(i).name().equals(expected)
          || (i < wf.size() && !actual.toString().equals(wf.get(i).schema().toString()))) {
        throw new IllegalArgumentException(SpliceFileFormat.SHORT_NAME + ": landing field " + i + " ("
            + lf.get(i).name() + ") is not the writer schema's field " + expected + " with the same type");
      }
    }
    expect(BODY, DataTypes.BinaryType);
    expect("_kafka_topic", DataTypes.StringType);
    expect("_kafka_partition", DataTypes.IntegerType);
    expect("_kafka_offset", DataTypes.LongType);
    expect("_kafka_timestamp", DataTypes.TimestampType);
    expect("_kafka_key", DataTypes.BinaryType);
    DataType headers = dataSchema.apply(index("_kafka_headers")).dataType();
    if (!(headers instanceof ArrayType a) || !(a.elementType() instanceof StructType h) || h.fields().length != 2
        || !h.fields()[0].dataType().equals(DataTypes.StringType)
        || !h.fields()[1].dataType().equals(DataTypes.BinaryType)) {
      throw new IllegalArgumentException(SpliceFileFormat.SHORT_NAME + ": _kafka_headers is " + headers.simpleString()
          + ", not array<struct<key:string,value:binary>>");
    }
    codec();
  }

  private void expect(String column, DataType type) {
    DataType actual = dataSchema.apply(index(column)).dataType();
    if (!actual.equals(type)) {
      throw new IllegalArgumentException(SpliceFileFormat.SHORT_NAME + ": column " + column + " is "
          + actual.simpleString() + ", not " + type.simpleString());
    }
  }

  int index(String column) {
    StructField[] fields = dataSchema.fields();
    for (int i = 0; i < fields.length; i++) {
      if (fields[i].name().equals(column)) {
        return i;
      }
    }
    throw new IllegalArgumentException(SpliceFileFormat.SHORT_NAME + ": the input has no column " + column
        + " (it has " + String.join(", ", dataSchema.fieldNames()) + ")");
  }

  CodecFactory codec() {
    return codec(codec, deflateLevel);
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

  @Override
  public String getFileExtension(TaskAttemptContext context) {
    return ".avro";
  }

  @Override
  public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
    return new SpliceWriter(path, context.getConfiguration(), new Schema.Parser().parse(landingJson), codec(), this);
  }
}
