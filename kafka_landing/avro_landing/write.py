"""WRITE: Avro files per (task, table, Kafka partition[, event hour]) into the attempt's private
staging folder under the landing root, and the hour's dead letters beside them. Nothing
written here is visible: only `publish` makes files part of an hour."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kafka_landing.avro_landing import avro_schemas
from kafka_landing.config import TopicConfig
from kafka_landing.kafka_slices.plan import SlicePlan
from kafka_landing.manifests import LandedFile
from kafka_landing.naming import (
    dead_letter_dir,
    dead_letter_file_name,
    hour_from_tag,
    landing_file_name,
    table_hour_dir,
)

NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"

# Staging of attempts killed before they could clean up is swept after this long.
STAGING_MAX_AGE_SECONDS = 24 * 3600
from kafka_landing.errors import LandingError
from kafka_landing.store.base import LandingStore

NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"


def _group_files(store: LandingStore, rel_dir: str) -> dict[tuple, str]:
    """{(task, table, partition, event hour): file} of Spark's partitioned output under `rel_dir`."""
    out = {}
    for rel in store.walk(rel_dir, ".avro"):
        keys = dict(re.findall(r"(_kl_\w+)=([^/]+)", rel[len(rel_dir):]))
        k = (int(keys["_kl_task"]) if "_kl_task" in keys else None, keys.get("_kl_table"), int(keys["_kl_part"]),
             None if keys.get("_kl_ehour") in (None, NO_EVENT_HOUR) else keys["_kl_ehour"])
        if k in out:
            raise LandingError(f"Spark wrote two files for one group {k} under {store.location(rel_dir)}; "
                               "expected one per task")
        out[k] = rel
    return out


def _stats(df: DataFrame, keys: list[str], extra: list[F.Column] = ()) -> dict[tuple, dict]:
    rows = df.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("rows"), F.min("_kafka_offset").alias("first"), F.max("_kafka_offset").alias("last"), *extra
    ).collect()
    return {tuple(r[k] for k in keys): r.asDict() for r in rows}


@dataclass
class Staged:
    src: str  # where Spark wrote it, under the attempt's staging folder
    rel: str  # its final path; both relative to the landing root
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
               store: LandingStore, staging: str) -> list[Staged]:
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
    out = f"{staging}/schema_id={schema_id}"
    (good.write.partitionBy(*keys).format("avro")
     .option("avroSchema", json.dumps(avro_schemas.landing_schema(writer)))
     .mode("error").save(store.location(out)))
    staged = []
    for (task, table, part, eh), src in _group_files(store, out).items():
        s = stats[(task, table, part, eh) if split else (task, table, part)]
        name = landing_file_name(plan.topic, part, cfg.dataset, table, schema_id, s["first"], s["last"],
                                 hour_from_tag(eh) if eh else None)
        rel = f"{table_hour_dir(cfg.dataset, table, hour_from_tag(plan.hour))}/{name}"
        staged.append(Staged(src, rel, LandedFile(rel, s["rows"], store.size(src), part, s["first"], s["last"],
                                                   schema_id, eh), table))
    if sum(s.file.rows for s in staged) != sum(s["rows"] for s in stats.values()):
        raise LandingError("the files Spark wrote do not hold the rows counted; nothing was published")
    return staged


def write_dead_letters(dead: DataFrame, plan: SlicePlan, store: LandingStore, staging: str) -> tuple[list[Staged], dict[str, int]]:
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
        out = f"{staging}/dead_letters"
        # Few rows, from several decode passes: one file per Kafka partition.
        (dead.drop("_kafka_offset", "_kl_task").repartition("_kl_part").write.partitionBy("_kl_part").format("avro")
         .option("avroSchema", json.dumps(avro_schemas.DEAD_LETTER_SCHEMA)).mode("error").save(store.location(out)))
    finally:
        dead.unpersist()
    staged = []
    for (_task, _t, part, _e), src in _group_files(store, out).items():
        s = stats[(part,)]
        rel = f"{dead_letter_dir(plan.topic, hour_from_tag(plan.hour))}/{dead_letter_file_name(plan.topic, part, s['first'], s['last'])}"
        staged.append(Staged(src, rel, LandedFile(rel, s["rows"], store.size(src), part, s["first"], s["last"])))
    return staged, by_reason
