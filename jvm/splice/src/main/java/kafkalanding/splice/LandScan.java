package kafkalanding.splice;

import java.util.Locale;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/** The scan and its batch: one Spark task per offset range of the options. */
final class LandScan implements Scan, Batch {
  private final LandingJob job;

  LandScan(LandingJob job) {
    this.job = job;
  }

  @Override
  public StructType readSchema() {
    return ResultRows.SCHEMA;
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    if (job.archived != null) {
      return job.archived.clone();
    }
    InputPartition[] parts = new InputPartition[job.ranges.length];
    for (int i = 0; i < parts.length; i++) {
      parts[i] = new OffsetRange((int) job.ranges[i][0], job.ranges[i][1], job.ranges[i][2]);
    }
    return parts;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    // On the driver: the session's settings, as format("avro") and the splice writer take them.
    SparkSession spark = SparkSession.active();
    job.codec = spark.conf().get("spark.sql.avro.compression.codec", "snappy").toLowerCase(Locale.ROOT);
    job.deflateLevel = Integer.parseInt(spark.conf().get("spark.sql.avro.deflate.level", "-1"));
    job.hadoop = new SerializableConfiguration(spark.sessionState().newHadoopConf());
    return new RangeReader.Factory(job);
  }
}
