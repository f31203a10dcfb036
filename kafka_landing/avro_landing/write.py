"""WRITE: Avro files per (hour, frozen task, table, Kafka partition[, event hour]) into the
attempt's private staging folder under the landing root, and the dead letters per (hour, Kafka
partition) beside them, every hour of the run in one Spark job per schema id. Nothing written
here is visible: only `publish` makes files part of an hour.

A file's rows and first and last offsets (its name) come from the written file itself (block
headers, first and last block), not from a second Spark job over the records. Records are
written in offset order, and a frozen task is never split across Spark tasks (read_hours), so
a file's name and content are the same whichever hours were landed together.

No sort before the write, so memory does not grow with the hour: a Spark task reads its offsets
in order and holds at most `plan.TASKS_PER_READ` frozen tasks, so Spark's concurrent writers (one
open file per frozen task and table) receive each file's records in offset order as they come.
Only event hours, whose number per task has no bound, still go through a sort.

Records are spliced, not re-encoded: the splice writer (jvm/splice, format `kafka-landing-splice`)
appends each record's Avro body as the producer encoded it, then the encoded Kafka columns. Avro
encodes a record as its fields one after another, so that is the landing record, written without
decoding a field back into Avro. The decode step (and the body check before it, decode.BODY_CHECK)
decides what lands, and dead letters keep their reasons; Spark's own Avro writer (`splice=False`)
stays as the reference the splice writer is compared with, record by record. It needs every
record decoded: classify() of a decode without a `vouch`."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kafka_landing.avro_files import AvroFileError
from kafka_landing.avro_landing import avro_schemas
from kafka_landing.avro_landing.contract import (
    BODY_COLUMN,
    CHUNK_KEY,
    HOUR_KEY,
    NO_EVENT_HOUR,
    OPTION_AVRO_SCHEMA,
    OPTION_WRITER_SCHEMA,
    PART_KEY,
    SPLICE_FORMAT,
    STAGED_KEYS,
    TABLE_KEY,
)
from kafka_landing.config import TopicConfig
from kafka_landing.errors import KafkaLandingError, LandingError
from kafka_landing.kafka_slices.plan import TASKS_PER_READ
from kafka_landing.handoff.manifests import LandedFile
from kafka_landing.naming import (
    dead_letter_dir,
    dead_letter_file_name,
    Hour,
    landing_file_name,
    OffsetRange,
    table_hour_dir,
)
from kafka_landing.store.base import LandingStore

SPLICE_JAR = "kafka-landing-splice-0.jar"

# What a dead letter keeps of a record, whichever step turned it away.
DEAD_LETTER_COLUMNS = [*avro_schemas.META_COLUMNS, "_value", "_schema_id", "_reason", HOUR_KEY]


class NothingWritten(KafkaLandingError, RuntimeError):
    """A write of no record on a bucket: with no task output, Hadoop's committer finds no
    `_temporary` folder to commit (a bucket has no empty folders) and the job fails."""


@dataclass
class Staged:
    src: str  # where Spark wrote it, under the attempt's staging folder
    rel: str  # its final path; both relative to the landing root
    file: LandedFile
    hour: str  # the landing hour's tag
    table: str | None = None


class StagedKey(NamedTuple):
    """Where a staged file belongs: its folders (contract.STAGED_KEYS, then the event hour's). A
    dead letter's has no frozen task, table nor event hour; a landing file's, no event hour unless
    its topic is split by one."""

    hour: str
    chunk: int | None  # the frozen task's first offset
    table: str | None
    part: int
    event_hour: str | None = None

    @classmethod
    def of(cls, folders: str) -> StagedKey:
        """The key of a file under `folders` (a path below the write's output)."""
        keys = dict(re.findall(r"(_kl_\w+)=([^/]+)", folders))
        event_hour = keys.get(avro_schemas.EVENT_HOUR_KEY)
        return cls(keys[HOUR_KEY], int(keys[CHUNK_KEY]) if CHUNK_KEY in keys else None, keys.get(TABLE_KEY),
                   int(keys[PART_KEY]), None if event_hour in (None, NO_EVENT_HOUR) else event_hour)


def _group_files(store: LandingStore, rel_dir: str) -> dict[StagedKey, str]:
    """{key: file} of Spark's partitioned output under `rel_dir`."""
    out = {}
    for rel in store.walk(rel_dir, ".avro"):
        k = StagedKey.of(rel[len(rel_dir):])
        if k in out:
            raise LandingError(f"Spark wrote two files for one group {k} under {store.location(rel_dir)}; "
                               "expected one per frozen task")
        out[k] = rel
    return out


def _nothing_to_commit(exc: BaseException) -> bool:
    """The committer's complaint when no task wrote anything on a bucket: listing its `_temporary`
    folder, which was never made (`FileNotFoundException ... _temporary/0 ... does not exist`). A
    task that failed is not that, though its message may name `_temporary` too."""
    msg = str(exc)
    return "FileNotFoundException" in msg and "_temporary" in msg and "stage failure" not in msg


def _written(store: LandingStore, src: str, what: str, field: str = "_kafka_offset") -> tuple[int, int, int]:
    """(rows, first and last offset) of a file just written with `what` (its records, for messages).
    Whichever writer wrote it (Spark's, the splice writer, the direct operator), the read-back is
    fastavro's: a file it cannot read is one the landing must not publish."""
    try:
        rows, first, last = store.avro_offsets(src, field)
    except AvroFileError as exc:
        raise LandingError(f"{store.location(src)}, written with {what}, cannot be read back by fastavro ({exc}). "
                           "Nothing was published. Landing wrote a file its readers would refuse, a bug: report it "
                           "with this message; landing the hour again fails the same way while it holds these "
                           "records") from None
    if not rows:
        raise LandingError(f"{store.location(src)}, written with {what}, is empty; nothing was published")
    return rows, first, last


@contextmanager
def _session_settings(spark, settings: dict[str, str]):
    """Spark SQL settings for one write, then back as they were (the session is the run's)."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        if getattr(spark, "is_stopped", False):
            return  # the server dropped the session: nothing to put back, and the write's own error says why
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def unsorted_write_settings(tables: int) -> dict[str, str]:
    """Spark writes partitioned output through concurrent writers instead of sorting it first:
    planned writes would add the sort to the plan, and enough writers for every (frozen task,
    table) of a Spark task mean the writer never falls back to sorting."""
    return {"spark.sql.optimizer.plannedWrite.enabled": "false",
            "spark.sql.maxConcurrentOutputFileWriters": str(TASKS_PER_READ * tables)}


def write_good(classified: DataFrame, cfg: TopicConfig, schema_id: int, writer: dict,
               store: LandingStore, staging: str, splice: bool = True) -> list[Staged]:
    """The records of classify() with no reason, as Avro files per (hour, task, table,
    partition[, event hour]), each in offset order. `splice`: each record's body bytes as
    produced (see the module's docstring); otherwise its decoded fields, re-encoded by Spark."""
    split = avro_schemas.EVENT_HOUR_KEY in classified.columns
    keys = [*STAGED_KEYS, *([avro_schemas.EVENT_HOUR_KEY] if split else [])]
    options = {OPTION_AVRO_SCHEMA: json.dumps(avro_schemas.landing_schema(writer))}
    if splice:
        fmt, record, options[OPTION_WRITER_SCHEMA] = SPLICE_FORMAT, [F.col(BODY_COLUMN)], json.dumps(writer)
    else:
        fmt, record = "avro", [F.col("_rec").getField(n).alias(n) for n in avro_schemas.field_names(writer)]
    good = classified.where(F.col("_reason").isNull()).select(
        *record,
        *[F.col(c) for c in avro_schemas.META_COLUMNS],
        F.col(HOUR_KEY), F.col(CHUNK_KEY), F.col(TABLE_KEY), F.col("_kafka_partition").alias(PART_KEY),
        *([F.col(avro_schemas.EVENT_HOUR_KEY)] if split else []),
    )
    out = f"{staging}/schema_id={schema_id}"
    if split:  # sorted by the writer's own keys, then the offset: a file's records in log order
        ordered, settings = good.sortWithinPartitions(*keys, "_kafka_offset"), {}
    else:  # already in log order per Spark task (see the module's docstring)
        ordered, settings = good, unsorted_write_settings(len(cfg.tables))
    try:
        with _session_settings(good.sparkSession, settings):
            ordered.write.partitionBy(*keys).format(fmt).options(**options).mode("error").save(store.location(out))
    except Exception as exc:  # noqa: BLE001 - only the known cases are turned into errors of their own
        if _nothing_to_commit(exc) and not store.walk(out, ".avro"):
            raise NothingWritten(f"no record of schema id {schema_id} to write under {store.location(out)}") from None
        if SPLICE_FORMAT in str(exc) and "DATA_SOURCE_NOT_FOUND" in str(exc):
            raise LandingError(f"{cfg.topic}: the Spark engine has no splice writer (format {SPLICE_FORMAT!r}, "
                               f"jar {SPLICE_JAR} from `make jvm`): nothing was published. Restart the Spark Connect "
                               "server with the connector jars of `make jvm` (locally: make stack-down; make "
                               "stack-up), or add the jar to its spark.jars") from None
        raise
    return staged_files(store, cfg, schema_id, _group_files(store, out))


def staged_files(store: LandingStore, cfg: TopicConfig, schema_id: int, groups: dict[StagedKey, str]) -> list[Staged]:
    """The written files {key: where} as landing files: rows, first and last offsets (their
    names) read from each file itself."""
    staged = []
    # None (no chunk, no event time) sorts before any value: a partition's records with no event
    # time and those with one are two groups of one task.
    for (hour, task, table, part, eh), src in sorted(groups.items(),
                                                      key=lambda kv: [(v is not None, v) for v in kv[0]]):
        rows, first, last = _written(store, src, f"the records of topic {cfg.topic!r} partition {part} from offset "
                                     f"{task} (hour {hour}, table {table})")
        name = landing_file_name(OffsetRange(cfg.topic, part, first, last), cfg.dataset, table, schema_id,
                                 Hour(eh) if eh else None)
        rel = f"{table_hour_dir(cfg.dataset, table, Hour(hour))}/{name}"
        staged.append(Staged(src, rel, LandedFile(rel, rows, store.size(src), part, first, last, schema_id, eh,
                                                      crc32c=store.crc32c(src)),
                             hour, table))
    return staged


def write_dead_letters(dead: DataFrame, topic: str, store: LandingStore,
                       staging: str) -> tuple[list[Staged], dict[str, dict[str, int]]]:
    """The records of DEAD_LETTER_COLUMNS as one Avro file per (hour, Kafka partition), in offset
    order; returns them and {hour: {reason: rows}}, counted from the written files."""
    dead = dead.select(
        F.col("_kafka_topic").alias("topic"), F.col("_kafka_partition").alias("partition"),
        F.col("_kafka_offset").alias("offset"), F.col("_kafka_timestamp").alias("timestamp"),
        F.col("_kafka_key").alias("key"), F.col("_value").alias("value"), F.col("_kafka_headers").alias("headers"),
        F.col("_schema_id").alias("schema_id"), F.col("_reason").alias("reason"),
        F.col(HOUR_KEY), F.col("_kafka_partition").alias(PART_KEY),
    )
    out = f"{staging}/dead_letters"
    # Few rows, from several decode passes: gathered into one file per (hour, partition).
    (dead.repartition(HOUR_KEY, PART_KEY).sortWithinPartitions(HOUR_KEY, PART_KEY, "offset")
     .write.partitionBy(HOUR_KEY, PART_KEY).format("avro")
     .option(OPTION_AVRO_SCHEMA, json.dumps(avro_schemas.DEAD_LETTER_SCHEMA)).mode("error").save(store.location(out)))
    files = _group_files(store, out)
    if not files:
        return [], {}
    # Counted from what was written (a small read of the dead letters only, never of Kafka).
    counted = (dead.sparkSession.read.format("avro").load(store.location(out))
               .groupBy(HOUR_KEY, "reason").agg(F.count(F.lit(1)).alias("rows")).collect())
    by_reason: dict[str, dict[str, int]] = {}
    for r in counted:
        by_reason.setdefault(r[HOUR_KEY], {})[r["reason"]] = r["rows"]
    staged = []
    for (hour, _t, _table, part, _e), src in sorted(files.items()):
        rows, first, last = _written(store, src, f"the dead letters of topic {topic!r} partition {part} (hour {hour})",
                                     "offset")
        rel = f"{dead_letter_dir(topic, Hour(hour))}/{dead_letter_file_name(OffsetRange(topic, part, first, last))}"
        staged.append(Staged(src, rel, LandedFile(rel, rows, store.size(src), part, first, last,
                                                      crc32c=store.crc32c(src)), hour))
    return staged, by_reason

