package kafkalanding.splice;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Locale;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * One range landed by one Spark task: its records read in offset order with a Kafka consumer of
 * its own (or, for an hour landed again from its archive, from its archived files: {@link
 * ArchiveMerge}), each framed, counted and checked, and the ones the check vouches for appended to
 * the file of their frozen task and table ({@link TaskFiles}); what it wrote and counted comes back
 * as {@link ResultRows}. A record the check is not sure of stops it: its files are removed.
 */
final class RangeLanding {
  /** A record the consumer gave, as a {@link SourceRecord}: one per task, refilled per record. */
  private static final class Polled implements SourceRecord {
    ConsumerRecord<ByteBuffer, ByteBuffer> r;

    @Override
    public long offset() {
      return r.offset();
    }

    @Override
    public long timestamp() {
      return r.timestamp();
    }

    @Override
    public ByteBuffer value() {
      return r.value();
    }

    @Override
    public ByteBuffer key() {
      return r.key();
    }

    @Override
    public Header[] headers() {
      return r.headers().toArray();
    }
  }

  private final LandingJob job;
  private final OffsetRange range;
  private final ArchiveSegment archived;  // null: read from Kafka
  private final BodyCheck check;
  private final BodyCheck.Verdict verdict = new BodyCheck.Verdict();
  private final TaskFiles files;
  private final ResultRows rows;
  private final byte[] topicBytes;
  private int task = -1;  // the frozen task of the last record
  private boolean spread;  // more event hours than a task keeps files open for
  private long lastEventHour = Long.MIN_VALUE;  // the hour number and tag of the last event time seen
  private String lastEventTag;
  private long next;  // the offset after the last record the consumer gave, to find offsets without one

  RangeLanding(LandingJob job, OffsetRange range, ArchiveSegment archived) {
    this.job = job;
    this.range = range;
    this.archived = archived;
    check = new BodyCheck(job.check);
    TaskContext tc = TaskContext.get();
    files = new TaskFiles(job, range.partition, tc == null ? "0" : Long.toString(tc.taskAttemptId()));
    rows = new ResultRows(job, range.partition);
    topicBytes = job.topic.getBytes(StandardCharsets.UTF_8);
    next = range.start;
  }

  List<InternalRow> land() throws IOException {
    boolean sure;
    KafkaConsumer<ByteBuffer, ByteBuffer> consumer = null;
    try {
      if (archived != null) {
        sure = readArchive();
      } else {
        consumer = consumer();
        sure = read(consumer);
      }
      files.closeAll();
    } catch (IOException | RuntimeException e) {
      Throwable also = files.abandon();
      if (also != null) {
        e.addSuppressed(also);
      }
      closeQuietly(consumer, e);
      throw e;
    }
    closeQuietly(consumer, null);
    if (!sure) {
      Throwable also = files.abandon();
      if (also != null) {
        throw new UncheckedIOException("cannot remove the abandoned landing files of " + range.where(job.topic),
            also instanceof IOException ? (IOException) also : new IOException(also));
      }
      return spread ? ResultRows.spread() : ResultRows.unsure();
    }
    return rows.rows(files.closed());
  }

  /** The range read to its end, each record landed or counted; false as soon as the check is not sure of one. */
  private boolean read(KafkaConsumer<ByteBuffer, ByteBuffer> consumer) throws IOException {
    TopicPartition tp = new TopicPartition(job.topic, range.partition);
    consumer.assign(List.of(tp));
    long earliest = consumer.beginningOffsets(List.of(tp)).get(tp);
    if (earliest > range.start) {
      throw new IllegalStateException(range.where(job.topic) + ": offsets from " + range.start + " are gone from "
          + "Kafka (the partition now starts at " + earliest + ", retention removed them before they landed). "
          + "Nothing was published; the records cannot be landed any more");
    }
    consumer.seek(tp, range.start);
    long lastProgress = System.currentTimeMillis();
    long position = range.start;
    Polled polled = new Polled();
    while (position < range.end) {
      ConsumerRecords<ByteBuffer, ByteBuffer> batch = consumer.poll(Duration.ofMillis(500));
      for (ConsumerRecord<ByteBuffer, ByteBuffer> r : batch.records(tp)) {
        if (r.offset() >= range.end) {
          break;
        }
        rows.gap(next, r.offset());
        next = r.offset() + 1;
        polled.r = r;
        if (!land(polled)) {
          return false;
        }
      }
      long now = consumer.position(tp);
      if (now > position) {
        position = now;
        lastProgress = System.currentTimeMillis();
      } else if (System.currentTimeMillis() - lastProgress > job.timeoutMs) {
        throw new IllegalStateException(range.where(job.topic) + ": Kafka gave no record past offset " + position
            + " for " + job.timeoutMs / 1000 + " s (reading up to " + range.end + "). Nothing was published: check "
            + "the broker and its open transactions, then land the hour again");
      }
    }
    rows.gap(next, range.end);
    return true;
  }

  /** The range's archived records, as {@link #read} reads Kafka's. */
  private boolean readArchive() throws IOException {
    try (ArchiveMerge merge = new ArchiveMerge(archived, job.hadoop.value())) {
      for (ArchiveFile r = merge.next(); r != null; r = merge.next()) {
        rows.gap(next, r.offset);
        next = r.offset + 1;
        if (!land(r)) {
          return false;
        }
      }
    }
    rows.gap(next, range.end);
    return true;
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

  /** One record; false if the check is not sure of its body, or it opens one event hour too many. */
  private boolean land(SourceRecord r) throws IOException {
    int t = taskOf(r.offset());
    if (t < 0) {
      rows.unclaimed++;
      return true;
    }
    int hourIx = (int) job.tasks[t][0];
    rows.read(hourIx);
    long sid = schemaId(r);
    if (sid < 0) {
      rows.badFraming++;  // a dead letter with its reason (decode.frame_columns), as every framing fault
      return true;
    }
    rows.id(sid, hourIx);
    if (sid != job.schemaId) {
      return true;
    }
    rows.ofId++;
    ByteBuffer value = r.value();
    byte[] v = array(value);
    int at = arrayStart(value);
    check.check(v, at + 5, at + value.remaining(), verdict);
    if (verdict.status == Contract.DEAD) {
      rows.dead++;  // written as a dead letter, with the walk's reason, by the dead-letter job
      return true;
    }
    String table = verdict.status == Contract.LANDS ? job.tableOf(verdict.route) : null;
    if (table == null) {
      return false;
    }
    TaskFiles.OpenFile f = files.of(hourIx, job.tasks[t][2], table, job.eventHours ? eventTag(verdict.event) : null);
    if (f == null) {
      spread = true;
      return false;
    }
    ByteBuffer key = r.key();
    f.file.start(v, at + 5, verdict.end, topicBytes, range.partition, r.offset(), r.timestamp(),
        key == null ? null : array(key), key == null ? 0 : arrayStart(key), key == null ? 0 : key.remaining())
        .append(r.headers());
    f.rows++;
    return true;
  }

  /**
   * The schema id of the record's Confluent header; -1 for bad framing: no value, one shorter than
   * the header, a magic byte other than 0, or a Kafka timestamp outside years 1-9999, which the
   * landing file's timestamp-millis cannot hold.
   */
  private static long schemaId(SourceRecord r) {
    ByteBuffer value = r.value();
    if (value == null || value.remaining() < 5 || r.timestamp() < BodyRules.MS_YEAR_1
        || r.timestamp() >= BodyRules.MS_YEAR_10000) {
      return -1;
    }
    byte[] v = array(value);
    int at = arrayStart(value);
    if (v[at] != 0) {
      return -1;
    }
    return ((long) (v[at + 1] & 0xff) << 24) | ((v[at + 2] & 0xff) << 16) | ((v[at + 3] & 0xff) << 8)
        | (v[at + 4] & 0xff);
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

  /**
   * The event hour's tag (`yyyy-MM-ddTHH`, UTC, as the decoding way's `hour_of`) of an event time
   * in epoch microseconds, which the check reads only within years 1-9999; Spark's folder name for
   * none. Event times come in runs of the same hour: the tag is made once per run.
   */
  private String eventTag(Long micros) {
    if (micros == null) {
      return Contract.NO_EVENT_HOUR;
    }
    long hour = Math.floorDiv(micros, 3_600_000_000L);
    if (hour != lastEventHour) {
      LocalDateTime t = LocalDateTime.ofEpochSecond(hour * 3600, 0, ZoneOffset.UTC);
      lastEventTag = String.format(Locale.ROOT, "%04d-%02d-%02dT%02d", t.getYear(), t.getMonthValue(),
          t.getDayOfMonth(), t.getHour());
      lastEventHour = hour;
    }
    return lastEventTag;
  }

  /** The frozen task holding `offset`, found forward from the last one (offsets only grow). */
  private int taskOf(long offset) throws IOException {
    if (task >= 0 && holds(task, offset)) {
      return task;
    }
    for (int i = 0; i < job.tasks.length; i++) {
      if (holds(i, offset)) {
        if (i != task) {
          files.closeAll();  // the task before is complete: its files are whole
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
}
