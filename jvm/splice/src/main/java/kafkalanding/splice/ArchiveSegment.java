package kafkalanding.splice;

import org.apache.spark.sql.connector.read.InputPartition;

/** One task of the archive source: offsets [start, end) of one partition, and the files holding them. */
final class ArchiveSegment implements InputPartition {
  private static final long serialVersionUID = 1L;
  final int partition;
  final long start;
  final long end;
  final int[] schemaIds;  // per file; NO_SCHEMA_ID: a dead-letter file
  final String[] paths;

  private ArchiveSegment(int partition, long start, long end, int[] schemaIds, String[] paths) {
    this.partition = partition;
    this.start = start;
    this.end = end;
    this.schemaIds = schemaIds;
    this.paths = paths;
  }

  /** Every segment of the option ({@link Contract#OPTION_SEGMENTS}): items joined by ITEM_SEP. */
  static ArchiveSegment[] parseAll(String option) {
    String[] items = option.isEmpty() ? new String[0] : option.split(Contract.ITEM_SEP);
    ArchiveSegment[] out = new ArchiveSegment[items.length];
    for (int i = 0; i < items.length; i++) {
      out[i] = parse(items[i]);
    }
    return out;
  }

  /** partition:start:end, then schema id and path per file, joined by FIELD_SEP. */
  static ArchiveSegment parse(String item) {
    String[] f = item.split(Contract.FIELD_SEP);
    String[] range = f[0].split(Contract.NUMBER_SEP);
    int files = (f.length - 1) / 2;
    int[] ids = new int[files];
    String[] paths = new String[files];
    for (int i = 0; i < files; i++) {
      ids[i] = Integer.parseInt(f[1 + 2 * i]);
      paths[i] = f[2 + 2 * i];
    }
    return new ArchiveSegment(Integer.parseInt(range[0]), Long.parseLong(range[1]), Long.parseLong(range[2]), ids,
        paths);
  }
}
