"""Landing a run of hours of one topic (one hour is a run of one), in the order the data flows:

    read    every hour's frozen offsets in one Spark job, each record tagged with its hour and
            frozen task by its offset
    decode  the Confluent framing and the Avro body, in the JVM (from_avro per schema id)
    route   each record to its table
    write   Avro files per (hour, task, table, Kafka partition[, event hour]) into a private
            staging folder: one Spark job per schema id for all the hours, dead letters in one
            more job only when there are any
    publish per hour: move its files into place, dead letters first, then one done file per
            table, last

Nothing is visible until it is complete: staged files are never listed, and a done file names
only files already in place. An hour's files do not depend on which hours were landed with it:
landing a range or its hours one by one gives the same files, rows and done files. Re-landing an
hour writes files of the same names and content (the slice and its tasks are frozen), then
replaces the done file and removes what it no longer lists.

Each hour ends on its own: a LandingResult, or a LandingError naming the hour (a schema that
cannot land, the dead-letter limit, broken conservation) while the other hours publish. What
concerns every hour (the registry unreachable, Spark failing) raises.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from kafka_landing.avro_landing.decode import (
    decode_checked,
    frame_columns,
    resolve_schemas,
)
from kafka_landing.avro_landing.publish import keep_rejected_dead_letters, publish
from kafka_landing.avro_landing.read import read_hours
from kafka_landing.avro_landing.registry_answers import RegistryError
from kafka_landing.avro_landing.route import classify
from kafka_landing.avro_landing.write import (
    DEAD_LETTER_COLUMNS,
    NothingWritten,
    Staged,
    write_dead_letters,
    write_good,
)
from kafka_landing.config import TopicConfig
from kafka_landing.crash_points import crash_point
from kafka_landing.errors import DeadLetterLimitExceeded, LandingError, is_transient
from kafka_landing.kafka_slices.plan import SlicePlan, hour_tasks
from kafka_landing.manifests import DeadLetters, DoneFile
from kafka_landing.store.base import STAGING_MAX_AGE_SECONDS


@dataclass
class LandingResult:
    done: dict[str, DoneFile]  # table -> done file
    dead_letters: DeadLetters
    records_read: int
    seconds: float  # of the whole run of hours, up to this hour's publication
    warnings: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(d.rows for d in self.done.values())

    @property
    def bytes_written(self) -> int:
        files = [f for d in self.done.values() for f in d.files] + list(self.dead_letters.files)
        return sum(f.bytes for f in files)


def _hours_label(topic: str, hours) -> str:
    """`topic hour`, or `topic hours a, b, c` (the first five and how many more) for messages."""
    hours = sorted(hours)
    if len(hours) == 1:
        return f"{topic} {hours[0]}"
    more = f" and {len(hours) - 5} more" if len(hours) > 5 else ""
    return f"{topic} hours {', '.join(hours[:5])}{more}"


def _registry_failed(exc: LandingError) -> bool:
    """The registry did not say what a schema id is: that concerns every hour of the run."""
    return isinstance(exc.__cause__, RegistryError)


@dataclass
class _Pass:
    """What the Spark jobs of a run learnt about the records, counted as they streamed by."""

    read_by_hour: dict[str, int] = field(default_factory=dict)
    unclaimed: int = 0
    bad_framing: int = 0
    ids_by_hour: dict[int, set[str]] = field(default_factory=dict)  # decodable schema id -> hours holding it
    dead_by_id: dict[int, int] = field(default_factory=dict)  # schema id -> records turned away after decoding


def _observed(framed: DataFrame, hours: list[str]) -> tuple[DataFrame, Observation]:
    # `hours`: those of the tasks, sorted, as read_hours numbers them in `_kl_hour_ix`
    """`framed`, counting every record once as the first job streams it: per hour, unclaimed by
    any frozen task (there must be none), bad framing, and which schema ids each hour holds.
    Integers only, per record: these run once for every record of the run."""
    obs = Observation("read")
    ix = F.col("_kl_hour_ix")
    return framed.observe(
        obs,
        *[F.count_if(ix == F.lit(n)).alias(f"h{n}") for n in range(len(hours))],
        F.count_if(ix.isNull()).alias("unclaimed"),
        F.count_if(F.col("_reason").isNotNull()).alias("bad_framing"),
        # (schema id, hour) packed in one long; a string because py4j hands an observed array
        # back as an opaque Java object.
        F.concat_ws(",", F.collect_set(F.when(F.col("_reason").isNull(), F.col("_schema_id") * _PACK + ix))
                    .cast("array<string>")).alias("ids"),
    ), obs


_PACK = 1 << 20  # more hours than a run can hold


def _take(obs: Observation, hours: list[str], into: _Pass) -> None:
    got = obs.get
    into.read_by_hour.update({h: int(got[f"h{n}"]) for n, h in enumerate(hours)})
    into.unclaimed, into.bad_framing = int(got["unclaimed"]), int(got["bad_framing"])
    for item in filter(None, (got["ids"] or "").split(",")):
        sid, ix = divmod(int(item), _PACK)
        into.ids_by_hour.setdefault(sid, set()).add(hours[ix])


def land_hours(
    spark_factory: Callable[[], SparkSession], store, fetch_schema: Callable[[int], object],
    kafka_options: dict, cfg: TopicConfig, plans: list[SlicePlan], attempt: str,
    likely_ids: tuple[int, ...] = (), log: Callable[[str], None] = lambda _m: None,
) -> dict[str, LandingResult | LandingError]:
    """Land frozen slices of consecutive (or any) hours of one topic; {hour tag: result or error}.

    `fetch_schema(id)` returns the writer schema JSON, or a `DeadSchema` (unknown id, another
    schema type) whose records become dead letters; a registry that cannot answer raises,
    failing every hour before anything is published. `likely_ids` are schema ids the records
    probably carry (the registry's latest for the topic, the previous hour's): the first job
    decodes them while it counts what the hours really hold, so a run whose guess is right
    reads Kafka once per schema id and never just to look."""
    t0 = time.monotonic()
    plans = sorted(plans, key=lambda p: p.hour)
    hours = [p.hour for p in plans]
    # Attempts killed (SIGKILL, OOM, a lost machine) leave their staging behind: swept after a day,
    # long after any live attempt of the topic has finished with its own.
    store.sweep(f"staging/{cfg.topic}", "hour=*/*", STAGING_MAX_AGE_SECONDS)
    staging = f"staging/{cfg.topic}/hour={hours[0]}/{attempt}"
    warnings: list[str] = []
    seen = _Pass(read_by_hour={h: 0 for h in hours})
    failed: dict[str, LandingError] = {}
    good: list[Staged] = []
    dead: list[Staged] = []
    by_reason: dict[str, dict[str, int]] = {}
    try:
        tasks = hour_tasks(plans)
        if tasks:
            spark = spark_factory()
            log(f"{cfg.topic}: reading {sum(t.end - t.start for t in tasks)} offsets of {len(hours)} hour(s) "
                f"in {len(tasks)} frozen task(s)")
            framed = frame_columns(read_hours(spark, kafka_options, cfg.topic, tasks))
            writers: dict[int, dict] = {}
            task_hours = sorted({t.hour for t in tasks})
            counted, obs = _observed(framed, task_hours)
            guess = _first_landable(fetch_schema, likely_ids, counted, cfg, hours, warnings)
            if guess is not None:  # the first job lands the likely schema id's records and counts everything
                sid, writer, classified = guess
                try:
                    good += _write(classified, cfg, sid, writer, store, staging, seen, log)
                    writers[sid] = writer
                except NothingWritten:  # a wrong guess, on a bucket: that job counted nothing usable
                    seen.dead_by_id.pop(sid, None)
                    guess = None
                    counted, obs = _observed(framed, task_hours)
            if guess is None:  # no usable guess: one job that only counts
                log(f"{cfg.topic}: no likely schema id in the records; counting the schema ids first")
                counted.write.format("noop").mode("overwrite").save()  # runs the plan in the JVM, writes nothing
            _take(obs, task_hours, seen)
            if seen.unclaimed:
                raise LandingError(f"{_hours_label(cfg.topic, hours)}: {seen.unclaimed} records read from Kafka "
                                   "belong to no frozen task of these hours; nothing was published")
            # The schema ids the records really hold and no job decoded yet: settled now, before any publication.
            rest = sorted(set(seen.ids_by_hour) - set(writers))
            more, dead_ids = {}, {}
            for sid in rest:
                where = _hours_label(cfg.topic, seen.ids_by_hour[sid])
                try:
                    w, d = resolve_schemas(fetch_schema, [sid], where)
                    for s, writer in w.items():
                        decode_checked(framed, s, writer, where)
                except LandingError as exc:
                    if _registry_failed(exc):
                        raise
                    for h in seen.ids_by_hour[sid]:
                        failed.setdefault(h, exc)
                    continue
                more.update(w)
                dead_ids.update(d)
            for sid, writer in more.items():
                where = _hours_label(cfg.topic, seen.ids_by_hour[sid])
                try:
                    classified = classify(decode_checked(framed, sid, writer, where), cfg, where, sid, writer, warnings)
                except LandingError as exc:  # the event time field's type: this schema's hours cannot land
                    for h in seen.ids_by_hour[sid]:
                        failed.setdefault(h, exc)
                    continue
                writers[sid] = writer
                try:
                    good += _write(classified, cfg, sid, writer, store, staging, seen, log)
                except NothingWritten:
                    pass  # every record of the id was turned away: all are dead letters
            writers = {s: w for s, w in writers.items() if s in seen.ids_by_hour}
            if seen.bad_framing or dead_ids or any(seen.dead_by_id.values()):
                log(f"{cfg.topic}: writing dead letters")
                dead, by_reason = write_dead_letters(
                    _dead_letters(framed, cfg, writers, seen, dead_ids, warnings), cfg.topic, store, staging)
        crash_point("landing:staged")
        return _publish_each(store, cfg, plans, good, dead, by_reason, seen, failed, attempt, t0, warnings)
    finally:
        try:
            store.delete(staging)
        except Exception as exc:  # noqa: BLE001 - the hours are published or failed already; debris is swept
            log(f"{cfg.topic}: could not remove the staging folder {staging} ({type(exc).__name__}: {exc}); "
                "it is swept after a day by the next landing of the topic")


def _first_landable(fetch_schema: Callable[[int], object], likely_ids: tuple[int, ...], counted: DataFrame,
                    cfg: TopicConfig, hours: list[str], warnings: list[str]) -> tuple[int, dict, DataFrame] | None:
    """The first likely schema id that can be decoded, with its classified records; None if none can.
    Only a guess: an id that cannot land is settled later, for the hours that really hold it."""
    for sid in likely_ids:
        try:
            writers, _ = resolve_schemas(fetch_schema, [sid], _hours_label(cfg.topic, hours))
            if sid in writers:
                return sid, writers[sid], classify(decode_checked(counted, sid, writers[sid], cfg.topic), cfg,
                                                   _hours_label(cfg.topic, hours), sid, writers[sid], warnings)
        except LandingError as exc:
            if _registry_failed(exc):
                raise  # every hour fails, before anything was written
    return None


def _write(classified: DataFrame, cfg: TopicConfig, sid: int, writer: dict, store, staging: str, seen: _Pass,
           log: Callable[[str], None]) -> list[Staged]:
    """write_good, counting the records it turns away. NothingWritten (no record on a bucket,
    where the job then fails and its counts never arrive) is raised after noting that every
    record of the id, if it has any, is a dead letter."""
    obs = Observation(f"dead-{sid}")
    counted = classified.observe(obs, F.count_if(F.col("_reason").isNotNull()).alias("dead"))
    log(f"{cfg.topic}: writing the records of schema id {sid}")
    try:
        staged = write_good(counted, cfg, sid, writer, store, staging)
    except NothingWritten:
        seen.dead_by_id[sid] = 1  # not a count: "some, perhaps", so the dead letters are written
        raise
    seen.dead_by_id[sid] = int(obs.get["dead"])
    return staged


def _dead_letters(framed: DataFrame, cfg: TopicConfig, writers: dict[int, dict], seen: _Pass,
                  dead_ids: dict[int, str], warnings: list[str]) -> DataFrame:
    """Every record that does not land, with its reason: bad framing, schema ids that cannot be
    decoded (each with its own reason), and what decoding or routing turned away."""
    pre = framed.where(F.col("_reason").isNotNull() | F.col("_schema_id").isin(sorted(dead_ids) or [-1]))
    if dead_ids:
        why = F.create_map(*[F.lit(x).cast("long") if isinstance(x, int) else F.lit(x)
                             for kv in sorted(dead_ids.items()) for x in kv])
        pre = pre.withColumn("_reason", F.coalesce(F.col("_reason"), why[F.col("_schema_id")]))
    out = pre.select(*DEAD_LETTER_COLUMNS)
    for sid, writer in sorted(writers.items()):
        if seen.dead_by_id.get(sid):
            # The same predicate as write_good's, negated: each record lands or is a dead letter.
            classified = classify(decode_checked(framed, sid, writer, cfg.topic), cfg, cfg.topic, sid, writer, [])
            out = out.unionByName(classified.where(F.col("_reason").isNotNull()).select(*DEAD_LETTER_COLUMNS))
    return out


def _publish_each(store, cfg: TopicConfig, plans: list[SlicePlan], good: list[Staged], dead: list[Staged],
                  by_reason: dict[str, dict[str, int]], seen: _Pass, failed: dict[str, LandingError], attempt: str,
                  t0: float, warnings: list[str]) -> dict[str, LandingResult | LandingError]:
    out: dict[str, LandingResult | LandingError] = {}
    for plan in plans:
        h = plan.hour
        if h in failed:
            out[h] = failed[h]
            continue
        mine = [s for s in good if s.hour == h]
        mine_dead = [s for s in dead if s.hour == h]
        reasons = by_reason.get(h, {})
        landed, dead_rows, read = sum(s.file.rows for s in mine), sum(reasons.values()), seen.read_by_hour[h]
        try:
            if sum(s.file.rows for s in mine_dead) != dead_rows:
                raise LandingError(f"{cfg.topic} {h}: the dead-letter files hold {sum(s.file.rows for s in mine_dead)}"
                                   f" rows, their reasons add up to {dead_rows}; nothing of the hour was published")
            if read > plan.records:
                raise LandingError(f"{cfg.topic} {h}: read {read} records from a slice of {plan.records} offsets; "
                                   "nothing of the hour was published")
            if landed + dead_rows != read:
                raise LandingError(f"{cfg.topic} {h}: conservation broken: read {read}, landed {landed} + dead "
                                   f"letters {dead_rows}; nothing of the hour was published")
            dl = DeadLetters(rows=dead_rows, by_reason=dict(sorted(reasons.items())),
                             files=tuple(sorted((s.file for s in mine_dead), key=lambda f: f.path)))
            if read and dead_rows / read > cfg.dead_letter_limit:
                kept_under = keep_rejected_dead_letters(store, plan, mine_dead, dl, attempt)
                raise DeadLetterLimitExceeded(
                    f"{plan.topic} {plan.hour}: {dead_rows} of {read} records are dead letters "
                    f"({dead_rows / read:.1%} > limit {cfg.dead_letter_limit:.1%}): {dl.by_reason}. "
                    f"They are kept under {kept_under}. Nothing of this attempt was published: the hour's previous "
                    "done files, if any, are untouched. Fix the producer or the registry, or raise the topic's "
                    "dead_letter_limit, then re-land the hour."
                )
        except LandingError as exc:
            out[h] = exc
            continue
        try:
            done = publish(store, cfg, plan, mine, mine_dead, dl, read, attempt)
        except Exception as exc:  # noqa: BLE001 - the hours published before this one stay published
            out[h] = LandingError(
                f"{cfg.topic} {h}: publishing the hour failed ({type(exc).__name__}: {exc}). Its done files are "
                "the previous complete hour's or this attempt's, never a mix; land the hour again.",
                transient=is_transient(exc))
            continue
        out[h] = LandingResult(done=done, dead_letters=dl, records_read=read, seconds=time.monotonic() - t0,
                               warnings=list(warnings))
    return out


def land_hour(
    spark_factory: Callable[[], SparkSession], store, fetch_schema: Callable[[int], object],
    kafka_options: dict, cfg: TopicConfig, plan: SlicePlan, attempt: str, likely_ids: tuple[int, ...] = (),
) -> LandingResult:
    """One hour: `land_hours` of one plan, its LandingError raised."""
    result = land_hours(spark_factory, store, fetch_schema, kafka_options, cfg, [plan], attempt, likely_ids)[plan.hour]
    if isinstance(result, LandingError):
        raise result
    return result
