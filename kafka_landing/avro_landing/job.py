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

import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafka_landing.config import TopicConfig
from kafka_landing.crash_points import crash_point
from kafka_landing.kafka_slices.plan import SlicePlan
from kafka_landing.manifests import DeadLetters, DoneFile
from kafka_landing.store.base import LandingStore

NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"
from kafka_landing.avro_landing.decode import (
    decode_checked,
    frame_columns,
    resolve_schemas,
)
from kafka_landing.avro_landing.publish import keep_rejected_dead_letters, publish
from kafka_landing.avro_landing.read import read_slice
from kafka_landing.avro_landing.route import classify
from kafka_landing.avro_landing.write import (
    DEAD_LETTER_COLUMNS,
    STAGING_MAX_AGE_SECONDS,
    Staged,
    keep_decoded,
    write_dead_letters,
    write_good,
)
from kafka_landing.errors import DeadLetterLimitExceeded, LandingError


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
    good: list[Staged] = []
    dead: list[Staged] = []
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
                        good += write_good(kept[sid], cfg, plan, sid, writers[sid], store, staging_rel)
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
                        dead, by_reason = write_dead_letters(dead_df, plan, store, staging_rel)
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
