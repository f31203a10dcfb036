"""Landing one hour of one topic, in the order the data flows:

    read    the slice's exact offset ranges with Spark's Kafka source
    decode  the Confluent framing and the Avro body, in the JVM (from_avro per schema id)
    route   each record to its table
    write   Avro files per (task, table, Kafka partition[, event hour]) into a private staging folder
    publish move the files into place, dead letters first, then one done file per table, last

Nothing is visible until it is complete: staged files are never listed, and a
done file names only files already in place. Re-landing an hour writes files
of the same names and content (the slice and its task split are frozen), then
replaces the done file and removes what it no longer lists.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import LongType, TimestampNTZType, TimestampType

from kafka_landing import avro_schemas
from kafka_landing.crash_points import crash_point
from kafka_landing.landing_store import LandingStore
from kafka_landing.manifests import DeadLetters, DoneFile, LandedFile
from kafka_landing.naming import (
    dead_letter_dir,
    dead_letter_file_name,
    done_file_path,
    hour_from_tag,
    landing_file_name,
    slice_manifest_path,
    table_hour_dir,
)
from kafka_landing.planning import SlicePlan
from kafka_landing.topic_config import TopicConfig

NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"
DEAD_LETTER_MANIFEST = "_MANIFEST.json"


class LandingError(RuntimeError):
    pass


class DeadLetterLimitExceeded(LandingError):
    pass


@dataclass
class LandingResult:
    done: dict[str, DoneFile]  # table -> done file
    dead_letters: DeadLetters
    records_read: int
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(d.rows for d in self.done.values())

    @property
    def bytes_written(self) -> int:
        files = [f for d in self.done.values() for f in d.files] + list(self.dead_letters.files)
        return sum(f.bytes for f in files)


# --- read --------------------------------------------------------------------

def read_slice(spark: SparkSession, kafka_options: dict, plan: SlicePlan) -> DataFrame | None:
    """Exactly the frozen offsets, split into Spark tasks of at most rows_per_task records."""
    parts = [p for p in plan.partitions if p.records > 0]
    if not parts:
        return None
    topic = plan.topic
    return (
        spark.read.format("kafka")
        .options(**kafka_options)
        .option("assign", json.dumps({topic: [p.partition for p in parts]}))
        .option("startingOffsets", json.dumps({topic: {str(p.partition): p.start for p in parts}}))
        .option("endingOffsets", json.dumps({topic: {str(p.partition): p.end for p in parts}}))
        .option("maxRecordsPerPartition", str(plan.rows_per_task))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .load()
    )


# --- decode --------------------------------------------------------------------

def frame_columns(raw: DataFrame) -> DataFrame:
    """Kafka columns renamed to the landing metadata columns, plus the Confluent
    framing split into reason (why it cannot be decoded, if known now), schema id and body."""
    value = F.col("value")
    return raw.select(
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias("_kafka_key"),
        F.col("headers").alias("_kafka_headers"),
        value.alias("_value"),
        F.when(value.isNull(), F.lit("null value"))
        .when(F.length(value) < 5, F.lit("shorter than the 5-byte header"))
        .when(F.hex(F.substring(value, 1, 1)) != F.lit("00"), F.lit("bad magic byte"))
        .alias("_reason"),
        F.when(F.length(value) >= 5, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")).alias("_schema_id"),
        F.expr("substring(value, 6)").alias("_body"),
        # The Spark task that read the record; files are written per task, so
        # each file holds a contiguous offset range of one partition.
        F.spark_partition_id().alias("_kl_task"),
    )


def decode(framed: DataFrame, schema_id: int, writer: dict) -> DataFrame:
    """Records of one schema id with the decoded struct `_rec` (null when corrupt)."""
    reader = avro_schemas.marked_reader_schema(writer)
    rec = from_avro(F.col("_body"), json.dumps(writer), {"mode": "PERMISSIVE", "avroSchema": json.dumps(reader)})
    rows = framed.where(F.col("_reason").isNull() & (F.col("_schema_id") == F.lit(schema_id)))
    rows = rows.withColumn("_rec", rec)
    return rows.withColumn(
        "_rec", F.when(F.col("_rec").getField(avro_schemas.OK_MARKER).isNotNull(), F.col("_rec"))
    )


# --- route -------------------------------------------------------------------

def route_column(cfg: TopicConfig, fields: list[str], warnings: list[str]) -> F.Column:
    if cfg.route is None:
        return F.lit(cfg.table)
    if cfg.route.field not in fields:
        warnings.append(f"routing field {cfg.route.field!r} is not in the schema: all its records go to {cfg.route.default!r}")
        return F.lit(cfg.route.default)
    pairs = [F.lit(x) for kv in sorted(cfg.route.tables.items()) for x in kv]
    value = F.col("_rec").getField(cfg.route.field).cast("string")
    return F.coalesce(F.create_map(*pairs)[value], F.lit(cfg.route.default))


def event_hour_column(cfg: TopicConfig, decoded: DataFrame, warnings: list[str]) -> F.Column | None:
    if not cfg.event_time_field:
        return None
    rec_type = decoded.schema["_rec"].dataType
    if cfg.event_time_field not in rec_type.names:
        warnings.append(f"event time field {cfg.event_time_field!r} is not in the schema: files are not split by event hour")
        return F.lit(None).cast("string")
    col = F.col("_rec").getField(cfg.event_time_field)
    dtype = rec_type[cfg.event_time_field].dataType
    if isinstance(dtype, LongType):
        col = F.timestamp_millis(col)
    elif not isinstance(dtype, (TimestampType, TimestampNTZType)):
        raise LandingError(f"event time field {cfg.event_time_field!r} has type {dtype.simpleString()}, not a timestamp")
    return F.date_format(F.date_trunc("hour", col), "yyyy-MM-dd'T'HH")


# --- write ---------------------------------------------------------------------

def _group_dirs(base: Path) -> dict[tuple, Path]:
    """{(task, table, partition, event hour): file} for Spark's partitioned output."""
    out = {}
    for f in base.rglob("*.avro"):
        keys = dict(re.findall(r"(_kl_\w+)=([^/]+)", str(f.relative_to(base))))
        k = (int(keys["_kl_task"]) if "_kl_task" in keys else None, keys.get("_kl_table"), int(keys["_kl_part"]),
             None if keys.get("_kl_ehour") in (None, NO_EVENT_HOUR) else keys["_kl_ehour"])
        if k in out:
            raise LandingError(f"Spark wrote two files for one group {k}; expected one per task")
        out[k] = f
    return out


def _stats(df: DataFrame, keys: list[str], extra: list[F.Column] = ()) -> dict[tuple, dict]:
    rows = df.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("rows"), F.min("_kafka_offset").alias("first"), F.max("_kafka_offset").alias("last"), *extra
    ).collect()
    return {tuple(r[k] for k in keys): r.asDict() for r in rows}


@dataclass
class _Staged:
    src: Path
    rel: str  # final path under the landing root
    file: LandedFile
    table: str | None = None


def write_good(decoded: DataFrame, cfg: TopicConfig, plan: SlicePlan, schema_id: int, writer: dict,
               staging: Path, warnings: list[str]) -> list[_Staged]:
    fields = avro_schemas.field_names(writer)
    ehour = event_hour_column(cfg, decoded, warnings)
    good = decoded.where(F.col("_rec").isNotNull()).select(
        *[F.col("_rec").getField(n).alias(n) for n in fields],
        *[F.col(c) for c in avro_schemas.META_COLUMNS],
        F.col("_kl_task"),
        route_column(cfg, fields, warnings).alias("_kl_table"),
        F.col("_kafka_partition").alias("_kl_part"),
        *([ehour.alias("_kl_ehour")] if ehour is not None else []),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        keys = ["_kl_task", "_kl_table", "_kl_part"] + (["_kl_ehour"] if ehour is not None else [])
        stats = _stats(good, keys)
        if not stats:
            return []
        out = staging / f"schema_id={schema_id}"
        (good.write.partitionBy(*keys).format("avro")
         .option("avroSchema", json.dumps(avro_schemas.landing_schema(writer)))
         .mode("error").save(str(out)))
    finally:
        good.unpersist()
    staged = []
    for (task, table, part, eh), src in _group_dirs(out).items():
        s = stats[(task, table, part, eh) if ehour is not None else (task, table, part)]
        name = landing_file_name(plan.topic, part, cfg.dataset, table, schema_id, s["first"], s["last"],
                                 hour_from_tag(eh) if eh else None)
        rel = f"{table_hour_dir(cfg.dataset, table, hour_from_tag(plan.hour))}/{name}"
        staged.append(_Staged(src, rel, LandedFile(rel, s["rows"], src.stat().st_size, part, s["first"], s["last"],
                                                   schema_id, eh), table))
    if sum(s.file.rows for s in staged) != sum(s["rows"] for s in stats.values()):
        raise LandingError("the files Spark wrote do not hold the rows counted; nothing was published")
    return staged


def write_dead_letters(dead: DataFrame, plan: SlicePlan, staging: Path) -> tuple[list[_Staged], dict[str, int]]:
    dead = dead.select(
        F.col("_kafka_topic").alias("topic"), F.col("_kafka_partition").alias("partition"),
        F.col("_kafka_offset").alias("offset"), F.col("_kafka_timestamp").alias("timestamp"),
        F.col("_kafka_key").alias("key"), F.col("_value").alias("value"), F.col("_kafka_headers").alias("headers"),
        F.col("_schema_id").alias("schema_id"), F.col("_reason").alias("reason"),
        F.col("_kl_task"), F.col("_kafka_partition").alias("_kl_part"), F.col("_kafka_offset"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # One pass for both the per-reason counts and the per-file offsets.
        rows = dead.groupBy("_kl_part", "reason").agg(
            F.count(F.lit(1)).alias("rows"), F.min("_kafka_offset").alias("first"), F.max("_kafka_offset").alias("last")
        ).collect()
        if not rows:
            return [], {}
        by_reason: dict[str, int] = {}
        stats: dict[tuple, dict] = {}
        for r in rows:
            by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + r["rows"]
            s = stats.setdefault((r["_kl_part"],), {"rows": 0, "first": r["first"], "last": r["last"]})
            s["rows"] += r["rows"]
            s["first"], s["last"] = min(s["first"], r["first"]), max(s["last"], r["last"])
        out = staging / "dead_letters"
        # Few rows, from several decode passes: one file per Kafka partition.
        (dead.drop("_kafka_offset", "_kl_task").repartition("_kl_part").write.partitionBy("_kl_part").format("avro")
         .option("avroSchema", json.dumps(avro_schemas.DEAD_LETTER_SCHEMA)).mode("error").save(str(out)))
    finally:
        dead.unpersist()
    staged = []
    for (_task, _t, part, _e), src in _group_dirs(out).items():
        s = stats[(part,)]
        rel = f"{dead_letter_dir(plan.topic, hour_from_tag(plan.hour))}/{dead_letter_file_name(plan.topic, part, s['first'], s['last'])}"
        staged.append(_Staged(src, rel, LandedFile(rel, s["rows"], src.stat().st_size, part, s["first"], s["last"])))
    return staged, by_reason


# --- publish -------------------------------------------------------------------

def _remove_unlisted(store: LandingStore, rel_dir: str, listed: set[str]) -> None:
    for rel in store.list(rel_dir, "*.avro"):
        if rel not in listed:
            store.delete(rel)


def keep_rejected_dead_letters(store: LandingStore, plan: SlicePlan, dead: list[_Staged], dl: DeadLetters,
                               attempt: str) -> str:
    """Dead letters of an attempt that failed its limit, kept beside (never over) the hour's
    published ones, so the previous complete hour stays intact. Returns their folder."""
    rejected = f"{dead_letter_dir(plan.topic, hour_from_tag(plan.hour))}/rejected/{attempt}"
    files = []
    for s in dead:
        rel = f"{rejected}/{Path(s.rel).name}"
        store.move(s.src, rel)
        files.append(LandedFile(**{**asdict(s.file), "path": rel}))
    store.write_json_atomic(f"{rejected}/{DEAD_LETTER_MANIFEST}", {
        "topic": plan.topic, "hour": plan.hour, "attempt": attempt, "rows": dl.rows, "by_reason": dl.by_reason,
        "files": [asdict(f) for f in files],
    })
    return rejected


def publish(store: LandingStore, cfg: TopicConfig, plan: SlicePlan, good: list[_Staged], dead: list[_Staged],
            dl: DeadLetters, records_read: int, attempt: str) -> dict[str, DoneFile]:
    """Make the hour visible: files in place first, then the manifests, then, only once the
    new done files are in place, remove what they no longer list. A crash at any point
    leaves either the previous complete hour or the new one readable through the done files."""
    hour = hour_from_tag(plan.hour)
    tables = {t: sorted((s for s in good if s.table == t), key=lambda s: s.rel) for t in cfg.tables}
    with store.lock(f"locks/{plan.topic}/hour={plan.hour}.lock"):
        for s in [*dead, *(s for mine in tables.values() for s in mine)]:
            store.move(s.src, s.rel)  # same name, same rows as a previous attempt's file
        crash_point("landing:files_moved")
        store.write_json_atomic(f"{dead_letter_dir(plan.topic, hour)}/{DEAD_LETTER_MANIFEST}",
                                {"topic": plan.topic, "hour": plan.hour, "attempt": attempt, **asdict(dl)})
        landed_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        slice_info = {
            "manifest": slice_manifest_path(plan.topic, hour), "records": plan.records,
            "partitions": [{"partition": p.partition, "start": p.start, "end": p.end} for p in plan.partitions],
        }
        done = {}
        for table, mine in tables.items():
            files = tuple(s.file for s in mine)
            done[table] = DoneFile(
                topic=plan.topic, dataset=cfg.dataset, table=table, hour=plan.hour,
                rows=sum(f.rows for f in files), schema_ids=tuple(sorted({f.schema_id for f in files})),
                files=files, dead_letters=dl, slice=slice_info, topic_records_read=records_read,
                offset_gaps=plan.records - records_read, attempt=attempt, landed_at=landed_at,
            )
            # Written last, atomically: the hour of this table is now complete.
            store.write_json_atomic(done_file_path(cfg.dataset, table, hour), done[table].to_dict())
            crash_point("landing:done_written")
        crash_point("landing:published")
        # Only now that every new done file is in place: remove what none of them lists.
        for table, d in done.items():
            _remove_unlisted(store, table_hour_dir(cfg.dataset, table, hour), {f.path for f in d.files})
        _remove_unlisted(store, dead_letter_dir(plan.topic, hour), {f.path for f in dl.files})
    return done


# --- the whole hour --------------------------------------------------------------

def land_hour(
    spark_factory: Callable[[], SparkSession], store: LandingStore, fetch_schema: Callable[[int], str | None],
    kafka_options: dict, cfg: TopicConfig, plan: SlicePlan, attempt: str,
) -> LandingResult:
    """Land one frozen slice. `fetch_schema(id)` returns the writer schema JSON, or None if unknown."""
    t0 = time.monotonic()
    warnings: list[str] = []
    staging_rel = f"staging/{plan.topic}/hour={plan.hour}/{attempt}"
    staging = store.path(staging_rel)
    good: list[_Staged] = []
    dead: list[_Staged] = []
    by_reason: dict[str, int] = {}
    records_read = 0
    try:
        if plan.records:
            spark = spark_factory()
            framed = frame_columns(read_slice(spark, kafka_options, plan)).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                counts = framed.groupBy("_schema_id", "_reason").agg(F.count(F.lit(1)).alias("n")).collect()
                records_read = sum(r["n"] for r in counts)
                if records_read > plan.records:
                    raise LandingError(f"read {records_read} records from a slice of {plan.records} offsets")
                ids = sorted({r["_schema_id"] for r in counts if r["_reason"] is None})
                unknown, bad_parts = [], []
                for sid in ids:
                    schema_str = fetch_schema(sid)
                    if schema_str is None:
                        unknown.append(sid)
                        continue
                    writer = avro_schemas.parse(schema_str)
                    decoded = decode(framed, sid, writer)
                    good += write_good(decoded, cfg, plan, sid, writer, staging, warnings)
                    bad_parts.append(decoded.where(F.col("_rec").isNull())
                                     .withColumn("_reason", F.lit(f"corrupt body for schema id {sid}")).drop("_rec"))
                # Most hours have no dead letters: then skip their Spark jobs altogether.
                if sum(s.file.rows for s in good) < records_read:
                    pre = framed.where(F.col("_reason").isNotNull() | F.col("_schema_id").isin(unknown or [-1])).withColumn(
                        "_reason", F.coalesce(F.col("_reason"), F.lit("unknown schema id"))
                    )
                    dead_df = pre
                    for part in bad_parts:
                        dead_df = dead_df.unionByName(part)
                    dead, by_reason = write_dead_letters(dead_df, plan, staging)
            finally:
                framed.unpersist()
        landed = sum(s.file.rows for s in good)
        dead_rows = sum(by_reason.values())
        if landed + dead_rows != records_read:
            raise LandingError(f"conservation broken: read {records_read}, landed {landed} + dead letters {dead_rows}")
        dl = DeadLetters(rows=dead_rows, by_reason=dict(sorted(by_reason.items())),
                         files=tuple(sorted((s.file for s in dead), key=lambda f: f.path)))
        crash_point("landing:staged")
        if records_read and dead_rows / records_read > cfg.dead_letter_limit:
            kept = keep_rejected_dead_letters(store, plan, dead, dl, attempt)
            raise DeadLetterLimitExceeded(
                f"{plan.topic} {plan.hour}: {dead_rows} of {records_read} records are dead letters "
                f"({dead_rows / records_read:.1%} > limit {cfg.dead_letter_limit:.1%}): {dl.by_reason}. "
                f"They are kept under {kept}. Nothing of this attempt was published: the hour's previous "
                "done files, if any, are untouched. Fix the producer or the registry, or raise the topic's "
                "dead_letter_limit, then re-land the hour."
            )
        done = publish(store, cfg, plan, good, dead, dl, records_read, attempt)
    finally:
        store.delete(staging_rel)
    return LandingResult(done=done, dead_letters=dl, records_read=records_read,
                         seconds=time.monotonic() - t0, warnings=warnings)
