package kafkalanding.splice;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.PriorityQueue;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.util.SerializableConfiguration;

/**
 * One segment's records, every file of it merged by offset: what a Kafka consumer of the range
 * would have returned. Records outside the segment (a dead-letter file holds a partition's hour)
 * are passed over; an offset in two files fails, naming both.
 */
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
      return new ArchiveReader((ArchiveSegment) partition, hadoop);
    }
  }

  private final ArchiveSegment segment;
  private final SerializableConfiguration hadoop;
  private final List<ArchiveFile> files = new ArrayList<>();
  private final PriorityQueue<ArchiveFile> heads = new PriorityQueue<>((a, b) -> Long.compare(a.offset, b.offset));
  private boolean opened;
  private long lastOffset = Long.MIN_VALUE;
  private String lastPath;
  private InternalRow current;

  ArchiveReader(ArchiveSegment segment, SerializableConfiguration hadoop) {
    this.segment = segment;
    this.hadoop = hadoop;
  }

  private void open() throws IOException {
    for (int i = 0; i < segment.paths.length; i++) {
      Path p = new Path(segment.paths[i]);
      ArchiveFile f;
      try {
        f = ArchiveFile.open(segment.paths[i], segment.schemaIds[i], p.getFileSystem(hadoop.value()).open(p));
      } catch (java.io.FileNotFoundException e) {
        throw ArchiveFile.broken(segment.paths[i], "does not exist");
      } catch (java.io.EOFException | org.apache.avro.InvalidAvroMagicException | org.apache.avro.AvroRuntimeException e) {
        throw ArchiveFile.broken(segment.paths[i], "cannot be read (" + e + ")");
      }
      files.add(f);
      push(f);
    }
    opened = true;
  }

  /** The file's next record of the segment into the merge, if it has one. */
  private void push(ArchiveFile f) throws IOException {
    try {
      while (f.advance()) {
        if (f.offset >= segment.end) {
          return;
        }
        if (f.offset >= segment.start) {
          heads.add(f);
          return;
        }
      }
    } catch (java.io.EOFException | org.apache.avro.AvroRuntimeException e) {
      // Not a storage failure (those stay what they are, and may pass): the file's own bytes.
      throw ArchiveFile.broken(f.path, "cannot be read (" + e + ")");
    }
  }

  @Override
  public boolean next() throws IOException {
    if (!opened) {
      open();
    }
    ArchiveFile f = heads.poll();
    if (f == null) {
      return false;
    }
    if (f.offset == lastOffset) {
      throw ArchiveFile.broken(f.path, "holds offset " + f.offset + " of partition " + segment.partition
          + ", as " + lastPath + " does: the archive lists a record twice (a landing interrupted while it "
          + "published, under another routing)");
    }
    current = f.row();
    lastOffset = f.offset;  // kept by value: `f` moves on below
    lastPath = f.path;
    push(f);
    return true;
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() throws IOException {
    for (ArchiveFile f : files) {
      f.close();
    }
  }
}
