package kafkalanding.splice;

import java.nio.ByteBuffer;

import org.apache.kafka.common.header.Header;

/** What the direct landing needs of one of Kafka's records, whichever source read it: Kafka, or the archive. */
interface SourceRecord {
  long offset();

  /** Kafka's timestamp in epoch milliseconds; Long.MIN_VALUE where the archive kept none (out of years 1-9999). */
  long timestamp();

  /** The value as produced (null for none): its bytes from position to limit. */
  ByteBuffer value();

  ByteBuffer key();

  Header[] headers();
}
