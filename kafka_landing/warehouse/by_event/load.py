"""LOAD, by event time: version an event partition from the done files as they stand
(`versions.next_manifest`), then replace it whole in the warehouse.

Under the partition's lock: make the next version if the content changed, load it unless the
warehouse already holds it (its load record names the version's hash, as a landing hour's names
its done file's), then remove the pending markers the versioning saw satisfied. The markers left
are read once, by that compare-and-delete under their lock, and answered (`EventLoad.waiting`):
whatever needs them after the load (`measures.settling`) reads them no more. Killed anywhere, the
next load finds the version written and loads it, or makes it again from the same done files.

Before any event load of a table, its superseded partitions are handed over, once (`hand_over`):
the single `__unknown__` of before and event days outside `naming.EVENT_TIME_FROM`..`EVENT_TIME_UNTIL`,
whose records now belong to the unknown partitions of their landing days. Pure: no Dagster; Spark
only through the factory a backend may call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from kafka_landing.config import TopicConfig
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff import markers
from kafka_landing.handoff.event_index import granularity_of, index_hours, partitions_of, sources
from kafka_landing.handoff.manifests import DoneFileError, content_sha, read_done_file_or_none
from kafka_landing.handoff.units import LoadUnit, event_unit
from kafka_landing.naming import (
    EVENT_PARTITION_RE,
    EVENTS_DIR,
    done_file_path,
    event_handover_lock_path,
    event_handover_path,
    event_lock_path,
    event_partition_dir,
    event_pending_dir,
    event_table,
    is_unknown,
    publish_lock_path,
    superseded,
    unknown_partition,
)
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadResult, SparkFactory, Warehouse
from kafka_landing.warehouse.by_event.versions import EventManifest, EventPartitionError, next_manifest, read_sources


@dataclass(frozen=True)
class EventLoad:
    manifest: EventManifest  # the partition's version now (`manifest.amended`: changed after its first)
    new_version: bool  # this load wrote it: the content differed from the newest version
    result: LoadResult | None  # None: the warehouse held this version already
    cleared: int  # pending markers removed
    location: str
    warnings: tuple[str, ...] = ()  # what a person should know (a superseded partition not handed over)
    waiting: tuple[str, ...] = ()  # landing hours whose markers this load left: they change the partition again


@dataclass(frozen=True)
class EventSource:
    """What loading a table's event partitions needs of its topic (a `TopicConfig` answers the same
    names): for a table in no topic's config, read from what it landed (`retired_source`)."""

    topic: str
    dataset: str
    event_granularity: str  # "day" or "hour"
    event_time_field: str | None  # the event-time column; None: as the warehouse table has it


def retired_source(store: LandingStore, unit: LoadUnit) -> EventSource:
    """The source of an event partition of a table no topic's config feeds any more (a routing change
    retired it): its cut from its partitions' names, its topic from the done files its markers name
    (or its index lists). The column stays as the warehouse table has it."""
    granularity = granularity_of(store, unit.dataset, unit.table)
    hours = [*markers.marks_of(store, unit).by_hour, *sources(store, unit.dataset, unit.table, unit.partition)]
    for hour in hours:
        try:
            found = read_done_file_or_none(store, done_file_path(unit.dataset, unit.table, hour))
        except DoneFileError:
            continue
        if found is not None and granularity:
            return EventSource(found[0].topic, unit.dataset, granularity, None)
    raise EventPartitionError(
        f"{unit}: no done file of {unit.dataset}.{unit.table} names the topic that fed this event partition "
        f"(landing hours {hours or 'none'} in its index): nothing to version it from. If the table is retired for "
        f"good, remove {event_partition_dir(unit.dataset, unit.table, unit.partition)} and its markers under "
        f"{event_pending_dir(unit.dataset, unit.table)}/")


def event_backend(warehouse: Warehouse, cfg: TopicConfig | EventSource, partition: str) -> Warehouse:
    """The backend of an event partition's table: the event-time table, partitioned on the event-time
    column; for an unknown partition, the table of the records with no usable event time, which has
    no event time to be partitioned on (BigQuery: by landing day, `layout.EventTables`)."""
    return warehouse.by_event(cfg.event_granularity, None if is_unknown(partition) else cfg.event_time_field)


def load_event_partition(warehouse: Warehouse, store: LandingStore, cfg: TopicConfig | EventSource, table: str,
                         partition: str, spark: SparkFactory, now: datetime | None = None) -> EventLoad:
    """Make the partition's version of `cfg.dataset`.`table` current and loaded. EventPartitionError /
    LoadError change nothing in the warehouse."""
    dataset, granularity = cfg.dataset, cfg.event_granularity
    warnings = hand_over(warehouse, store, cfg, table, spark,
                         strict=is_unknown(partition) or superseded(partition), now=now)
    backend = event_backend(warehouse, cfg, partition)
    unit = event_unit(dataset, table, partition)
    with store.lock(event_lock_path(dataset, table, partition)) as held:
        manifest, new, seen = next_manifest(store, held, unit, granularity, now)
        result = _load_version(backend, store, manifest, spark)
        # The markers are read here again, under their lock, and not taken from what load_unit read before
        # the load: the compare-and-delete must see a marker a publish rewrote meanwhile (newer content), or
        # it would delete a change no load has seen. What it leaves is what still waits.
        cleared, left = markers.clear_and_read(store, unit, seen)
        stale, waiting = _clear_stale(store, cfg.topic, unit, seen, left)
    return EventLoad(manifest, new, result, cleared + stale,
                     backend.partition_location(dataset, event_table(table), partition), warnings, waiting)


def _load_version(backend: Warehouse, store: LandingStore, manifest: EventManifest, spark: SparkFactory
                  ) -> LoadResult | None:
    """Load the version unless the warehouse holds it (None)."""
    if manifest.held_by(backend.loaded(manifest.dataset, manifest.target, manifest.partition)):
        return None
    return backend.load_partition(store, manifest, spark, done_file=manifest.path, done_sha256=manifest.sha256)


# --- the hand-over of superseded partitions ----------------------------------------------------

def hand_over(warehouse: Warehouse, store: LandingStore, cfg: TopicConfig | EventSource, table: str,
              spark: SparkFactory, strict: bool = True, now: datetime | None = None) -> tuple[str, ...]:
    """Hand a table's superseded event partitions (`naming.superseded`: the single __unknown__ of
    before, event days outside EVENT_TIME_FROM..EVENT_TIME_UNTIL) over to the unknown partitions of
    their landing hours' days, once: for each, under its lock, every landing hour in its index whose
    done file lists files it held is indexed in (and marks) the unknown partition of its landing day,
    the partition itself is marked and versioned again (empty: no file is cut into it any more) and
    that version loaded (BigQuery drops the unpartitioned table of before; Iceberg drops the partition's files).
    Then `event_handover_path` records it, so later loads read one small file.

    Every unknown partition's load (and a superseded one's: `strict`) waits for the hand-over, so no
    record is in both an old partition and an unknown one in the warehouse. A partition that cannot be
    handed over (a landing hour in its version whose done file is gone) is recorded as failed: strict
    loads try it again and fail naming it; other loads go on with a warning. Returns the warnings."""
    dataset = cfg.dataset
    rel = event_handover_path(dataset, table)
    record = _read_record(store, rel)
    if record is not None and (not record.get("failed") or not strict):
        return _failed_warnings(dataset, table, record)
    with store.lock(event_handover_lock_path(dataset, table)) as held:
        record = _read_record(store, rel)
        if record is not None and not record.get("failed"):
            return ()
        if record is None:
            todo = [p for p in store.subdirs(f"{EVENTS_DIR}/{dataset}/{table}")
                    if EVENT_PARTITION_RE.fullmatch(p) and superseded(p)]
        else:
            todo = sorted(record["failed"])
        done, failed = dict((record or {}).get("handed_over") or {}), {}
        for p in todo:
            try:
                done[p] = _hand_over_one(warehouse, store, cfg, table, p, spark, now)
            except KafkaLandingError as exc:
                if exc.transient:
                    raise
                failed[p] = str(exc)
        record = {"handed_over": done, "failed": failed,
                  "at": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")}
        held.write_json_atomic(rel, record)
    if failed and strict:
        raise EventPartitionError(
            f"{dataset}.{event_table(table)}: the records with no usable event time wait for the partitions they "
            f"were in before to be handed over, and {sorted(failed)} cannot be: "
            + "; ".join(f"{p}: {why}" for p, why in sorted(failed.items())), elsewhere=True)
    return _failed_warnings(dataset, table, record)


def _read_record(store: LandingStore, rel: str) -> dict | None:
    try:
        record = store.read_json(rel)
    except ValueError:
        return None  # unreadable: made again
    return record if isinstance(record, dict) else None


def _failed_warnings(dataset: str, table: str, record: dict) -> tuple[str, ...]:
    failed = record.get("failed") or {}
    if not failed:
        return ()
    return (f"{dataset}.{event_table(table)}: event partitions {sorted(failed)} of before could not be handed over "
            f"to the unknown partitions of their landing days, which wait for them: "
            + "; ".join(f"{p}: {why}" for p, why in sorted(failed.items())),)


def _hand_over_one(warehouse: Warehouse, store: LandingStore, cfg: TopicConfig | EventSource, table: str,
                   partition: str, spark: SparkFactory, now: datetime | None) -> dict:
    dataset, granularity = cfg.dataset, cfg.event_granularity
    with store.lock(event_lock_path(dataset, table, partition)) as held:
        seen, moved = {}, {}
        for hour, got in read_sources(store, dataset, table, partition).items():
            seen[hour] = got[1] if got else None
            if got and unknown_partition(hour) in partitions_of(got[0], granularity):
                moved.setdefault(unknown_partition(hour), {})[hour] = got[1]
        # Empty now (no file is cut into it), unless a landing hour in its version lost its done file:
        # then nothing is written and the hand-over is tried again as it is.
        manifest = next_manifest(store, held, event_unit(dataset, table, partition), granularity, now,
                                 ({}, seen)).manifest
        for q, hours in sorted(moved.items()):
            index_hours(store, dataset, table, q, hours)
        if moved:  # its own run finds the new version loaded and shows it empty
            last = max(h for hours in moved.values() for h in hours)
            markers.mark(store, [event_unit(dataset, table, partition)], done_file_path(dataset, table, last),
                         seen[last])
        _load_version(event_backend(warehouse, cfg, partition), store, manifest, spark)
    return {"version": manifest.version, "landing_hours": sum(len(h) for h in moved.values()), "to": sorted(moved)}


def _clear_stale(store: LandingStore, topic: str, unit: LoadUnit, seen: dict[str, str | None],
                 left: markers.Marks) -> tuple[int, tuple[str, ...]]:
    """Of the markers `left` after the versioning's were cleared, remove those that name content no
    done file has, with no publish of their landing hour in flight: a re-land that marked the
    partition and died before its done file. Nothing would ever clear them (the partition would
    never settle). Checked under the hour's publish lock, so a publish under way (its done file not
    written yet) keeps its marker. Returns (markers removed, the landing hours still waiting)."""
    removed, waiting = 0, []
    for hour, sha in sorted(left.by_hour.items()):
        with store.lock(publish_lock_path(topic, hour)):
            try:
                now = content_sha(store.read_bytes(done_file_path(unit.dataset, unit.table, hour)))
            except FileNotFoundError:
                now = None
            # The version holds the hour as its done file is now: the marker names content that never came.
            if sha != now and seen.get(hour) == now and markers.clear(store, unit, {hour: sha}):
                removed += 1
                continue
        waiting.append(hour)
    return removed, tuple(waiting)


__all__ = ["EventLoad", "EventSource", "event_backend", "hand_over", "load_event_partition", "retired_source"]
