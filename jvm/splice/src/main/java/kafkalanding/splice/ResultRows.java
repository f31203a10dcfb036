package kafkalanding.splice;

import static kafkalanding.splice.Contract.RESULT_COLUMNS;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What one range's task counted, and the rows it reports that in with the files it wrote: the
 * only rows the direct landing returns, one {@link Contract}'s KIND_* each, with the columns of
 * {@link Contract#RESULT_COLUMNS} that kind fills (direct.py reads them).
 */
final class ResultRows {
  /** The types of {@link Contract#RESULT_COLUMNS}, in its order; only the kind and `n` are never null. */
  private static final DataType[] TYPES = {
      DataTypes.StringType, DataTypes.IntegerType, DataTypes.LongType, DataTypes.StringType, DataTypes.LongType,
      DataTypes.LongType, DataTypes.StringType, DataTypes.IntegerType, DataTypes.LongType};
  private static final boolean[] NULLABLE = {false, true, true, true, true, false, true, true, true};
  static final StructType SCHEMA = schema();

  /** Offset ranges without a record reported per hour and range, by their first offset: enough to find them. */
  static final int GAPS_SHOWN = 3;

  private final LandingJob job;
  private final int partition;
  private final long[] perHour;
  private final long[] gapsPerHour;
  private final List<long[]> gapsShown = new ArrayList<>();  // hour index, first offset, offsets
  private final Set<Long> ids = new HashSet<>();  // schema id * 2^20 + hour index
  private long lastId = -1;  // the last one added: a record's id is mostly its neighbour's
  long unclaimed;
  long badFraming;
  long ofId;
  long dead;

  ResultRows(LandingJob job, int partition) {
    this.job = job;
    this.partition = partition;
    perHour = new long[job.hours.length];
    gapsPerHour = new long[job.hours.length];
  }

  private static StructType schema() {
    if (TYPES.length != RESULT_COLUMNS.size()) {
      throw new IllegalStateException("the result rows' types do not match their columns " + RESULT_COLUMNS);
    }
    StructType s = new StructType();
    for (int i = 0; i < TYPES.length; i++) {
      s = s.add(RESULT_COLUMNS.get(i), TYPES[i], NULLABLE[i]);
    }
    return s;
  }

  /** A record of a frozen task of hour `hourIx`. */
  void read(int hourIx) {
    perHour[hourIx]++;
  }

  /** Schema id `sid` seen in hour `hourIx`. */
  void id(long sid, int hourIx) {
    long id = (sid << 20) | hourIx;
    if (id != lastId) {
      ids.add(id);
      lastId = id;
    }
  }

  /**
   * The offsets [from, to) of this range that the consumer gave no record for (transaction
   * markers, aborted records, compaction, or records lost), counted per hour of the frozen tasks
   * they fall in: what the landing reports as offsets without a record, seen, not inferred.
   */
  void gap(long from, long to) {
    if (to <= from) {
      return;
    }
    int[] shown = new int[job.hours.length];
    for (long[] g : gapsShown) {
      shown[(int) g[0]]++;
    }
    for (long[] t : job.tasks) {
      long start = Math.max(from, t[2]);
      long end = Math.min(to, t[3]);
      if (t[1] != partition || end <= start) {
        continue;
      }
      int h = (int) t[0];
      gapsPerHour[h] += end - start;
      if (shown[h] < GAPS_SHOWN) {
        gapsShown.add(new long[] {h, start, end - start});
        shown[h]++;
      }
    }
  }

  /** The task's rows: the files it wrote, then what it counted. */
  List<InternalRow> rows(List<TaskFiles.OpenFile> files) {
    List<InternalRow> out = new ArrayList<>();
    for (TaskFiles.OpenFile f : files) {
      out.add(row(Contract.KIND_FILE, f.hourIx, f.chunk, f.table, null, f.rows, f.rel, partition, null));
    }
    for (int h = 0; h < perHour.length; h++) {
      if (perHour[h] > 0) {
        out.add(count(Contract.KIND_HOUR, h, null, perHour[h]));
      }
      if (gapsPerHour[h] > 0) {
        out.add(row(Contract.KIND_GAPS, h, null, null, null, gapsPerHour[h], null, partition, null));
      }
    }
    for (long[] g : gapsShown) {
      out.add(row(Contract.KIND_GAP, (int) g[0], null, null, null, g[2], null, partition, g[1]));
    }
    for (long packed : ids) {
      out.add(count(Contract.KIND_ID, (int) (packed & ((1 << 20) - 1)), packed >>> 20, 1));
    }
    out.add(count(Contract.KIND_UNCLAIMED, null, null, unclaimed));
    out.add(count(Contract.KIND_BAD_FRAMING, null, null, badFraming));
    out.add(count(Contract.KIND_RECORDS, null, job.schemaId, ofId));
    out.add(count(Contract.KIND_DEAD, null, job.schemaId, dead));
    return out;
  }

  /** The one row of a task that removed its files: land the decoding way. */
  static List<InternalRow> unsure() {
    return List.of(count(Contract.KIND_UNSURE, null, null, 1));
  }

  /** The same, for records spread over more event hours than a task keeps files open for. */
  static List<InternalRow> spread() {
    return List.of(count(Contract.KIND_SPREAD, null, null, 1));
  }

  private static InternalRow count(String kind, Integer hourIx, Long sid, long n) {
    return row(kind, hourIx, null, null, sid, n, null, null, null);
  }

  /** A row of {@link Contract#RESULT_COLUMNS}, in its order. */
  private static InternalRow row(String kind, Integer hourIx, Long chunk, String table, Long sid, long n,
      String path, Integer part, Long offset) {
    return new GenericInternalRow(new Object[] {
        UTF8String.fromString(kind), hourIx, chunk, table == null ? null : UTF8String.fromString(table), sid, n,
        path == null ? null : UTF8String.fromString(path), part, offset});
  }
}
