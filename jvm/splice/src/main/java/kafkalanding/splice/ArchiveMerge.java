package kafkalanding.splice;

import java.io.Closeable;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.PriorityQueue;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * One segment's records, every file of it merged by offset: what a Kafka consumer of the range
 * would have returned. Records outside the segment (a dead-letter file holds a partition's hour)
 * are passed over; an offset in two files fails, naming both. Read by {@link ArchiveReader} as
 * rows, and by {@link RangeLanding} straight into landing files.
 */
final class ArchiveMerge implements Closeable {
  private final ArchiveSegment segment;
  private final Configuration hadoop;
  private final List<ArchiveFile> files = new ArrayList<>();
  private final PriorityQueue<ArchiveFile> heads = new PriorityQueue<>((a, b) -> Long.compare(a.offset, b.offset));
  private boolean opened;
  private ArchiveFile taken;  // the record last handed out: its file moves on at the next call
  private long lastOffset = Long.MIN_VALUE;
  private String lastPath;

  ArchiveMerge(ArchiveSegment segment, Configuration hadoop) {
    this.segment = segment;
    this.hadoop = hadoop;
  }

  /** The file holding the next record, positioned on it (read it before the next call); null past the last. */
  ArchiveFile next() throws IOException {
    if (!opened) {
      open();
    } else if (taken != null) {
      push(taken);
    }
    taken = heads.poll();
    if (taken == null) {
      return null;
    }
    if (taken.offset == lastOffset) {
      throw ArchiveFile.broken(taken.path, "holds offset " + taken.offset + " of partition " + segment.partition
          + ", as " + lastPath + " does: the archive lists a record twice (a landing interrupted while it "
          + "published, under another routing)");
    }
    lastOffset = taken.offset;
    lastPath = taken.path;
    return taken;
  }

  private void open() throws IOException {
    opened = true;
    for (int i = 0; i < segment.paths.length; i++) {
      Path p = new Path(segment.paths[i]);
      ArchiveFile f;
      try {
        f = ArchiveFile.open(segment.paths[i], segment.schemaIds[i], p.getFileSystem(hadoop).open(p));
      } catch (java.io.FileNotFoundException e) {
        throw ArchiveFile.broken(segment.paths[i], "does not exist");
      } catch (java.io.EOFException | org.apache.avro.InvalidAvroMagicException | org.apache.avro.AvroRuntimeException e) {
        throw ArchiveFile.broken(segment.paths[i], "cannot be read (" + e + ")");
      }
      files.add(f);
      push(f);
    }
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
  public void close() throws IOException {
    for (ArchiveFile f : files) {
      f.close();
    }
  }
}
