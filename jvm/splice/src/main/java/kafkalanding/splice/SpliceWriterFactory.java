package kafkalanding.splice;

import static kafkalanding.splice.Contract.BODY_COLUMN;
import static kafkalanding.splice.Contract.SPLICE_FORMAT;
import static kafkalanding.splice.LandingFile.KAFKA_COLUMNS;

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
      throw new IllegalArgumentException(SPLICE_FORMAT + ": the landing schema has " + lf.size()
          + " fields, not the writer schema's " + wf.size() + " plus the " + KAFKA_COLUMNS.size() + " Kafka columns");
    }
    for (int i = 0; i < lf.size(); i++) {
      String expected = i < wf.size() ? wf.get(i).name() : KAFKA_COLUMNS.get(i - wf.size());
      Schema actual = lf.get(i).schema();
      if (!lf.get(i).name().equals(expected)
          || (i < wf.size() && !actual.toString().equals(wf.get(i).schema().toString()))) {
        throw new IllegalArgumentException(SPLICE_FORMAT + ": landing field " + i + " ("
            + lf.get(i).name() + ") is not the writer schema's field " + expected + " with the same type");
      }
    }
    expect(BODY_COLUMN, DataTypes.BinaryType);
    expect("_kafka_topic", DataTypes.StringType);
    expect("_kafka_partition", DataTypes.IntegerType);
    expect("_kafka_offset", DataTypes.LongType);
    expect("_kafka_timestamp", DataTypes.TimestampType);
    expect("_kafka_key", DataTypes.BinaryType);
    DataType headers = dataSchema.apply(index("_kafka_headers")).dataType();
    if (!(headers instanceof ArrayType a) || !(a.elementType() instanceof StructType h) || h.fields().length != 2
        || !h.fields()[0].dataType().equals(DataTypes.StringType)
        || !h.fields()[1].dataType().equals(DataTypes.BinaryType)) {
      throw new IllegalArgumentException(SPLICE_FORMAT + ": _kafka_headers is " + headers.simpleString()
          + ", not array<struct<key:string,value:binary>>");
    }
    codec();
  }

  private void expect(String column, DataType type) {
    DataType actual = dataSchema.apply(index(column)).dataType();
    if (!actual.equals(type)) {
      throw new IllegalArgumentException(SPLICE_FORMAT + ": column " + column + " is "
          + actual.simpleString() + ", not " + type.simpleString());
    }
  }

  private int index(String column) {
    StructField[] fields = dataSchema.fields();
    for (int i = 0; i < fields.length; i++) {
      if (fields[i].name().equals(column)) {
        return i;
      }
    }
    throw new IllegalArgumentException(SPLICE_FORMAT + ": the input has no column " + column
        + " (it has " + String.join(", ", dataSchema.fieldNames()) + ")");
  }

  private CodecFactory codec() {
    return LandingFile.codec(codec, deflateLevel);
  }

  /** Where the body column, then each Kafka column, is in the input rows. */
  private int[] columns() {
    int[] at = new int[1 + KAFKA_COLUMNS.size()];
    at[0] = index(BODY_COLUMN);
    for (int i = 1; i < at.length; i++) {
      at[i] = index(KAFKA_COLUMNS.get(i - 1));
    }
    return at;
  }

  @Override
  public String getFileExtension(TaskAttemptContext context) {
    return ".avro";
  }

  @Override
  public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
    return new SpliceWriter(path, context.getConfiguration(), new Schema.Parser().parse(landingJson), codec(),
        columns());
  }
}
