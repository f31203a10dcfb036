package kafkalanding.splice;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.Schema;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The landing files of one range's task: one per frozen task and table (and event hour, in a topic
 * split by one), open while that frozen task's records stream by, closed (whole) when the next one
 * starts. Each is named by the frozen task it holds ({@link Contract#stagedFolder}, then the event
 * hour's folder) and the Spark task attempt that wrote it, under the job's `out`.
 */
final class TaskFiles {
  /** One file of a frozen task and table, and the records appended to it. */
  static final class OpenFile {
    final String rel;  // its path under `out`
    final int hourIx;
    final long chunk;  // the frozen task's first offset
    final String table;
    final LandingFile file;
    long rows;

    OpenFile(String rel, int hourIx, long chunk, String table, LandingFile file) {
      this.rel = rel;
      this.hourIx = hourIx;
      this.chunk = chunk;
      this.table = table;
      this.file = file;
    }
  }

  private final LandingJob job;
  private final int partition;
  private final String attempt;
  private final Schema landing;
  private final Map<String, OpenFile> open = new LinkedHashMap<>();
  private final List<OpenFile> closed = new ArrayList<>();
  private final List<String> written = new ArrayList<>();
  private FileSystem fs;

  TaskFiles(LandingJob job, int partition, String attempt) {
    this.job = job;
    this.partition = partition;
    this.attempt = attempt;
    landing = new Schema.Parser().parse(job.landingSchema);
  }

  /**
   * The open file of `table` (and `eventHour`, null outside a topic split by one) for the frozen
   * task from `chunk`, opened on its first record; null if that would keep more than {@link
   * Contract#MAX_EVENT_FILES} open (records spread over many event hours: the decoding way writes
   * them one event hour after the other).
   */
  OpenFile of(int hourIx, long chunk, String table, String eventHour) throws IOException {
    String key = eventHour == null ? table : table + Contract.FIELD_SEP + eventHour;
    OpenFile f = open.get(key);
    if (f != null) {
      return f;
    }
    return open.size() >= Contract.MAX_EVENT_FILES ? null : open(key, hourIx, chunk, table, eventHour);
  }

  private OpenFile open(String key, int hourIx, long chunk, String table, String eventHour) throws IOException {
    String folder = Contract.stagedFolder(job.hours[hourIx], chunk, table, partition);
    if (eventHour != null) {
      folder += "/" + Contract.EVENT_HOUR_KEY + "=" + eventHour;
    }
    String rel = folder + "/direct-" + attempt + ".avro";
    Path p = new Path(job.out + "/" + rel);
    if (fs == null) {
      fs = p.getFileSystem(job.hadoop.value());
    }
    written.add(rel);
    LandingFile file = new LandingFile(landing, LandingFile.codec(job.codec, job.deflateLevel), fs.create(p, false));
    OpenFile f = new OpenFile(rel, hourIx, chunk, table, file);
    open.put(key, f);
    return f;
  }

  /** The frozen task's files closed: whole, to be reported. */
  void closeAll() throws IOException {
    for (OpenFile f : open.values()) {
      f.file.close();
      closed.add(f);
    }
    open.clear();
  }

  /** Every file closed so far, in the order they were opened. */
  List<OpenFile> closed() {
    return closed;
  }

  /**
   * This task's files removed: none of them is reported, none is published. Returns what went
   * wrong on the way (null: nothing), for the caller to add to the error that brought it here
   * rather than replace it; a file left behind goes with the staging folder.
   */
  Throwable abandon() {
    Throwable failed = null;
    for (OpenFile f : open.values()) {
      try {
        f.file.close();
      } catch (IOException | RuntimeException e) {
        // removed below all the same
      }
    }
    open.clear();
    closed.clear();
    for (String rel : written) {
      try {
        Path p = new Path(job.out + "/" + rel);
        p.getFileSystem(job.hadoop.value()).delete(p, false);
      } catch (IOException | RuntimeException e) {
        IOException named = new IOException("cannot remove the abandoned landing file " + job.out + "/" + rel, e);
        if (failed == null) {
          failed = named;
        } else {
          failed.addSuppressed(named);
        }
      }
    }
    written.clear();
    return failed;
  }
}
