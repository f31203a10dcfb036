"""What the landing's Python and its JVM operators (jvm/splice) say to each other, named once: the
names Spark finds the operators by, the direct landing's options and result rows, the body
check's config and verdicts, and the folders a staged file is written under. Contract.java holds
the same names with the same values; unit/avro_landing/test_contract.py fails when one side
changes alone. Pure: no Spark."""

from __future__ import annotations

from typing import NamedTuple

# The data sources' short names (jvm/splice META-INF/services) and the body check's UDF class.
DIRECT_FORMAT = "kafka-landing-direct"
SPLICE_FORMAT = "kafka-landing-splice"
ARCHIVE_FORMAT = "kafka-landing-archive"
BODY_CHECK_CLASS = "kafkalanding.splice.FastCheck"

# How a value of an option holds many: items of a list, the numbers of one item, and where an
# item may hold commas or colons (a schema's JSON, a routing value), its fields and the items.
LIST_SEP = ","
NUMBER_SEP = ":"
FIELD_SEP = "\u0001"
ITEM_SEP = "\u0002"

# The direct landing's options (Spark hands them over case-insensitively). Those under the prefix
# are the Kafka consumer's settings, as Spark's Kafka source takes them (read.READ_OPTIONS and the
# Kafka resource's spark_options are all under it).
OPTION_KAFKA_PREFIX = "kafka."
OPTION_TOPIC = "topic"
OPTION_RANGES = "ranges"  # one Spark task each: partition:start:end, joined by LIST_SEP
OPTION_TASKS = "tasks"  # the frozen tasks: hourIndex:partition:start:end
OPTION_HOURS = "hours"  # the hour tags, by index
OPTION_SCHEMA_ID = "schemaId"
OPTION_CHECK = "check"  # the body check's config
OPTION_LANDING_SCHEMA = "landingSchema"
OPTION_TABLE = "table"  # every record's table, or:
OPTION_ROUTES = "routes"  # value FIELD_SEP table, joined by ITEM_SEP
OPTION_DEFAULT_TABLE = "defaultTable"
OPTION_OUT = "out"  # the folder the files go under
OPTION_TIMEOUT_MS = "timeoutMs"  # how long a task waits for Kafka to make progress
OPTION_EVENT_HOURS = "eventHours"  # MAY_VOUCH: a file per event hour too (the check's event time)

# The splice writer's options (the first is format("avro")'s too) and its body column.
OPTION_AVRO_SCHEMA = "avroSchema"
OPTION_WRITER_SCHEMA = "writerSchema"
BODY_COLUMN = "_body"

# The archive source's option: one Spark task each, joined by ITEM_SEP; an item is partition:start:end,
# then each file it reads as its schema id (NO_SCHEMA_ID: a dead-letter file) and its path, all
# joined by FIELD_SEP. Its rows are Spark's Kafka source's columns, but the timestamp is Kafka's
# milliseconds, in TIMESTAMP_MS_COLUMN, and a dead letter's reason is in ARCHIVE_REASON_COLUMN.
OPTION_SEGMENTS = "segments"
NO_SCHEMA_ID = -1
TIMESTAMP_MS_COLUMN = "_kl_ms"
ARCHIVE_REASON_COLUMN = "_kl_archived_reason"
ARCHIVE_COLUMNS = ("key", "value", "topic", "partition", "offset", TIMESTAMP_MS_COLUMN, "headers", ARCHIVE_REASON_COLUMN)
# A dead-letter file's fields (avro_schemas.DEAD_LETTER_SCHEMA), in its order.
DEAD_LETTER_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers", "schema_id", "reason")

# The body check's config is a session setting, BODY_CHECK_CONFIG + a key: MAY_VOUCH if it may say
# LANDS (MAY_NOT_VOUCH: never), the routing field, the event time field (each empty for none) and
# the writer schema's JSON, joined by FIELD_SEP. Its verdicts:
BODY_CHECK_CONFIG = "spark.kafka_landing.body_check."
MAY_VOUCH = "1"
MAY_NOT_VOUCH = "0"
LANDS, UNSURE, DEAD = 0, 1, 2


class ResultRow(NamedTuple):
    """One of the direct landing's result rows: its kind, and the columns that kind fills."""

    kind: str
    hour_ix: int | None = None
    chunk: int | None = None
    table: str | None = None
    schema_id: int | None = None
    n: int = 0
    path: str | None = None
    part: int | None = None
    offset: int | None = None

    @classmethod
    def of(cls, row: dict) -> ResultRow:
        """A row Spark returned (Row.asDict()), by column name."""
        return cls(**{c: row.get(c) for c in cls._fields})


RESULT_COLUMNS = ResultRow._fields
KIND_UNSURE = "unsure"  # the task removed its files: land the decoding way
KIND_SPREAD = "spread"  # the task removed its files: more event hours than MAX_EVENT_FILES
KIND_FILE = "file"  # a file written: hour_ix, chunk, table, n rows, path, part
KIND_HOUR = "hour"  # n records of the frozen tasks of hour_ix
KIND_GAPS = "gaps"  # n offsets of hour_ix in part the consumer gave no record for
KIND_GAP = "gap"  # one range of them: n offsets from offset
KIND_ID = "id"  # schema_id was seen in hour_ix
KIND_UNCLAIMED = "unclaimed"  # n records no frozen task holds
KIND_BAD_FRAMING = "bad_framing"  # n records without a schema id to land by
KIND_RECORDS = "records"  # n records of schema_id
KIND_DEAD = "dead"  # n of them the strict walk refused

# A staged file's folders under the write's output, in this order, key=value each: Spark's
# partitioned writes (write.write_good) name theirs so, and the direct landing names its own alike.
HOUR_KEY = "_kl_hour"
CHUNK_KEY = "_kl_chunk"
TABLE_KEY = "_kl_table"
PART_KEY = "_kl_part"
STAGED_KEYS = (HOUR_KEY, CHUNK_KEY, TABLE_KEY, PART_KEY)
# Then, in a topic split by event hour, the event hour's folder; a record with no event time, Spark's name for none.
EVENT_HOUR_KEY = "_kl_ehour"
NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"
# The event hours one frozen task of one table keeps files open for; more, and it goes the decoding way.
MAX_EVENT_FILES = 48
