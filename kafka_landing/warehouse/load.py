"""LOAD, the step: load one unit (a landing hour, or an event partition) through a warehouse
backend (`backend.Warehouse`) and own the hand-off's markers around it, so no asset or job
reads or clears them itself. Pure: no Dagster; Spark only through the factory a backend may call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from kafka_landing.config import TopicConfig
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff import markers
from kafka_landing.handoff.manifests import DoneFileMismatch, read_done_file, read_done_file_or_none
from kafka_landing.handoff.units import EVENT, HOUR, LoadUnit, hour_unit
from kafka_landing.naming import done_file_glob
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError, LoadResult, SparkFactory, StagedRun, Warehouse, verify_files
from kafka_landing.warehouse.by_event.load import EventLoad, EventSource, load_event_partition
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError


def load_unit(warehouse: Warehouse, store: LandingStore, unit: LoadUnit, spark: SparkFactory,
              cfg: TopicConfig | EventSource | None = None, staged: StagedRun | None = None) -> LoadResult | EventLoad:
    """Load one unit and own its markers: the one load step every asset and job calls.

    Reads the unit's markers first (a marker written after the read is newer content), loads, then
    clears what the load satisfied: for a landing hour, its marker and every hour the load recorded
    besides it (a BigQuery day load holds the whole day), given-up ones included; for an event
    partition, the markers its versioning saw, answering those left (`by_event/load`). So a unit's
    markers are read twice: here, before the load, for what a refusal names; and after it, by the
    compare-and-delete under their lock (which must read them there: a marker rewritten meanwhile
    names newer content and stays). A terminal failure refuses the marks it saw (until `heals_after`
    where the cause heals with time), so the queue does not ask again until they change; a failure
    about another unit (`elsewhere`: another hour of the day, a source file replaced meanwhile)
    refuses nothing. `cfg`: the topic of an event partition; `staged`: the run `stage_done_files`
    made for a landing hour's run."""
    seen = markers.marks_of(store, unit)
    sha = None  # the content a landing hour's load tried: what a refusal names
    try:
        if unit.kind == EVENT:
            if cfg is None:
                raise ValueError(f"{unit}: an event partition is loaded with its topic's config")
            return load_event_partition(warehouse, store, cfg, unit.table, unit.partition, spark)
        done, sha = read_done_file(store, unit.done_file)
        result = warehouse.load_partition(store, done, spark, done_file=unit.done_file, done_sha256=sha, staged=staged)
    except KafkaLandingError as exc:
        if not exc.transient and not exc.elsewhere and seen and (unit.kind == EVENT or sha is not None):
            if unit.kind == HOUR:  # a done file that cannot be read is moved aside by the queue, not refused
                seen = markers.Marks({unit.partition: sha})
            after = exc.heals_after
            markers.refuse(store, unit, seen, str(exc),
                           datetime.now(timezone.utc) + timedelta(seconds=after) if after else None)
        raise
    markers.clear(store, unit, {unit.partition: sha})
    for hour, hour_sha in result.also_loaded:  # the day now holds these hours as this content
        markers.clear(store, hour_unit(unit.dataset, unit.table, hour), {hour: hour_sha})
    return result


def stage_done_files(warehouse: Warehouse, store: LandingStore, done_files: list[str],
                     spark: SparkFactory) -> StagedRun:
    """`Warehouse.stage` of the landing hours of these done files (those that exist): the hours of a
    run loaded together ahead of their own loads, which stay hour by hour (markers, failures,
    results) and are each handed the run (`load_done_file(staged=...)`)."""
    loads = []
    for rel in done_files:
        try:
            got = read_done_file_or_none(store, rel)
        except KafkaLandingError:
            continue  # its own load says what is wrong with it
        if got is not None:
            loads.append((got[0], rel, got[1]))
    return warehouse.stage(store, loads, spark) if len(loads) > 1 else StagedRun()


RELOAD_BATCH_HOURS = 24  # hours of a table staged together by `reload_table`: a day per Spark job and commit


def reload_table(warehouse: Warehouse, store: LandingStore, dataset: str, table: str, spark: SparkFactory,
                 progress: Callable[[int, int, str | None], None] = lambda done, total, failed: None,
                 only_missing: bool = True) -> tuple[int, dict[str, str]]:
    """Load every landed hour of a table from its done file (the landing files are the source of
    truth): what moves a table into a new warehouse. A day at a time, staged together; hours the
    warehouse already holds as this content are skipped (`only_missing`). `progress(done, total,
    failure)` after each hour. Returns (hours loaded, {done file: why it failed}): one hour's
    failure never stops the others."""
    def missing(rel: str) -> bool:
        try:
            got = read_done_file_or_none(store, rel)
        except KafkaLandingError:
            return True  # its load says what is wrong with it
        return got is not None and warehouse.loaded_sha(dataset, table, got[0].partition) != got[1]

    done_files = sorted(store.glob(done_file_glob(dataset, table)))
    if only_missing:
        done_files = [rel for rel in done_files if missing(rel)]
    loaded, failed = 0, {}
    for start in range(0, len(done_files), RELOAD_BATCH_HOURS):
        batch = done_files[start:start + RELOAD_BATCH_HOURS]
        try:
            staged = stage_done_files(warehouse, store, batch, spark)
        except Exception:  # noqa: BLE001 - a shortcut only: each hour below loads alone and says what is wrong
            staged = StagedRun()
        for n, rel in enumerate(batch, start + 1):
            try:
                load_done_file(warehouse, store, rel, spark, staged)
                loaded += 1
                progress(n, len(done_files), None)
            except Exception as exc:  # noqa: BLE001 - one hour's failure must not cost the others
                failed[rel] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, KafkaLandingError) else str(exc)
                progress(n, len(done_files), f"{rel}: {failed[rel]}")
    return loaded, failed


def load_done_file(warehouse: Warehouse, store: LandingStore, done_file: str, spark: SparkFactory,
                   staged: StagedRun | None = None) -> LoadResult:
    """`load_unit` of the landing hour of one done file (relative to the landing root)."""
    return load_unit(warehouse, store, markers.parse_done_path(done_file), spark, staged=staged)


__all__ = ["DoneFileMismatch", "EventLoad", "IncompatibleSchemaError", "LoadError", "LoadResult", "SparkFactory",
           "StagedRun", "Warehouse", "load_done_file", "load_unit", "reload_table", "stage_done_files", "verify_files"]
