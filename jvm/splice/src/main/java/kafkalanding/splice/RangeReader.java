package kafkalanding.splice;

import java.io.IOException;
import java.util.Iterator;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** Lands one range on the first call to next(), then hands out what it wrote and counted. */
final class RangeReader implements PartitionReader<InternalRow> {
  /** Sent to the tasks: a reader per range. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final LandingJob job;

    Factory(LandingJob job) {
      this.job = job;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      if (partition instanceof ArchiveSegment) {  // an hour landed again from its archive
        ArchiveSegment s = (ArchiveSegment) partition;
        return new RangeReader(job, new OffsetRange(s.partition, s.start, s.end), s);
      }
      return new RangeReader(job, (OffsetRange) partition, null);
    }
  }

  private final LandingJob job;
  private final OffsetRange range;
  private final ArchiveSegment archived;
  private Iterator<InternalRow> results;
  private InternalRow current;

  RangeReader(LandingJob job, OffsetRange range, ArchiveSegment archived) {
    this.job = job;
    this.range = range;
    this.archived = archived;
  }

  @Override
  public boolean next() throws IOException {
    if (results == null) {
      results = new RangeLanding(job, range, archived).land().iterator();
    }
    if (!results.hasNext()) {
      return false;
    }
    current = results.next();
    return true;
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() {}
}
