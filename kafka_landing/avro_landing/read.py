"""READ: exactly the frozen offsets of a run of hours from Kafka, with Spark's Kafka source
(read_committed, so aborted transactions never land), in one Spark job whatever the number of
hours. Consecutive frozen slices of a partition are contiguous, so a run of hours is a few
contiguous offset ranges per partition, cut only between frozen tasks (`plan.read_segments`,
about 1/parallelism of the records each). Each record gets its hour and its frozen task from
its offset, through a small broadcast table of the frozen task boundaries, in the JVM. Reading
beyond the hours is impossible: every range ends at a frozen offset.

An hour Kafka no longer holds is read from its archive instead (`read_archive`): the same records
with the same columns, so decode, route and write do not know where they came from."""

from __future__ import annotations

import bisect
import json
import re
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_landing.avro_landing.archive import ArchiveHour
from kafka_landing.avro_landing.contract import (
    ARCHIVE_FORMAT,
    ARCHIVE_REASON_COLUMN,
    TIMESTAMP_MS_COLUMN,
    CHUNK_KEY,
    FIELD_SEP,
    HOUR_KEY,
    ITEM_SEP,
    NO_SCHEMA_ID,
    NUMBER_SEP,
    OPTION_SEGMENTS,
)
from kafka_landing.kafka_slices.plan import HourTask, read_segments
from kafka_landing.store.base import LandingStore
from kafka_landing.spark_setup import default_parallelism


# Bigger polls and fetches than the Kafka client's defaults (500 records, 1 MB per partition): each
# Spark task reads one partition's range start to end, so fewer, larger round trips. Reading 1.2M
# small records on the warm engine: 2.8 s with the defaults, 2.0 s with these. The Kafka resource's
# own options come after, and win.
READ_OPTIONS = {"kafka.max.poll.records": "20000", "kafka.max.partition.fetch.bytes": str(8 << 20)}


# Spark's Kafka source reads a record's timestamp through java.sql.Timestamp, whose calendar is
# Julian before this instant (1582-10-15T00:00Z), and keeps that date and time in the proleptic
# Gregorian calendar (DateTimeUtils.fromJavaTimestamp): an earlier timestamp comes out moved by
# days (by two at year 1). From this instant on, the column is Kafka's milliseconds exactly.
GREGORIAN_FROM_MS = -12_219_292_800_000
_DAY_MS = 86_400_000
# A dead letter's reason for a Kafka timestamp outside years 1-9999 (decode.frame_columns), around
# Kafka's milliseconds: that dead letter's timestamp is null, as timestamp-millis cannot hold it.
OUT_OF_RANGE = ("Kafka timestamp ", " ms is out of range (before year 1 or after 9999)")
OUT_OF_RANGE_MS = re.escape(OUT_OF_RANGE[0]) + "(-?[0-9]+)" + re.escape(OUT_OF_RANGE[1])
_EPOCH_JULIAN_DAY = 2_440_588  # the Julian day number of 1970-01-01


def kafka_millis(ts: F.Column) -> F.Column:
    """A record's timestamp as Kafka holds it, in epoch milliseconds, from the `timestamp` column
    of Spark's Kafka source: before 1582-10-15 that column's date and time are the Julian
    calendar's, counted back into days by the Julian day number. In the JVM."""
    ms = F.unix_millis(ts)
    a = F.floor((14 - F.month(ts)) / 12)
    y, m = F.year(ts) + 4800 - a, F.month(ts) + 12 * a - 3
    julian_day = F.dayofmonth(ts) + F.floor((153 * m + 2) / 5) + 365 * y + F.floor(y / 4) - 32083
    return F.when(ms < GREGORIAN_FROM_MS, (julian_day - _EPOCH_JULIAN_DAY) * _DAY_MS + F.pmod(ms, F.lit(_DAY_MS))) \
        .otherwise(ms)


def _read_one(spark: SparkSession, kafka_options: dict, topic: str, ranges: dict[int, tuple[int, int]]) -> DataFrame:
    return (
        spark.read.format("kafka")
        .options(**READ_OPTIONS)
        .options(**kafka_options)
        .option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}}))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .load()
    )


def read_hours(spark: SparkSession, kafka_options: dict, topic: str, tasks: list[HourTask]) -> DataFrame | None:
    """The records of the tasks, each with `_kl_hour` (its hour tag), `_kl_hour_ix` (the hour's
    place among the tasks' sorted hours: cheaper to compare per record than the tag) and
    `_kl_chunk` (the first offset of its frozen task), or None when the tasks hold no offsets.
    A record no task claims has a null `_kl_hour` (the caller counts them: there must be none)."""
    if not tasks:
        return None
    segments = read_segments(tasks, default_parallelism(spark))
    raw = reduce(DataFrame.unionByName, [_read_one(spark, kafka_options, topic, s) for s in segments])
    return _claimed(spark, raw.withColumn(TIMESTAMP_MS_COLUMN, kafka_millis(F.col("timestamp"))), tasks)


def read_archive(spark: SparkSession, archive_segments: str, tasks: list[HourTask]) -> DataFrame | None:
    """`read_hours`, from the hours' archives instead of Kafka (archive.py): the same records with
    the same columns, in the same order per frozen task, read by the archive source in the JVM
    (jvm/splice ArchiveSource) from the option `archive_segments` builds: a landing file's
    record gives its body back as produced, framed with the file's schema id; a dead letter, its
    raw value. A dead letter's timestamp, kept null where Kafka's was out of range, is taken back
    from its reason."""
    if not tasks:
        return None
    raw = spark.read.format(ARCHIVE_FORMAT).option(OPTION_SEGMENTS, archive_segments).load()
    out_of_range = F.regexp_extract(F.col(ARCHIVE_REASON_COLUMN), OUT_OF_RANGE_MS, 1)
    raw = raw.withColumn(TIMESTAMP_MS_COLUMN, F.coalesce(
        F.col(TIMESTAMP_MS_COLUMN), F.when(out_of_range != "", out_of_range.cast("long"))))
    return _claimed(spark, raw, tasks)


def archive_segments(store: LandingStore, archives: list[ArchiveHour], tasks: list[HourTask], parallelism: int) -> str:
    """The archive source's option (contract.OPTION_SEGMENTS): the ranges `read_segments` cuts the
    tasks into, as the Kafka reads are cut, each with the files holding its records: the landing
    files that start in it (a file never crosses a frozen task) and the dead-letter files of its
    partition that overlap it. The direct landing reads the same segments. Found by bisection in
    each partition's files sorted by first offset: a year of hours holds millions of files."""
    by_partition: dict[int, list] = {}  # partition -> [(first offset, schema id, file)], sorted: a year's are many
    for a in archives:
        for sid, f in [*((f.schema_id, f) for f in a.files), *((NO_SCHEMA_ID, f) for f in a.dead_letter_files)]:
            by_partition.setdefault(f.partition, []).append((f.first_offset, sid, f))
    for listed in by_partition.values():
        listed.sort(key=lambda x: (x[0], x[2].path))
    longest = {p: max((f.last_offset - f.first_offset for _, _, f in fs), default=0) for p, fs in by_partition.items()}
    items = []
    for segment in read_segments(tasks, parallelism):
        for p, (start, end) in segment.items():
            listed = by_partition.get(p, [])
            # Files that start in [start - the partition's longest file, end) and end at start or later.
            lo = bisect.bisect_left(listed, start - longest.get(p, 0), key=lambda x: x[0])
            hi = bisect.bisect_left(listed, end, key=lambda x: x[0])
            mine = [(sid, f) for _, sid, f in listed[lo:hi] if f.last_offset >= start]
            items.append(FIELD_SEP.join([NUMBER_SEP.join(map(str, (p, start, end))),
                                         *(x for sid, f in mine for x in (str(sid), store.location(f.path)))]))
    return ITEM_SEP.join(items)


def _claimed(spark: SparkSession, raw: DataFrame, tasks: list[HourTask]) -> DataFrame:
    """Each record with its hour and frozen task, by its offset (see `read_hours`)."""
    ix = {h: i for i, h in enumerate(sorted({t.hour for t in tasks}))}
    # A literal table built in the JVM: createDataFrame from Python rows would start a Python worker.
    bounds = spark.range(1).select(F.inline(F.array(*[
        F.struct(F.lit(t.hour).alias(HOUR_KEY), F.lit(ix[t.hour]).alias("_kl_hour_ix"),
                 F.lit(t.partition).cast("long").alias("_t_part"), F.lit(t.start).cast("long").alias(CHUNK_KEY),
                 F.lit(t.end).cast("long").alias("_t_end"))
        for t in tasks])))
    claimed = ((raw["partition"] == bounds["_t_part"]) & (raw["offset"] >= bounds[CHUNK_KEY])
               & (raw["offset"] < bounds["_t_end"]))
    return raw.join(F.broadcast(bounds), claimed, "left").drop("_t_part", "_t_end")
