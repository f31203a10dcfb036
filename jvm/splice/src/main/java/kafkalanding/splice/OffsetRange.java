package kafkalanding.splice;

import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: one Kafka partition from `start` up to `end`. */
final class OffsetRange implements InputPartition {
  private static final long serialVersionUID = 1L;
  final int partition;
  final long start;
  final long end;

  OffsetRange(int partition, long start, long end) {
    this.partition = partition;
    this.start = start;
    this.end = end;
  }

  /** The range as messages name it. */
  String where(String topic) {
    return topic + " partition " + partition + " offsets " + start + ".." + end;
  }
}
