package kafkalanding.splice;

import static kafkalanding.splice.Contract.OPTION_AVRO_SCHEMA;
import static kafkalanding.splice.Contract.OPTION_WRITER_SCHEMA;
import static kafkalanding.splice.Contract.SPLICE_FORMAT;

import java.io.Serializable;
import java.util.Locale;
import java.util.Map;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.mapreduce.Job;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.FileFormat;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Writes landing files from records as they arrived: each record's Avro body (the bytes after
 * the Confluent header) followed by the Avro encoding of the Kafka columns. Avro encodes a record
 * as the concatenation of its fields, so that is the landing record of the writer schema plus the
 * Kafka columns, without decoding and re-encoding a single field. Write-only: landing files are
 * Avro files, read with format("avro").
 *
 * <p>Options: {@code avroSchema}, the landing schema (the writer schema's fields, then the Kafka
 * columns) and {@code writerSchema}, the producer's schema the bodies were encoded with. The
 * input columns: {@code _body} (binary) and the Kafka columns {@code _kafka_topic},
 * {@code _kafka_partition}, {@code _kafka_offset}, {@code _kafka_timestamp}, {@code _kafka_key},
 * {@code _kafka_headers}, as Spark's Kafka source types them. The codec is Spark's Avro codec
 * setting ({@code spark.sql.avro.compression.codec}), as for format("avro").
 */
public final class SpliceFileFormat implements FileFormat, DataSourceRegister, Serializable {
  @Override
  public String shortName() {
    return SPLICE_FORMAT;
  }

  @Override
  public String toString() {
    return SPLICE_FORMAT;
  }

  @Override
  public Option<StructType> inferSchema(
      SparkSession spark, scala.collection.immutable.Map<String, String> options, Seq<FileStatus> files) {
    throw new UnsupportedOperationException(
        SPLICE_FORMAT + " only writes landing files; read them with format(\"avro\")");
  }

  @Override
  public OutputWriterFactory prepareWrite(
      SparkSession spark, Job job, scala.collection.immutable.Map<String, String> options, StructType dataSchema) {
    Map<String, String> opts = CollectionConverters.asJava(options);
    String landing = required(opts, OPTION_AVRO_SCHEMA);
    String writer = required(opts, OPTION_WRITER_SCHEMA);
    String codec = spark.conf().get("spark.sql.avro.compression.codec", "snappy").toLowerCase(Locale.ROOT);
    int level = Integer.parseInt(spark.conf().get("spark.sql.avro.deflate.level", "-1"));
    SpliceWriterFactory factory = new SpliceWriterFactory(landing, writer, codec, level, dataSchema);
    factory.check();  // bad schemas or columns fail here, on the driver, before any task runs
    return factory;
  }

  private static String required(Map<String, String> opts, String name) {
    for (Map.Entry<String, String> e : opts.entrySet()) {
      if (e.getKey().equalsIgnoreCase(name)) {
        return e.getValue();
      }
    }
    throw new IllegalArgumentException(SPLICE_FORMAT + " needs the option " + name);
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof SpliceFileFormat;
  }

  @Override
  public int hashCode() {
    return SPLICE_FORMAT.hashCode();
  }
}
