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
import operator
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import reduce
from pathlib import Path
from typing import Callable

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import (
    ArrayType, DateType, LongType, MapType, StringType, StructType, TimestampNTZType, TimestampType,
)

from kafka_landing import avro_schemas, registry_answers
from kafka_landing.crash_points import crash_point
from kafka_landing.landing_store import LandingStore
from kafka_landing.load_queue import mark_pending
from kafka_landing.manifests import DeadLetters, DoneFile, LandedFile
from kafka_landing.naming import (
    dead_letter_dir,
    dead_letter_file_name,
    dead_letter_manifest_path,
    done_file_path,
    hour_from_tag,
    landing_file_name,
    slice_manifest_path,
    table_hour_dir,
)
from kafka_landing.planning import SlicePlan
from kafka_landing.topic_config import TopicConfig

NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"


STAGING_MAX_AGE_SECONDS = 24 * 3600


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
    """Records of one schema id with the decoded struct `_rec` (null when it cannot be decoded)
    and `_reason`, why not. A body that decodes once one field's logical types are dropped is
    valid Avro holding a value Spark cannot represent (timestamp-millis past year 294247, a
    decimal wider than its precision): its reason names that field instead of a corrupt body."""
    writer_json = json.dumps(writer)

    def decoded_as(reader: dict) -> F.Column:
        marked = json.dumps(avro_schemas.marked_reader_schema(reader))
        return from_avro(F.col("_body"), writer_json, {"mode": "PERMISSIVE", "avroSchema": marked})

    rows = framed.where(F.col("_reason").isNull() & (F.col("_schema_id") == F.lit(schema_id)))
    rows = rows.withColumn("_rec", decoded_as(writer))
    rows = rows.withColumn(
        "_rec", F.when(F.col("_rec").getField(avro_schemas.OK_MARKER).isNotNull(), F.col("_rec"))
    )
    # Evaluated only for records that did not decode (a CASE branch), so good hours pay nothing.
    out_of_range, logical = [], []
    for f in writer["fields"]:
        kinds = list(dict.fromkeys(avro_schemas.logical_types(f["type"])))
        if kinds:
            logical.append(f["name"])
            raw = decoded_as(avro_schemas.with_field_stripped(writer, f["name"]))
            out_of_range.append(F.when(raw.getField(avro_schemas.OK_MARKER).isNotNull(), F.lit(
                f"field {f['name']!r} ({', '.join(kinds)}) is out of range for schema id {schema_id}")))
    if len(logical) > 1:
        raw = decoded_as(avro_schemas.strip_logical_types(writer))
        names = ", ".join(repr(n) for n in logical)
        out_of_range.append(F.when(raw.getField(avro_schemas.OK_MARKER).isNotNull(), F.lit(
            f"values out of range in two or more of the fields {names} for schema id {schema_id}")))
    corrupt = F.lit(f"corrupt body for schema id {schema_id}")
    return rows.withColumn("_reason", F.when(F.col("_rec").isNull(), F.coalesce(*out_of_range, corrupt)))


def _unlandable(plan: SlicePlan, schema_id: int, why: str) -> str:
    return (f"{plan.topic} {plan.hour}: the writer schema of schema id {schema_id} cannot be landed: {why}. "
            f"Nothing of this hour was published; re-landing it fails the same way while it holds records "
            f"of schema id {schema_id}.")


def _spark_message(exc: BaseException) -> str:
    """The JVM's own messages (cause chain) instead of py4j's 'An error occurred while calling'."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return " ".join(str(exc).split())[:500] or type(exc).__name__
    msgs = []
    while java is not None and len(msgs) < 4:
        msgs.append(" ".join(str(java.toString()).split()))
        java = java.getCause()
    return " <- ".join(msgs)[:500]


def resolve_schemas(fetch_schema: Callable[[int], object], ids: list[int],
                    plan: SlicePlan) -> tuple[dict[int, dict], dict[int, str]]:
    """({schema id: writer schema} to decode, {schema id: dead-letter reason for all its records}).
    A registry that cannot answer, or a writer schema that cannot land, is a LandingError here,
    before anything of the hour is decoded or written."""
    writers: dict[int, dict] = {}
    dead: dict[int, str] = {}
    for sid in ids:
        try:
            answer = fetch_schema(sid)
        except registry_answers.RegistryError as exc:
            raise LandingError(f"{plan.topic} {plan.hour}: {exc}") from exc  # cause kept: is it transient?
        if answer is None:
            dead[sid] = registry_answers.UNKNOWN_SCHEMA_ID
        elif isinstance(answer, registry_answers.DeadSchema):
            dead[sid] = answer.reason
        else:
            try:
                writers[sid] = avro_schemas.parse(answer)
            except avro_schemas.SchemaError as exc:
                raise LandingError(_unlandable(plan, sid, str(exc))) from None
    return writers, dead


def decode_checked(framed: DataFrame, schema_id: int, writer: dict, plan: SlicePlan) -> DataFrame:
    """decode(), with a schema Spark cannot take (recursive, unknown type names, ...) a LandingError
    naming the schema id: Spark parses the schema when it resolves the plan, here."""
    try:
        decoded = decode(framed, schema_id, writer)
        decoded.schema  # noqa: B018 - forces analysis
    except Exception as exc:  # noqa: BLE001 - any analysis failure means this schema cannot be decoded
        raise LandingError(_unlandable(plan, schema_id, f"Spark cannot decode it ({_spark_message(exc)})")) from None
    return decoded


# --- route -------------------------------------------------------------------

EPOCH_MS_YEAR_1 = -62_135_596_800_000  # 0001-01-01T00:00:00Z
EPOCH_MS_YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z: hour tags have four-digit years


def _complex_kind(dtype) -> str | None:
    for t, name in ((StructType, "a record"), (ArrayType, "an array"), (MapType, "a map")):
        if isinstance(dtype, t):
            return name
    return None


def route_column(cfg: TopicConfig, writer: dict, rec_type: StructType,
                 warnings: list[str]) -> tuple[F.Column, F.Column | None]:
    """(table, why the record cannot be routed or None). The routing value is the field's value as a
    string; for a union of several types, the branch the record holds. A record, array or map
    cannot be routed by: such records become dead letters naming the field."""
    if cfg.route is None:
        return F.lit(cfg.table), None
    name = cfg.route.field
    if name not in rec_type.names:
        warnings.append(f"routing field {name!r} is not in the schema: all its records go to {cfg.route.default!r}")
        return F.lit(cfg.route.default), None
    col, dtype = F.col("_rec").getField(name), rec_type[name].dataType
    avro_type = avro_schemas.field_type(writer, name)
    if isinstance(avro_type, list) and sum(b != "null" for b in avro_type) > 1 and isinstance(dtype, StructType):
        members = [(col.getField(m.name), m.dataType) for m in dtype.fields]  # Spark's member0, member1, ...
    else:
        members = [(col, dtype)]
    values = [c.cast("string") for c, t in members if _complex_kind(t) is None]
    value = F.coalesce(*values) if values else F.lit(None).cast("string")
    pairs = [F.lit(x) for kv in sorted(cfg.route.tables.items()) for x in kv]
    table = F.coalesce(F.create_map(*pairs)[value], F.lit(cfg.route.default))
    why = [F.when(c.isNotNull(), F.lit(f"routing field {name!r} is {_complex_kind(t)}, not a value to route by"))
           for c, t in members if _complex_kind(t)]
    return table, (F.coalesce(*why) if why else None)


def event_hour_column(cfg: TopicConfig, rec_type: StructType, plan: SlicePlan, schema_id: int,
                      warnings: list[str]) -> tuple[F.Column | None, F.Column | None]:
    """(event hour tag, why the record has none or None). An event time before year 1 or after
    9999 (or a long too large for epoch milliseconds) names no hour a file can carry: such a
    record is a dead letter naming the field, never a failed hour."""
    if not cfg.event_time_field:
        return None, None
    name = cfg.event_time_field
    if name not in rec_type.names:
        warnings.append(f"event time field {name!r} is not in the schema: files are not split by event hour")
        return F.lit(None).cast("string"), None
    raw, dtype = F.col("_rec").getField(name), rec_type[name].dataType
    if isinstance(dtype, LongType):  # epoch milliseconds
        ok = raw.between(EPOCH_MS_YEAR_1, EPOCH_MS_YEAR_10000 - 1)
        ts = F.timestamp_millis(F.when(ok, raw))  # never overflows: only in-range values reach it
    elif isinstance(dtype, TimestampType):
        ok = F.unix_micros(raw).between(EPOCH_MS_YEAR_1 * 1000, EPOCH_MS_YEAR_10000 * 1000 - 1)
        ts = raw
    elif isinstance(dtype, TimestampNTZType):
        ok = raw.between(F.lit("0001-01-01 00:00:00").cast("timestamp_ntz"),
                         F.lit("9999-12-31 23:59:59.999999").cast("timestamp_ntz"))
        ts = raw
    else:
        raise LandingError(
            f"{plan.topic} {plan.hour}: event time field {name!r} of schema id {schema_id} has type "
            f"{dtype.simpleString()}, not a timestamp or a long of epoch milliseconds. Nothing of this hour was "
            "published: point event_time_field of the topic config at a timestamp field, or remove it."
        )
    hour = F.date_format(F.date_trunc("hour", F.when(ok, ts)), "yyyy-MM-dd'T'HH")
    why = F.when(raw.isNotNull() & ~ok, F.lit(f"event time field {name!r} is out of range (before year 1 or after 9999)"))
    return hour, why


def _utf8_leaf(col: F.Column, dtype) -> F.Column | None:
    return ~F.is_valid_utf8(col) if isinstance(dtype, StringType) else None


def _time_leaf(col: F.Column, dtype) -> F.Column | None:
    if isinstance(dtype, TimestampType):
        return ~F.unix_micros(col).between(EPOCH_MS_YEAR_1 * 1000, EPOCH_MS_YEAR_10000 * 1000 - 1)
    if isinstance(dtype, TimestampNTZType):
        return ~col.between(F.lit("0001-01-01 00:00:00").cast("timestamp_ntz"),
                            F.lit("9999-12-31 23:59:59.999999").cast("timestamp_ntz"))
    if isinstance(dtype, DateType):
        return ~col.between(F.lit("0001-01-01").cast("date"), F.lit("9999-12-31").cast("date"))
    return None


def _anywhere(col: F.Column, dtype, leaf) -> F.Column | None:
    """True (never null) when `leaf` holds for a value anywhere inside `col` (records, arrays, map
    keys and values, in the JVM); None when the type holds nothing `leaf` applies to."""
    no = F.lit(False)

    def in_array(array: F.Column, element_type) -> F.Column | None:
        if _anywhere(F.lit(None), element_type, leaf) is None:  # nothing to check inside
            return None
        return F.coalesce(F.exists(array, lambda x: _anywhere(x, element_type, leaf)), no)

    if isinstance(dtype, StructType):
        parts = [_anywhere(col.getField(f.name), f.dataType, leaf) for f in dtype.fields]
    elif isinstance(dtype, ArrayType):
        parts = [in_array(col, dtype.elementType)]
    elif isinstance(dtype, MapType):
        parts = [in_array(F.map_keys(col), dtype.keyType), in_array(F.map_values(col), dtype.valueType)]
    else:
        found = leaf(col, dtype)
        parts = [None if found is None else F.coalesce(found, no)]
    parts = [p for p in parts if p is not None]
    return reduce(operator.or_, parts) if parts else None


# Values Spark decodes and writes but readers of the files refuse (BigQuery takes dates and
# times within years 1-9999 and UTF-8 strings only, fastavro likewise): one such value would fail
# the load of a whole hour, so it is a dead letter instead.
VALUE_CHECKS = (
    (_utf8_leaf, "holds a string that is not valid UTF-8"),
    (_time_leaf, "holds a date or time out of range (before year 1 or after 9999)"),
)


def classify(decoded: DataFrame, cfg: TopicConfig, plan: SlicePlan, schema_id: int, writer: dict,
             warnings: list[str]) -> DataFrame:
    """Decoded records with their table (`_kl_table`), event hour (`_kl_ehour`, if the topic splits by
    one) and `_reason`, null for a record that lands and otherwise why not, naming the field."""
    rec_type = decoded.schema["_rec"].dataType
    table, route_why = route_column(cfg, writer, rec_type, warnings)
    ehour, ehour_why = event_hour_column(cfg, rec_type, plan, schema_id, warnings)
    out = decoded.withColumn("_kl_table", table)
    if ehour is not None:
        out = out.withColumn("_kl_ehour", ehour)
    value_why = [F.when(bad, F.lit(f"field {f.name!r} {what}"))
                 for f in rec_type.fields if f.name != avro_schemas.OK_MARKER
                 for leaf, what in VALUE_CHECKS
                 if (bad := _anywhere(F.col("_rec").getField(f.name), f.dataType, leaf)) is not None]
    why = [c for c in (ehour_why, *value_why, route_why) if c is not None]
    if why:
        out = out.withColumn("_reason", F.coalesce(F.col("_reason"), *why))
    return out


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


# What a dead letter keeps of a record, whichever step turned it away.
DEAD_LETTER_COLUMNS = [*avro_schemas.META_COLUMNS, "_value", "_schema_id", "_reason", "_kl_task"]


def keep_decoded(classified: DataFrame) -> DataFrame:
    """classify()'s records decoded once and kept (memory, then disk) for both the landing files
    and the dead letters: the record for those that land, the raw value for those that do not.
    Without it, a filter on `_reason` is pushed below the decode and every record decodes twice."""
    lands = F.col("_reason").isNull()
    keys = ["_kl_table"] + (["_kl_ehour"] if "_kl_ehour" in classified.columns else [])
    return classified.select(
        *avro_schemas.META_COLUMNS, "_kl_task", *keys, "_schema_id", "_reason",
        F.when(lands, F.col("_rec")).alias("_rec"), F.when(~lands, F.col("_value")).alias("_value"),
    ).persist(StorageLevel.MEMORY_AND_DISK)


def write_good(kept: DataFrame, cfg: TopicConfig, plan: SlicePlan, schema_id: int, writer: dict,
               staging: Path) -> list[_Staged]:
    """The records of keep_decoded() with no reason, as Avro files per (task, table, partition[, event hour])."""
    fields = avro_schemas.field_names(writer)
    split = "_kl_ehour" in kept.columns
    good = kept.where(F.col("_reason").isNull()).select(
        *[F.col("_rec").getField(n).alias(n) for n in fields],
        *[F.col(c) for c in avro_schemas.META_COLUMNS],
        F.col("_kl_task"),
        F.col("_kl_table"),
        F.col("_kafka_partition").alias("_kl_part"),
        *([F.col("_kl_ehour")] if split else []),
    )
    keys = ["_kl_task", "_kl_table", "_kl_part"] + (["_kl_ehour"] if split else [])
    stats = _stats(good, keys)
    if not stats:
        return []
    out = staging / f"schema_id={schema_id}"
    (good.write.partitionBy(*keys).format("avro")
     .option("avroSchema", json.dumps(avro_schemas.landing_schema(writer)))
     .mode("error").save(str(out)))
    staged = []
    for (task, table, part, eh), src in _group_dirs(out).items():
        s = stats[(task, table, part, eh) if split else (task, table, part)]
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
    store.write_json_atomic(f"{rejected}/_MANIFEST.json", {
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
        store.write_json_atomic(dead_letter_manifest_path(plan.topic, hour),
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
            mark_pending(store, done_file_path(cfg.dataset, table, hour), store.read_bytes(done_file_path(cfg.dataset, table, hour)))
            crash_point("landing:done_written")
        crash_point("landing:published")
        # Only now that every new done file is in place: remove what none of them lists.
        for table, d in done.items():
            _remove_unlisted(store, table_hour_dir(cfg.dataset, table, hour), {f.path for f in d.files})
        _remove_unlisted(store, dead_letter_dir(plan.topic, hour), {f.path for f in dl.files})
    return done


# --- the whole hour --------------------------------------------------------------

def land_hour(
    spark_factory: Callable[[], SparkSession], store: LandingStore, fetch_schema: Callable[[int], object],
    kafka_options: dict, cfg: TopicConfig, plan: SlicePlan, attempt: str,
) -> LandingResult:
    """Land one frozen slice. `fetch_schema(id)` returns the writer schema JSON, or a
    `DeadSchema` (unknown id, another schema type) whose records become dead letters;
    a registry that cannot answer raises, failing the hour before anything is written."""
    t0 = time.monotonic()
    warnings: list[str] = []
    # Attempts killed (SIGKILL, OOM, a lost machine) leave their staging behind: swept after a day,
    # long after any live attempt of the topic has finished with its own.
    store.sweep(f"staging/{plan.topic}", "hour=*/*", STAGING_MAX_AGE_SECONDS)
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
                # Every schema id first: a registry that cannot answer, or a writer schema that
                # cannot land, fails the hour before anything is decoded or written.
                writers, dead_ids = resolve_schemas(fetch_schema, ids, plan)
                # Spark's own checks of each schema (and of its event time field) too, before any write.
                classified = {sid: classify(decode_checked(framed, sid, writer, plan), cfg, plan, sid, writer, warnings)
                              for sid, writer in writers.items()}
                kept = {}
                try:
                    bad_parts = []
                    for sid, c in classified.items():
                        kept[sid] = keep_decoded(c)
                        good += write_good(kept[sid], cfg, plan, sid, writers[sid], staging)
                        # The same predicate as write_good's, negated: each record lands or is a dead letter.
                        bad_parts.append(kept[sid].where(F.col("_reason").isNotNull()).select(*DEAD_LETTER_COLUMNS))
                    # Most hours have no dead letters: then skip their Spark jobs altogether.
                    if sum(s.file.rows for s in good) < records_read:
                        pre = framed.where(F.col("_reason").isNotNull()
                                           | F.col("_schema_id").isin(sorted(dead_ids) or [-1]))
                        if dead_ids:  # unknown ids, and ids of other schema types, each with its own reason
                            why = F.create_map(*[F.lit(x).cast("long") if isinstance(x, int) else F.lit(x)
                                                 for kv in sorted(dead_ids.items()) for x in kv])
                            pre = pre.withColumn("_reason", F.coalesce(F.col("_reason"), why[F.col("_schema_id")]))
                        dead_df = pre.select(*DEAD_LETTER_COLUMNS)
                        for part in bad_parts:
                            dead_df = dead_df.unionByName(part)
                        dead, by_reason = write_dead_letters(dead_df, plan, staging)
                finally:
                    for k in kept.values():
                        k.unpersist()
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
            kept_under = keep_rejected_dead_letters(store, plan, dead, dl, attempt)
            raise DeadLetterLimitExceeded(
                f"{plan.topic} {plan.hour}: {dead_rows} of {records_read} records are dead letters "
                f"({dead_rows / records_read:.1%} > limit {cfg.dead_letter_limit:.1%}): {dl.by_reason}. "
                f"They are kept under {kept_under}. Nothing of this attempt was published: the hour's previous "
                "done files, if any, are untouched. Fix the producer or the registry, or raise the topic's "
                "dead_letter_limit, then re-land the hour."
            )
        done = publish(store, cfg, plan, good, dead, dl, records_read, attempt)
    finally:
        store.delete(staging_rel)
    return LandingResult(done=done, dead_letters=dl, records_read=records_read,
                         seconds=time.monotonic() - t0, warnings=warnings)
