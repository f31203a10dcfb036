package kafkalanding.splice;

import java.io.IOException;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.util.SerializableConfiguration;

/** One segment's records as rows of {@link ArchiveSource#SCHEMA}, in offset order ({@link ArchiveMerge}). */
final class ArchiveReader implements PartitionReader<InternalRow> {
  /** Sent to the tasks: a reader per segment. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final SerializableConfiguration hadoop;

    Factory(SerializableConfiguration hadoop) {
      this.hadoop = hadoop;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new ArchiveReader(new ArchiveMerge((ArchiveSegment) partition, hadoop.value()));
    }
  }

  private final ArchiveMerge merge;
  private InternalRow current;

  ArchiveReader(ArchiveMerge merge) {
    this.merge = merge;
  }

  @Override
  public boolean next() throws IOException {
    ArchiveFile f = merge.next();
    if (f == null) {
      return false;
    }
    current = f.row();
    return true;
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() throws IOException {
    merge.close();
  }
}
