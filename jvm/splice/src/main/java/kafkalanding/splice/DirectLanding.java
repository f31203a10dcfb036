package kafkalanding.splice;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.avro.Schema;
import org.apache.avro.file.DataFileWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Landing without rows: each Spark task reads one offset range of one Kafka partition with a
 * Kafka consumer of its own (read_committed) and appends the records its body check vouches for
 * straight into the landing files, spliced (the body as produced, then the encoded Kafka columns,
 * as {@link SpliceWriter} does), one file per frozen task and table, in offset order. No record
 * becomes a Spark row: the rows this source returns are what the tasks wrote and counted, for the
 * landing to publish and to check conservation with.
 *
 * <p>It only lands what it is sure of. A record of another schema id, or with bad framing, is
 * counted (the other ids and the dead letters get jobs of their own, through the decode); as is a
 * Kafka timestamp outside years 1-9999, which the landing file's timestamp-millis cannot hold. A
 * body the strict walk refuses ({@link FastCheck#DEAD}) is counted as a dead letter of the id, and
 * the dead-letter job writes it with the walk's reason. A body whose routing value the walk leaves
 * to the decode ({@link FastCheck#UNSURE}) stops the task: it removes its files and says "unsure",
 * and the landing goes the decoding way.
 *
 * <p>Options: {@code kafka.*} (the consumer's settings), {@code topic}, {@code ranges} (one Spark
 * task each: "partition:start:end" joined by ","), {@code tasks} (the frozen tasks:
 * "hourIndex:partition:start:end" joined by ","), {@code hours} (the hour tags, by index, joined
 * by ","), {@code schemaId}, {@code check} (the body check's config, see {@link FastCheck}),
 * {@code landingSchema}, {@code table} (every record's table) or {@code routes} (value U+0001
 * table pairs joined by U+0002) with {@code defaultTable}, {@code out} (the folder the files go
 * under) and {@code timeoutMs} (how long a task waits for Kafka to make progress).
 */
public final class DirectLanding implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "kafka-landing-direct";
  static final StructType RESULT = new StructType()
      .add("kind", DataTypes.StringType, false)
      .add("hour_ix", DataTypes.IntegerType, true)
      .add("chunk", DataTypes.LongType, true)
      .add("table", DataTypes.StringType, true)
      .add("schema_id", DataTypes.LongType, true)
      .add("n", DataTypes.LongType, false)
      .add("path", DataTypes.StringType, true)
      .add("part", DataTypes.IntegerType, true)
      .add("offset", DataTypes.LongType, true);

  /** Offset ranges without a record reported per hour and range, by their first offset: enough to find them. */
  static final int GAPS_SHOWN = 3;

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return RESULT;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LandTable(new Job(properties));
  }

  /** Everything a task needs, parsed once on the driver and sent to the tasks. */
  static final class Job implements Serializable {
    private static final long serialVersionUID = 1L;
    final Map<String, String> kafka = new HashMap<>();
    final String topic;
    final long[][] ranges;  // partition, start, end
    final long[][] tasks;  // hour index, partition, start, end
    final String[] hours;
    final long schemaId;
    final String check;
    final String landingSchema;
    final String table;
    final Map<String, String> routes = new HashMap<>();
    final String defaultTable;
    final String out;
    final long timeoutMs;
    String codec = "snappy";
    int deflateLevel = -1;
    SerializableConfiguration hadoop;

    Job(Map<String, String> options) {
      Map<String, String> o = new HashMap<>();
      options.forEach((k, v) -> o.put(k.toLowerCase(Locale.ROOT), v));
      options.forEach((k, v) -> {
        if (k.toLowerCase(Locale.ROOT).startsWith("kafka.")) {
          kafka.put(k.substring("kafka.".length()), v);
        }
      });
      topic = required(o, "topic");
      ranges = longs(required(o, "ranges"), 3);
      tasks = longs(required(o, "tasks"), 4);
      hours = required(o, "hours").split(",");
      schemaId = Long.parseLong(required(o, "schemaid"));
      check = required(o, "check");
      landingSchema = required(o, "landingschema");
      table = o.get("table");
      String r = o.getOrDefault("routes", "");
      for (String pair : r.isEmpty() ? new String[0] : r.split("\u0002")) {
        String[] kv = pair.split("\u0001", 2);
        routes.put(kv[0], kv[1]);
      }
      defaultTable = o.get("defaulttable");
      out = required(o, "out");
      timeoutMs = Long.parseLong(o.getOrDefault("timeoutms", "120000"));
      if (table == null && defaultTable == null && routes.isEmpty()) {
        throw new IllegalArgumentException(SHORT_NAME + " needs the option table, or routes and defaultTable");
      }
    }

    private static String required(Map<String, String> o, String name) {
      String v = o.get(name);
      if (v == null) {
        throw new IllegalArgumentException(SHORT_NAME + " needs the option " + name);
      }
      return v;
    }

    private static long[][] longs(String text, int width) {
      String[] items = text.isEmpty() ? new String[0] : text.split(",");
      long[][] out = new long[items.length][];
      for (int i = 0; i < items.length; i++) {
        String[] parts = items[i].split(":");
        if (parts.length != width) {
          throw new IllegalArgumentException(SHORT_NAME + ": " + items[i] + " is not " + width + " numbers");
        }
        out[i] = new long[width];
        for (int j = 0; j < width; j++) {
          out[i][j] = Long.parseLong(parts[j]);
        }
      }
      return out;
    }

    /** The table of a vouched record's routing value; null: not one this source can name. */
    String tableOf(String value) {
      if (table != null) {
        return table;
      }
      String t = value == null ? null : routes.get(value);
      return t != null ? t : defaultTable;
    }
  }

  static final class LandTable implements Table, SupportsRead {
    private final Job job;

    LandTable(Job job) {
      this.job = job;
    }

    @Override
    public String name() {
      return SHORT_NAME + " " + job.topic;
    }

    @Override
    public StructType schema() {
      return RESULT;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new LandScan(job);
    }
  }

  static final class LandScan implements Scan, Batch {
    private final Job job;

    LandScan(Job job) {
      this.job = job;
    }

    @Override
    public StructType readSchema() {
      return RESULT;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      InputPartition[] parts = new InputPartition[job.ranges.length];
      for (int i = 0; i < parts.length; i++) {
        parts[i] = new Range((int) job.ranges[i][0], job.ranges[i][1], job.ranges[i][2]);
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
      return new Readers(job);
    }
  }

  static final class Readers implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final Job job;

    Readers(Job job) {
      this.job = job;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new Lander(job, (Range) partition);
    }
  }

  /** One Spark task: one Kafka partition from `start` up to `end`. */
  static final class Range implements InputPartition {
    private static final long serialVersionUID = 1L;
    final int partition;
    final long start;
    final long end;

    Range(int partition, long start, long end) {
      this.partition = partition;
      this.start = start;
      this.end = end;
    }
  }

  /** Lands one range on the first call to next(), then hands out what it wrote and counted. */
  static final class Lander implements PartitionReader<InternalRow> {
    private final Job job;
    private final Range range;
    private Iterator<InternalRow> results;
    private InternalRow current;

    Lander(Job job, Range range) {
      this.job = job;
      this.range = range;
    }

    @Override
    public boolean next() throws IOException {
      if (results == null) {
        results = new RangeLanding(job, range).land().iterator();
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

  /** The files of one frozen task and table, open while the task's records stream by. */
  static final class OpenFile {
    final String rel;
    final int hourIx;
    final long chunk;
    final String table;
    final DataFileWriter<SplicedRecord> writer;
    long rows;

    OpenFile(String rel, int hourIx, long chunk, String table, DataFileWriter<SplicedRecord> writer) {
      this.rel = rel;
      this.hourIx = hourIx;
      this.chunk = chunk;
      this.table = table;
      this.writer = writer;
    }
  }

  static final class RangeLanding {
    private final Job job;
    private final Range range;
    private final Schema landing;
    private final FastCheck.Checker checker;
    private final Map<String, OpenFile> open = new LinkedHashMap<>();
    private final List<OpenFile> closed = new ArrayList<>();
    private final List<String> written = new ArrayList<>();
    private final SplicedRecord record = new SplicedRecord();
    private final FastCheck.Verdict verdict = new FastCheck.Verdict();
    private final long[] perHour;
    private final Set<Long> ids = new HashSet<>();  // schema id * 2^20 + hour index
    private long lastId = -1;  // the last one added: a record's id is mostly its neighbour's
    private final String attempt;
    private byte[] topicBytes;
    private long unclaimed;
    private long badFraming;
    private long ofId;
    private long dead;
    private int task = -1;  // the frozen task of the last record
    private long next;  // the offset after the last record the consumer gave, to find offsets without one
    private final long[] gapsPerHour;
    private final List<long[]> gapsShown = new ArrayList<>();  // hour index, first offset, offsets
    private FileSystem fs;

    RangeLanding(Job job, Range range) {
      this.job = job;
      this.range = range;
      landing = new Schema.Parser().parse(job.landingSchema);
      checker = new FastCheck.Checker(job.check);
      perHour = new long[job.hours.length];
      gapsPerHour = new long[job.hours.length];
      next = range.start;
      TaskContext tc = TaskContext.get();
      attempt = tc == null ? "0" : Long.toString(tc.taskAttemptId());
    }

    List<InternalRow> land() throws IOException {
      boolean sure = true;
      KafkaConsumer<ByteBuffer, ByteBuffer> consumer = null;
      try {
        consumer = consumer();
        TopicPartition tp = new TopicPartition(job.topic, range.partition);
        consumer.assign(List.of(tp));
        long earliest = consumer.beginningOffsets(List.of(tp)).get(tp);
        if (earliest > range.start) {
          throw new IllegalStateException(where() + ": offsets from " + range.start + " are gone from Kafka (the "
              + "partition now starts at " + earliest + ", retention removed them before they landed). Nothing was "
              + "published; the records cannot be landed any more");
        }
        consumer.seek(tp, range.start);
        topicBytes = job.topic.getBytes(StandardCharsets.UTF_8);
        long lastProgress = System.currentTimeMillis();
        long position = range.start;
        while (sure && position < range.end) {
          ConsumerRecords<ByteBuffer, ByteBuffer> batch = consumer.poll(Duration.ofMillis(500));
          for (ConsumerRecord<ByteBuffer, ByteBuffer> r : batch.records(tp)) {
            if (r.offset() >= range.end) {
              break;
            }
            gap(next, r.offset());
            next = r.offset() + 1;
            if (!land(r)) {
              sure = false;
              break;
            }
          }
          long now = consumer.position(tp);
          if (now > position) {
            position = now;
            lastProgress = System.currentTimeMillis();
          } else if (System.currentTimeMillis() - lastProgress > job.timeoutMs) {
            throw new IllegalStateException(where() + ": Kafka gave no record past offset " + position + " for "
                + job.timeoutMs / 1000 + " s (reading up to " + range.end + "). Nothing was published: check the "
                + "broker and its open transactions, then land the hour again");
          }
        }
        if (sure) {
          gap(next, range.end);
        }
        closeAll();
      } catch (IOException | RuntimeException e) {
        Throwable also = abandon();
        if (also != null) {
          e.addSuppressed(also);
        }
        closeQuietly(consumer, e);
        throw e;
      }
      closeQuietly(consumer, null);
      if (!sure) {
        Throwable also = abandon();
        if (also != null) {
          throw new UncheckedIOException("cannot remove the abandoned landing files of " + where(),
              also instanceof IOException ? (IOException) also : new IOException(also));
        }
        return List.of(row("unsure", null, null, null, null, 1, null, null));
      }
      List<InternalRow> out = new ArrayList<>();
      for (OpenFile f : closed) {
        out.add(row("file", f.hourIx, f.chunk, f.table, null, f.rows, f.rel, range.partition));
      }
      for (int h = 0; h < perHour.length; h++) {
        if (perHour[h] > 0) {
          out.add(row("hour", h, null, null, null, perHour[h], null, null));
        }
        if (gapsPerHour[h] > 0) {
          out.add(row("gaps", h, null, null, null, gapsPerHour[h], null, range.partition));
        }
      }
      for (long[] g : gapsShown) {
        out.add(row("gap", (int) g[0], null, null, null, g[2], null, range.partition, g[1]));
      }
      for (long packed : ids) {
        out.add(row("id", (int) (packed & ((1 << 20) - 1)), null, null, packed >>> 20, 1, null, null));
      }
      out.add(row("unclaimed", null, null, null, null, unclaimed, null, null));
      out.add(row("bad_framing", null, null, null, null, badFraming, null, null));
      out.add(row("records", null, null, null, job.schemaId, ofId, null, null));
      out.add(row("dead", null, null, null, job.schemaId, dead, null, null));
      return out;
    }

    /**
     * Closed without waiting: the client has already sent a fetch for the offsets after the range,
     * which the broker holds for fetch.max.wait.ms (500 ms) when nothing follows them, and a close
     * that waits for it held every task that long (a quarter of a 4-hour landing). A failure to
     * close is added to `cause` when there is one, never put in its place.
     */
    private static void closeQuietly(KafkaConsumer<ByteBuffer, ByteBuffer> consumer, Throwable cause) {
      if (consumer == null) {
        return;
      }
      try {
        consumer.close(Duration.ZERO);
      } catch (RuntimeException e) {
        if (cause == null) {
          throw e;
        }
        cause.addSuppressed(e);
      }
    }

    /**
     * The offsets [from, to) of this range that the consumer gave no record for (transaction
     * markers, aborted records, compaction, or records lost), counted per hour of the frozen tasks
     * they fall in: what the landing reports as offsets without a record, seen, not inferred.
     */
    private void gap(long from, long to) {
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
        if (t[1] != range.partition || end <= start) {
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

    private String where() {
      return job.topic + " partition " + range.partition + " offsets " + range.start + ".." + range.end;
    }

    private KafkaConsumer<ByteBuffer, ByteBuffer> consumer() {
      Properties p = new Properties();
      p.putAll(job.kafka);  // the landing's own read options (read.READ_OPTIONS) and the Kafka resource's
      p.put("isolation.level", "read_committed");  // aborted transactions never land
      p.put("enable.auto.commit", "false");
      p.put("auto.offset.reset", "none");
      p.remove("group.id");
      // Keys and values as slices of what the client read: no copy of either per record.
      return new KafkaConsumer<>(p, new ByteBufferDeserializer(), new ByteBufferDeserializer());
    }

    /** One record; false if the check is not sure of its body. */
    private boolean land(ConsumerRecord<ByteBuffer, ByteBuffer> r) throws IOException {
      int t = taskOf(r.offset());
      if (t < 0) {
        unclaimed++;
        return true;
      }
      int hourIx = (int) job.tasks[t][0];
      perHour[hourIx]++;
      ByteBuffer value = r.value();
      if (value == null || value.remaining() < 5 || r.timestamp() < FastCheck.MS_YEAR_1
          || r.timestamp() >= FastCheck.MS_YEAR_10000) {
        badFraming++;  // a dead letter with its reason (decode.frame_columns), as every framing fault
        return true;
      }
      byte[] v = array(value);
      int at = arrayStart(value);
      if (v[at] != 0) {
        badFraming++;
        return true;
      }
      long sid = ((long) (v[at + 1] & 0xff) << 24) | ((v[at + 2] & 0xff) << 16) | ((v[at + 3] & 0xff) << 8)
          | (v[at + 4] & 0xff);
      long id = (sid << 20) | hourIx;
      if (id != lastId) {
        ids.add(id);
        lastId = id;
      }
      if (sid != job.schemaId) {
        return true;
      }
      ofId++;
      checker.check(v, at + 5, at + value.remaining(), verdict);
      if (verdict.status == FastCheck.DEAD) {
        dead++;  // written as a dead letter, with the walk's reason, by the dead-letter job
        return true;
      }
      if (verdict.status != FastCheck.LANDS) {
        return false;
      }
      String table = job.tableOf(verdict.route);
      if (table == null) {
        return false;
      }
      OpenFile f = open.get(table);
      if (f == null) {
        f = open(hourIx, job.tasks[t][2], table);
      }
      ByteBuffer key = r.key();
      BinaryEncoder enc = record.start(v, at + 5, verdict.end, topicBytes, r.partition(), r.offset(), r.timestamp(),
          key == null ? null : array(key), key == null ? 0 : arrayStart(key), key == null ? 0 : key.remaining());
      writeHeaders(enc, r);
      f.writer.append(record);
      f.rows++;
      return true;
    }

    /** The array under a slice the client read (a copy only if it has none, which Kafka's never do). */
    private static byte[] array(ByteBuffer b) {
      if (b.hasArray()) {
        return b.array();
      }
      byte[] copy = new byte[b.remaining()];
      b.duplicate().get(copy);
      return copy;
    }

    private static int arrayStart(ByteBuffer b) {
      return b.hasArray() ? b.arrayOffset() + b.position() : 0;
    }

    private static void writeHeaders(BinaryEncoder enc, ConsumerRecord<ByteBuffer, ByteBuffer> r) throws IOException {
      Header[] headers = r.headers().toArray();
      if (headers.length == 0) {  // Spark's Kafka source: no headers is a null list, not an empty one
        enc.writeIndex(0);
        return;
      }
      enc.writeIndex(1);
      enc.writeArrayStart();
      enc.setItemCount(headers.length);
      for (Header h : headers) {
        enc.startItem();
        enc.writeBytes(h.key().getBytes(StandardCharsets.UTF_8));
        if (h.value() == null) {
          enc.writeIndex(0);
        } else {
          enc.writeIndex(1);
          enc.writeBytes(h.value());
        }
      }
      enc.writeArrayEnd();
    }

    /** The frozen task holding `offset`, found forward from the last one (offsets only grow). */
    private int taskOf(long offset) throws IOException {
      if (task >= 0 && holds(task, offset)) {
        return task;
      }
      for (int i = 0; i < job.tasks.length; i++) {
        if (holds(i, offset)) {
          if (i != task) {
            closeAll();  // the task before is complete: its files are whole
          }
          task = i;
          return i;
        }
      }
      return -1;
    }

    private boolean holds(int i, long offset) {
      long[] t = job.tasks[i];
      return t[1] == range.partition && offset >= t[2] && offset < t[3];
    }

    private OpenFile open(int hourIx, long chunk, String table) throws IOException {
      String rel = "_kl_hour=" + job.hours[hourIx] + "/_kl_chunk=" + chunk + "/_kl_table=" + table + "/_kl_part="
          + range.partition + "/direct-" + attempt + ".avro";
      Path p = new Path(job.out + "/" + rel);
      if (fs == null) {
        fs = p.getFileSystem(job.hadoop.value());
      }
      written.add(rel);
      DataFileWriter<SplicedRecord> w = SpliceWriter.landingFile(landing,
          SpliceWriterFactory.codec(job.codec, job.deflateLevel), fs.create(p, false));
      OpenFile f = new OpenFile(rel, hourIx, chunk, table, w);
      open.put(table, f);
      return f;
    }

    private void closeAll() throws IOException {
      for (OpenFile f : open.values()) {
        f.writer.close();
        closed.add(f);
      }
      open.clear();
    }

    /**
     * This task's files removed: none of them is reported, none is published. Returns what went
     * wrong on the way (null: nothing), for the caller to add to the error that brought it here
     * rather than replace it; a file left behind goes with the staging folder.
     */
    private Throwable abandon() {
      Throwable failed = null;
      for (OpenFile f : open.values()) {
        try {
          f.writer.close();
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

    private static InternalRow row(String kind, Integer hourIx, Long chunk, String table, Long sid, long n,
        String path, Integer part) {
      return row(kind, hourIx, chunk, table, sid, n, path, part, null);
    }

    private static InternalRow row(String kind, Integer hourIx, Long chunk, String table, Long sid, long n,
        String path, Integer part, Long offset) {
      return new GenericInternalRow(new Object[] {
          UTF8String.fromString(kind), hourIx, chunk, table == null ? null : UTF8String.fromString(table), sid, n,
          path == null ? null : UTF8String.fromString(path), part, offset});
    }
  }
}
