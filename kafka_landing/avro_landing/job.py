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

An hour Kafka no longer holds lands the same way from its archive (`HoursToLand.archives`,
archive.py): only the read differs, and the hour's records read must be the archive's.

The likely schema id's records usually skip the rows: read, check and write happen in one JVM
operator per Spark task (`land_directly`, direct.py), which counts what the first job would have
counted; what it is not sure of goes the way above.

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

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from kafka_landing.avro_landing.decode import (
    decode_checked,
    frame_columns,
    resolve_schemas,
    Vouch,
)
from kafka_landing.avro_landing import engine_losses
from kafka_landing.avro_landing.archive import ArchiveError, ArchiveHour
from kafka_landing.avro_landing.contract import ARCHIVE_FORMAT, DIRECT_FORMAT, MAX_EVENT_FILES, OPTION_SEGMENTS
from kafka_landing.avro_landing.direct import land_directly
from kafka_landing.avro_landing.publish import StagedHour, keep_rejected_dead_letters, publish
from kafka_landing.avro_landing.read import archive_segments, read_archive, read_hours
from kafka_landing.avro_landing.registry_answers import RegistryError
from kafka_landing.avro_landing.route import classify
from kafka_landing.avro_landing.write import (
    DEAD_LETTER_COLUMNS,
    NothingWritten,
    SPLICE_JAR,
    Staged,
    staged_files,
    write_dead_letters,
    write_good,
)
from kafka_landing.config import TopicConfig
from kafka_landing.crash_points import crash_point
from kafka_landing.errors import DeadLetterLimitExceeded, LandingError, is_transient, spark_server_gone
from kafka_landing.kafka_slices.plan import SlicePlan, hour_tasks
from kafka_landing.handoff.manifests import DeadLetters, DoneFile
from kafka_landing.naming import STAGING_GLOB, staging_dir, staging_path
from kafka_landing.store.base import STAGING_MAX_AGE_SECONDS, LandingStore
from kafka_landing.spark_setup import default_parallelism, drop_if_server_gone, local_copy


@dataclass
class LandingResult:
    done: dict[str, DoneFile]  # table -> done file
    dead_letters: DeadLetters
    records_read: int
    seconds: float  # of the whole run of hours, up to this hour's publication
    warnings: list[str] = field(default_factory=list)
    compacted: bool = False  # the topic is compacted: offsets without a record are expected
    offsets_without_record: int = 0  # of the slice landed (less what retention took, if skipped on request)
    gaps_seen: int | None = None  # offsets the reader saw no record for (None: a way that does not look)
    gaps_shown: tuple[tuple[int, int, int], ...] = ()  # the first few: (partition, first offset, offsets)
    archived: ArchiveHour | None = None  # landed from this archive, not from Kafka

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


def _not_direct(got, sid: int) -> str:
    """Why the direct pass of `sid` gave up (`DirectPass.unsure` or `.spread`)."""
    if got.spread:
        return f"some frozen task's records of schema id {sid} hold more than {MAX_EVENT_FILES} event hours"
    return f"the body check is not sure of some record of schema id {sid}"


def _archive_failed(exc: BaseException, topic: str, hours) -> ArchiveError:
    """The archive source's own failure (a file missing, unreadable or listing an offset twice), said
    as it said it, for every hour of the run: the engine does not say which hour the file is of."""
    said = re.search(re.escape(ARCHIVE_FORMAT) + r": (archived file .*?while it holds its offsets)", str(exc), re.S)
    why = said.group(1) if said else f"{type(exc).__name__}: {str(exc)[:2000]}"
    return ArchiveError(f"{_hours_label(topic, hours)}: landing from the archive failed: {why}. Nothing was published; "
                        "land the other hours of the run on their own")


def _archive_options(store: LandingStore, archives: dict[str, ArchiveHour], tasks, spark: SparkSession) -> dict:
    """What the reads of hours landed again from their archive take instead of Kafka's settings."""
    return {OPTION_SEGMENTS: archive_segments(store, list(archives.values()), tasks, default_parallelism(spark))}


def _check_archive_read(topic: str, archive: ArchiveHour | None, read: int) -> None:
    """An hour read from its archive read every record its manifests list, no more."""
    if archive is not None and read != archive.records:
        raise ArchiveError(f"{topic} {archive.plan.hour}: read {read} records from its archive, whose done files and "
                           f"dead-letter manifest list {archive.records}: a listed file holds other records than "
                           "listed. Nothing of the hour was published; the hour's conservation check, as landed, "
                           "names the file")


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
    records_by_id: dict[int, int] = field(default_factory=dict)  # decodable schema id -> records, where counted
    complete: bool = False  # every record counted (after the first job, or counted apart)
    # Offsets the reader saw no record for, per hour, and the first few ranges: the direct way sees them.
    gaps_by_hour: dict[str, int] | None = None
    gaps_shown: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)

    def counted(self, got) -> None:
        """What a direct pass (`DirectPass`) counted of every record of the run's offsets."""
        self.read_by_hour.update(got.read_by_hour)
        self.unclaimed, self.bad_framing, self.ids_by_hour = got.unclaimed, got.bad_framing, got.ids_by_hour
        self.gaps_by_hour, self.gaps_shown = got.gaps_by_hour, got.gaps_shown
        self.complete = True


def _observed(framed: DataFrame, hours: list[str], likely_ids: tuple[int, ...] = ()) -> tuple[DataFrame, Observation]:
    # `hours`: those of the tasks, sorted, as read_hours numbers them in `_kl_hour_ix`
    """`framed`, counting every record once as the first job streams it: per hour, unclaimed by
    any frozen task (there must be none), bad framing, which schema ids each hour holds, and the
    records of each likely id (what its write turned away is those less the rows written).
    Integers only, per record: these run once for every record of the run."""
    obs = Observation(f"read-{uuid.uuid4().hex}")  # a name Spark has not seen: one listener per job
    ix = F.col("_kl_hour_ix")
    return framed.observe(
        obs,
        *[F.count_if(ix == F.lit(n)).alias(f"h{n}") for n in range(len(hours))],
        *[F.count_if(F.col("_reason").isNull() & (F.col("_schema_id") == F.lit(sid))).alias(f"n{sid}")
          for sid in likely_ids],
        F.count_if(ix.isNull()).alias("unclaimed"),
        F.count_if(F.col("_reason").isNotNull()).alias("bad_framing"),
        # (schema id, hour) packed in one long; a string because py4j hands an observed array
        # back as an opaque Java object.
        F.concat_ws(",", F.collect_set(F.when(F.col("_reason").isNull(), F.col("_schema_id") * _PACK + ix))
                    .cast("array<string>")).alias("ids"),
    ), obs


_PACK = 1 << 20  # more hours than a run can hold


def _take(obs: Observation, hours: list[str], likely_ids: tuple[int, ...], into: _Pass) -> bool:
    """The observed counts into `into`; False if they never arrived (see `_count_apart`)."""
    got = obs.get
    if not got:
        return False
    into.read_by_hour.update({h: int(got[f"h{n}"]) for n, h in enumerate(hours)})
    into.unclaimed, into.bad_framing = int(got["unclaimed"]), int(got["bad_framing"])
    for item in filter(None, (got["ids"] or "").split(",")):
        sid, ix = divmod(int(item), _PACK)
        into.ids_by_hour.setdefault(sid, set()).add(hours[ix])
    into.records_by_id.update({sid: int(got[f"n{sid}"]) for sid in likely_ids})
    return True


def _count_apart(framed: DataFrame, hours: list[str], into: _Pass) -> None:
    """What `_observed` counts, plus the records of each schema id, as a query of its own, for
    when the first job's observation never arrived: a query's result always arrives. Not the
    normal path since Spark 4.2 (`integration/test_decode.py` fails if it runs on the warm
    engine); kept because an observation can still be lost: a Spark Connect server before 4.2
    (another `SPARK_REMOTE`) drops one whose plan was analysed before (SPARK-53908, fixed in 4.1)
    or that arrives after 100 ms (SPARK-54279, fixed in 4.2), and even 4.2 reports none when the
    optimiser removes the observed plan (an empty relation under it)."""
    ix = F.col("_kl_hour_ix")
    bad = F.col("_reason").isNotNull()
    for r in framed.groupBy(ix.alias("ix"), bad.alias("bad"), F.when(~bad, F.col("_schema_id")).alias("sid")).count() \
            .collect():
        n = int(r["count"])
        into.bad_framing += n if r["bad"] else 0
        if r["ix"] is None:
            into.unclaimed += n
            continue
        into.read_by_hour[hours[r["ix"]]] += n
        if not r["bad"]:
            into.ids_by_hour.setdefault(r["sid"], set()).add(hours[r["ix"]])
            into.records_by_id[r["sid"]] = into.records_by_id.get(r["sid"], 0) + n


@dataclass(frozen=True)
class Sources:
    """Where a run reads. `spark_factory()`: the Spark session, asked for only when some record is
    to be read; it reads Kafka with `kafka_options`. `fetch_schema(id)`: the writer schema JSON, or
    a `DeadSchema` (unknown id, another schema type) whose records become dead letters; a registry
    that cannot answer raises, failing every hour before anything is published."""

    spark_factory: Callable[[], SparkSession]
    kafka_options: dict
    fetch_schema: Callable[[int], object]


@dataclass(frozen=True)
class HoursToLand:
    """What a run lands: frozen slices of consecutive (or any) hours of one topic, staged under
    `attempt`. `likely_ids` are schema ids the records probably carry (the registry's latest for
    the topic, the previous hour's): the first job decodes them while it counts what the hours
    really hold, so a run whose guess is right reads Kafka once per schema id and never just to
    look. `snapshot`: read Kafka once, before anything else (a compacted topic, whose cleaner may
    remove records between two reads). `archives`: read the hours' archives instead of Kafka, one
    per plan (their `plan`s are `plans`)."""

    cfg: TopicConfig
    plans: list[SlicePlan]
    attempt: str
    likely_ids: tuple[int, ...] = ()
    snapshot: bool = False
    archives: tuple[ArchiveHour, ...] = ()


def land_hours(sources: Sources, store: LandingStore, hours: HoursToLand, log: Callable[[str], None] = lambda _m: None,
               direct: bool = True) -> dict[str, LandingResult | LandingError]:
    """Land a run of hours of one topic; {hour tag: result or error}. `direct`: the likely id's
    records land without rows where they can (see direct.py); False: always the decoding way (the
    tests compare the two)."""
    run = LandingRun(store, hours.cfg, sorted(hours.plans, key=lambda p: p.hour), hours.attempt, sources.fetch_schema,
                     log, snapshot=hours.snapshot, direct=direct,
                     archives={a.plan.hour: a for a in hours.archives})
    return run.land(sources.spark_factory, sources.kafka_options, hours.likely_ids)


@dataclass
class LandingRun:
    """One run of hours of one topic, its steps as methods in the order the data flows:
    `read` -> `decode` (once per schema id) -> `write` -> `write_dead_letters` -> `publish` per
    hour. What the steps learn (counts, writers, staged files, failed hours) is kept here, not
    passed from step to step."""

    store: LandingStore
    cfg: TopicConfig
    plans: list[SlicePlan]  # oldest first
    attempt: str
    fetch_schema: Callable[[int], object]
    log: Callable[[str], None]
    snapshot: bool = False  # every job reads one copy of the records, taken first (see `read`)
    direct: bool = True  # the likely id's records land without rows where they can (direct.py)
    archives: dict[str, ArchiveHour] = field(default_factory=dict)  # hour -> its archive, read instead of Kafka
    started: float = field(default_factory=time.monotonic)
    warnings: list[str] = field(default_factory=list)
    seen: _Pass = field(default_factory=_Pass)
    failed: dict[str, LandingError] = field(default_factory=dict)  # hour -> why it cannot land
    writers: dict[int, dict] = field(default_factory=dict)  # schema id -> writer schema, ids decoded and written
    dead_ids: dict[int, str] = field(default_factory=dict)  # schema id -> why none of its records can land
    good: list[Staged] = field(default_factory=list)
    dead: list[Staged] = field(default_factory=list)
    by_reason: dict[str, dict[str, int]] = field(default_factory=dict)  # hour -> dead-letter reason -> rows
    _decoded: dict[tuple[int, int], DataFrame] = field(default_factory=dict)  # (frame, schema id) -> classified
    _told: set[int] = field(default_factory=set)  # schema ids whose routing warnings are in `warnings`
    _rows_of: dict[int, int] = field(default_factory=dict)  # schema id -> rows written, its dead count not reported
    step: str | None = None  # the schema id whose records a Spark job is writing, or the dead-letter job

    @property
    def vouch(self) -> Vouch:
        """What the body check reads from the bodies it vouches for, which land undecoded (decode.BODY_CHECK)."""
        return Vouch.of(self.cfg)

    @property
    def hours(self) -> list[str]:
        return [p.hour for p in self.plans]

    @property
    def staging(self) -> str:
        return staging_path(self.cfg.topic, self.hours[0], self.attempt)

    def land(self, spark_factory: Callable[[], SparkSession], read_options: dict,
             likely_ids: tuple[int, ...]) -> dict[str, LandingResult | LandingError]:
        # Attempts killed (SIGKILL, OOM, a lost machine) leave their staging behind: swept after a day,
        # long after any live attempt of the topic has finished with its own.
        self.store.sweep(staging_dir(self.cfg.topic), STAGING_GLOB, STAGING_MAX_AGE_SECONDS)
        self.seen.read_by_hour = {h: 0 for h in self.hours}
        self.failed.update(engine_losses.refused(self.store, self.cfg.topic, self.hours))
        try:
            tasks = hour_tasks([p for p in self.plans if p.hour not in self.failed])
            if tasks:
                spark = spark_factory()
                if self.archives:  # the reads take the archive's segments instead of Kafka's settings
                    read_options = _archive_options(self.store, self.archives, tasks, spark)
                try:
                    framed = self.read(spark, read_options, tasks)
                    landed = self.land_directly(spark, read_options, tasks, framed, likely_ids)
                    self.decode_and_write(framed, sorted({t.hour for t in tasks}), likely_ids, counted=landed,
                                          direct=(spark, read_options, tasks) if landed else None)
                    self.write_dead_letters(framed)
                except Exception as exc:
                    if f"{ARCHIVE_FORMAT}: archived file" in str(exc) and not spark_server_gone(exc):
                        raise _archive_failed(exc, self.cfg.topic, self.hours) from None
                    if spark_server_gone(exc) and self.step is not None:
                        hours = sorted(self.seen.ids_by_hour.get(int(self.step), ())) if self.step.isdigit() else []
                        engine_losses.record(self.store, self.cfg.topic, hours or sorted({t.hour for t in tasks}),
                                             self.step)
                    drop_if_server_gone(spark, exc)
                    raise
            crash_point("landing:staged")
            return {plan.hour: self.publish(plan) for plan in self.plans}
        finally:
            _remove_staging(self.store, self.staging, self.cfg.topic, self.log)

    # --- read --------------------------------------------------------------------------------

    def read(self, spark: SparkSession, read_options: dict, tasks) -> DataFrame:
        """Every frozen offset of the hours, framing split off. Nothing runs until a write, and
        each job (a schema id's write, a count, the dead letters) reads Kafka again: the same
        records, as long as nothing removes any from a closed hour. On a compacted topic the
        cleaner may, between two jobs, and the counts of one read would be checked against the
        writes of another: with `snapshot`, one job copies the records to the engine's local disk
        first, and every job reads that copy."""
        how = " from their archive" if self.archives else ", once, into a snapshot (a compacted topic)" if self.snapshot else ""
        self.log(f"{self.cfg.topic}: reading {sum(t.end - t.start for t in tasks)} offsets of {len(self.hours)} "
                 f"hour(s) in {len(tasks)} frozen task(s){how}")
        if self.archives:
            return frame_columns(read_archive(spark, read_options[OPTION_SEGMENTS], tasks))
        framed = frame_columns(read_hours(spark, read_options, self.cfg.topic, tasks))
        return local_copy(framed) if self.snapshot else framed

    # --- decode and route, once per schema id ------------------------------------------------------

    def classified(self, frame: DataFrame, sid: int, writer: dict, where: str) -> DataFrame:
        """`frame`'s records of schema `sid`, decoded and routed (each with a table or a reason),
        built once per frame and id. Raises LandingError if the id's records cannot land."""
        key = (id(frame), sid)  # `framed` lives as long as the run
        if key not in self._decoded:
            told = sid in self._told  # routing warnings once per id, not per frame
            self._told.add(sid)
            decoded = decode_checked(frame, sid, writer, where, self.vouch)
            self._decoded[key] = classify(decoded, self.cfg, where, sid, writer, [] if told else self.warnings)
        return self._decoded[key]

    def decode_and_write(self, framed: DataFrame, task_hours: list[str], likely_ids: tuple[int, ...],
                         counted: bool = False, direct: tuple | None = None) -> None:
        """Count what every hour holds while the first job writes the likely id (unless `land_directly`
        did both); then settle each other id (decodable, dead letters, or its hours fail) and write
        it: the direct way if it took the first (`direct`: its session, options, tasks), one more
        read each, else (or if not sure of a body) the decoding way."""
        if not counted:
            self.count_while_writing_likely(framed, task_hours, likely_ids)
        if self.seen.unclaimed:
            raise LandingError(f"{_hours_label(self.cfg.topic, self.hours)}: {self.seen.unclaimed} records read from "
                               "Kafka belong to no frozen task of these hours; nothing was published")
        settled = {sid: w for sid in sorted(set(self.seen.ids_by_hour) - set(self.writers))
                   if (w := self.settle(framed, sid)) is not None}
        for sid, writer in settled.items():
            self.writers[sid] = writer
            if direct is not None and self._land_directly(*direct, sid, writer, also=True):
                continue
            try:
                self.write(self.classified(framed, sid, writer, self.where(sid)), sid, writer)
            except NothingWritten:
                pass  # every record of the id was turned away: all are dead letters
        self.writers = {s: w for s, w in self.writers.items() if s in self.seen.ids_by_hour}

    def land_directly(self, spark: SparkSession, read_options: dict, tasks, framed: DataFrame,
                      likely_ids: tuple[int, ...]) -> bool:
        """The first likely schema id that can land, landed straight from Kafka with every record
        counted on the way (direct.py): True. False, with nothing of it kept, where that way does
        not apply or is not sure; the decoding way then does what it always did."""
        if not self.direct or self.snapshot:
            return False
        label = _hours_label(self.cfg.topic, self.hours)
        # Built, not run: the routing warnings, and a LandingError if the id cannot land.
        found = self._first_landable(likely_ids, label, lambda sid, writer: self.classified(framed, sid, writer, label))
        return found is not None and self._land_directly(spark, read_options, tasks, *found[:2])

    def _first_landable(self, likely_ids: tuple[int, ...], label: str, build: Callable[[int, dict], DataFrame]):
        """(schema id, writer, build's frame) of the first likely id whose writer schema resolves and
        whose records `build` decodes and routes; None if no id does. Only a guess: an id that cannot
        land is settled later, for the hours that really hold it. The registry away raises."""
        for sid in likely_ids:
            try:
                writers, _ = resolve_schemas(self.fetch_schema, [sid], label)
                if sid in writers:
                    return sid, writers[sid], build(sid, writers[sid])
            except LandingError as exc:
                if _registry_failed(exc):
                    raise  # every hour fails, before anything was written
        return None

    def _land_directly(self, spark: SparkSession, read_options: dict, tasks, sid: int, writer: dict,
                       also: bool = False) -> bool:
        """Into a folder of its own: an attempt still running after its job returned (speculation, a
        zombie executor) writes there only. `also`: an id after the first: its own counts and files."""
        out = f"{self.staging}/direct_schema_id={sid}"
        self.log(f"{self.cfg.topic}: landing schema id {sid} straight from {'the archive' if self.archives else 'Kafka'}")
        self.step = str(sid)
        try:
            got = land_directly(spark, read_options, self.cfg, tasks, sid, writer, self.store.location(out))
        except Exception as exc:  # noqa: BLE001 - only an engine without the operator is let through
            if DIRECT_FORMAT not in str(exc) or "DATA_SOURCE_NOT_FOUND" not in str(exc):
                raise
            self.log(f"{self.cfg.topic}: the Spark engine has no direct landing (an older {SPLICE_JAR}); landing "
                     "the decoding way")
            return False
        if got.unsure or got.spread:
            self.store.delete(out)
            self.log(f"{self.cfg.topic}: {_not_direct(got, sid)}; landing the decoding way")
            return False
        if not also:
            self.seen.counted(got)
        self.seen.records_by_id[sid], self.seen.dead_by_id[sid] = got.records, got.dead
        self.writers[sid] = writer
        self.good += staged_files(self.store, self.cfg, sid, {k: f"{out}/{rel}" for k, rel in got.files.items()})
        return True

    def count_while_writing_likely(self, framed: DataFrame, task_hours: list[str], likely_ids: tuple[int, ...]) -> None:
        """The first job writes the likely schema id's records, observed: the counts ride along.
        Counts that never arrive are counted again, in a query of their own."""
        counted, obs = _observed(framed, task_hours, likely_ids)
        guess = self.write_likely(counted, likely_ids)
        if guess != "written":  # no usable guess: one job that only counts
            if guess == "wrong":  # that job ran and failed: its counts never arrive
                counted, obs = _observed(framed, task_hours, likely_ids)
            self.log(f"{self.cfg.topic}: no likely schema id in the records; counting the schema ids first")
            counted.write.format("noop").mode("overwrite").save()  # runs the plan in the JVM, writes nothing
        if not _take(obs, task_hours, likely_ids, self.seen):
            self.log(f"{self.cfg.topic}: Spark did not report the counts of the first job; counting apart")
            self.seen.read_by_hour = {h: 0 for h in self.hours}
            _count_apart(framed, task_hours, self.seen)
        self.seen.complete = True
        for sid, rows in self._rows_of.items():  # the first write's, whose own count was not reported
            self._dead_unreported(sid, rows)
        self._rows_of.clear()

    def write_likely(self, counted: DataFrame, likely_ids: tuple[int, ...]) -> str:
        """Write the records of the first likely schema id that decodes, in the counting job:
        "written"; "none" if no id decodes (no job ran); "wrong" if the guess wrote nothing (on a
        bucket that job fails: it counted nothing usable either). Only a guess: an id that cannot
        land is settled later, for the hours that really hold it."""
        label = _hours_label(self.cfg.topic, self.hours)

        def build(sid: int, writer: dict) -> DataFrame:
            decoded = decode_checked(counted, sid, writer, self.cfg.topic, self.vouch)
            out = classify(decoded, self.cfg, label, sid, writer, [] if sid in self._told else self.warnings)
            self._told.add(sid)
            return out

        found = self._first_landable(likely_ids, label, build)
        if found is None:
            return "none"
        sid, writer, classified = found
        try:
            self.write(classified, sid, writer)
        except NothingWritten:
            self.seen.dead_by_id.pop(sid, None)
            self._rows_of.pop(sid, None)
            return "wrong"
        self.writers[sid] = writer
        return "written"

    def where(self, sid: int) -> str:
        return _hours_label(self.cfg.topic, self.seen.ids_by_hour[sid])

    def settle(self, framed: DataFrame, sid: int) -> dict | None:
        """The writer schema of `sid` if its records decode and route; None if they are dead
        letters (`dead_ids`) or its hours cannot land (`failed`). The registry away raises."""
        try:
            writers, dead = resolve_schemas(self.fetch_schema, [sid], self.where(sid))
            self.dead_ids.update(dead)
            if sid in writers:
                self.classified(framed, sid, writers[sid], self.where(sid))
            return writers.get(sid)
        except LandingError as exc:
            if _registry_failed(exc):
                raise
            for h in self.seen.ids_by_hour[sid]:
                self.failed.setdefault(h, exc)
            return None

    # --- write -------------------------------------------------------------------------------

    def write(self, classified: DataFrame, sid: int, writer: dict) -> None:
        """write_good, counting the records it turns away as it writes. A count that never
        arrives is the id's records less the rows written, or "some, perhaps" (the dead-letter job
        then finds out). NothingWritten (no record on a bucket, where the job then fails and its
        counts never arrive) is raised after noting that every record of the id, if it has any,
        is a dead letter."""
        obs = Observation(f"dead-{sid}-{uuid.uuid4().hex}")
        counted = classified.observe(obs, F.count_if(F.col("_reason").isNotNull()).alias("dead"))
        self.log(f"{self.cfg.topic}: writing the records of schema id {sid}")
        self.step = str(sid)
        try:
            staged = write_good(counted, self.cfg, sid, writer, self.store, self.staging)
        except NothingWritten:
            self.seen.dead_by_id[sid] = 1  # not a count: "some, perhaps", so the dead letters are written
            raise
        self.good += staged
        rows = sum(s.file.rows for s in staged)
        if got := obs.get:
            self.seen.dead_by_id[sid] = int(got["dead"])
        elif self.seen.complete:
            self._dead_unreported(sid, rows)
        else:  # the first job: settled once its counts are in
            self._rows_of[sid] = rows

    def _dead_unreported(self, sid: int, rows: int) -> None:
        """The id's records less the rows written, where its records were counted; else "some,
        perhaps": the dead-letter job then looks, and finds out."""
        self.seen.dead_by_id[sid] = self.seen.records_by_id[sid] - rows if sid in self.seen.records_by_id else 1

    def write_dead_letters(self, framed: DataFrame) -> None:
        """Every record that does not land, with its reason, in one more job, only if there are
        any: bad framing, schema ids that cannot be decoded (each with its own reason), and what
        decoding or routing turned away (the same predicate as write_good's, negated)."""
        if not (self.seen.bad_framing or self.dead_ids or any(self.seen.dead_by_id.values())):
            return
        self.log(f"{self.cfg.topic}: writing dead letters")
        self.step = engine_losses.DEAD_LETTER_JOB
        pre = framed.where(F.col("_reason").isNotNull() | F.col("_schema_id").isin(sorted(self.dead_ids) or [-1]))
        if self.dead_ids:
            why = F.create_map(*[F.lit(x).cast("long") if isinstance(x, int) else F.lit(x)
                                 for kv in sorted(self.dead_ids.items()) for x in kv])
            pre = pre.withColumn("_reason", F.coalesce(F.col("_reason"), why[F.col("_schema_id")]))
        out = pre.select(*DEAD_LETTER_COLUMNS)
        for sid, writer in sorted(self.writers.items()):
            if self.seen.dead_by_id.get(sid):
                classified = self.classified(framed, sid, writer, self.cfg.topic)
                out = out.unionByName(classified.where(F.col("_reason").isNotNull()).select(*DEAD_LETTER_COLUMNS))
        self.dead, self.by_reason = write_dead_letters(out, self.cfg.topic, self.store, self.staging)

    # --- count and publish, per hour -------------------------------------------------------------

    def publish(self, plan: SlicePlan) -> LandingResult | LandingError:
        """The hour's files made visible, if it can land and its records are all accounted for."""
        h = plan.hour
        if h in self.failed:
            return self.failed[h]
        try:
            staged = self.counted(plan)
        except LandingError as exc:
            return exc
        try:
            done = publish(self.store, self.cfg, staged)
        except Exception as exc:  # noqa: BLE001 - the hours published before this one stay published
            return LandingError(
                f"{self.cfg.topic} {h}: publishing the hour failed ({type(exc).__name__}: {exc}). Its done files are "
                "the previous complete hour's or this attempt's, never a mix; land the hour again.",
                transient=is_transient(exc))
        engine_losses.forget(self.store, self.cfg.topic, h)
        gaps, read = self.seen.gaps_by_hour, staged.records_read
        return LandingResult(done=done, dead_letters=staged.dead_letters, records_read=read,
                             seconds=time.monotonic() - self.started, warnings=list(self.warnings),
                             compacted=self.snapshot, offsets_without_record=plan.records - read,
                             gaps_seen=None if gaps is None else gaps.get(h, 0),
                             gaps_shown=tuple(self.seen.gaps_shown.get(h, ())), archived=self.archives.get(h))

    def counted(self, plan: SlicePlan) -> StagedHour:
        """The hour's staged files and dead letters, once every record read is a landed row or a dead
        letter and the dead letters are within the topic's limit; else a LandingError naming the hour."""
        h, reasons, read = plan.hour, self.by_reason.get(plan.hour, {}), self.seen.read_by_hour[plan.hour]
        mine, mine_dead = [s for s in self.good if s.hour == h], [s for s in self.dead if s.hour == h]
        landed, dead_rows = sum(s.file.rows for s in mine), sum(reasons.values())
        if sum(s.file.rows for s in mine_dead) != dead_rows:
            raise LandingError(f"{self.cfg.topic} {h}: the dead-letter files hold {sum(s.file.rows for s in mine_dead)}"
                               f" rows, their reasons add up to {dead_rows}; nothing of the hour was published")
        if read > plan.records:
            raise LandingError(f"{self.cfg.topic} {h}: read {read} records from a slice of {plan.records} offsets; "
                               "nothing of the hour was published")
        _check_archive_read(self.cfg.topic, self.archives.get(h), read)
        if landed + dead_rows != read:
            raise LandingError(f"{self.cfg.topic} {h}: conservation broken: read {read}, landed {landed} + dead "
                               f"letters {dead_rows}; nothing of the hour was published")
        dl = DeadLetters(rows=dead_rows, by_reason=dict(sorted(reasons.items())),
                         files=tuple(sorted((s.file for s in mine_dead), key=lambda f: f.path)))
        staged = StagedHour(plan, mine, mine_dead, dl, read, self.attempt)
        if read and dead_rows / read > self.cfg.dead_letter_limit:
            kept_under = keep_rejected_dead_letters(self.store, staged)
            raise DeadLetterLimitExceeded(
                f"{plan.topic} {plan.hour}: {dead_rows} of {read} records are dead letters "
                f"({dead_rows / read:.1%} > limit {self.cfg.dead_letter_limit:.1%}): {dl.by_reason}. "
                f"They are kept under {kept_under}. Nothing of this attempt was published: the hour's previous "
                "done files, if any, are untouched. Fix the producer or the registry, or raise the topic's "
                "dead_letter_limit, then re-land the hour."
            )
        return staged


def _remove_staging(store: LandingStore, staging: str, topic: str, log: Callable[[str], None]) -> None:
    try:
        store.delete(staging)
    except Exception as exc:  # noqa: BLE001 - the hours are published or failed already; debris is swept
        log(f"{topic}: could not remove the staging folder {staging} ({type(exc).__name__}: {exc}); it is swept "
            "after a day by the next landing of the topic")
