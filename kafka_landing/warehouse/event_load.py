"""LOAD, by event time: version an event partition from the done files as they stand, then
replace it whole in the warehouse (`event_partitions` says how versions are made).

Under the partition's lock: make the next version if the content changed, load it unless the
warehouse already holds it (its load record names the version's hash, as a landing hour's names
its done file's), then remove the pending markers the versioning saw satisfied. Killed anywhere,
the next load finds the version written and loads it, or makes it again from the same done files.

The checks' arithmetic is here too: conservation across the two views (each landing hour's rows,
summed over the event partitions its done file feeds, equal its landed rows) and settling. Pure:
no Dagster; Spark only through the factory a backend may call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka_landing.config import TopicConfig
from kafka_landing.event_partitions import (
    EventManifest,
    EventPartitionError,
    latest_manifest,
    next_manifest,
    read_done,
)
from kafka_landing.handoff import markers
from kafka_landing.handoff.event_index import granularity_of, partitions_of, sources
from kafka_landing.handoff.manifests import DoneFileError, content_sha, read_done_file_or_none
from kafka_landing.handoff.units import LoadUnit, event_unit
from kafka_landing.naming import (
    done_file_path,
    event_lock_path,
    event_manifest_path,
    event_partition_dir,
    event_pending_dir,
    event_table,
    publish_lock_path,
)
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadResult, SparkFactory, Warehouse


def read_pending(store: LandingStore, dataset: str, table: str, partition: str) -> dict[str, str | None]:
    """{landing hour: hash its marker names} of one event partition's markers."""
    return dict(markers.marks_of(store, event_unit(dataset, table, partition)).by_hour)


@dataclass(frozen=True)
class EventLoad:
    manifest: EventManifest
    amended: bool  # this load made a new version
    result: LoadResult | None  # None: the warehouse held this version already
    cleared: int  # pending markers removed
    location: str


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


def load_event_partition(warehouse: Warehouse, store: LandingStore, cfg: TopicConfig | EventSource, table: str,
                         partition: str, spark: SparkFactory, now: datetime | None = None) -> EventLoad:
    """Make the partition's version of `cfg.dataset`.`table` current and loaded. EventPartitionError /
    LoadError change nothing in the warehouse."""
    dataset, granularity = cfg.dataset, cfg.event_granularity
    backend = warehouse.by_event(granularity, cfg.event_time_field)
    etable = event_table(table)
    with store.lock(event_lock_path(dataset, table, partition)) as held:
        manifest, amended, seen = next_manifest(store, held, dataset, table, partition, granularity, now)
        result = None
        if backend.loaded_sha(dataset, etable, partition) != manifest.sha256:
            result = backend.load_partition(store, manifest, spark, done_file=manifest.path,
                                            done_sha256=manifest.sha256)
        unit = event_unit(dataset, table, partition)
        cleared = markers.clear(store, unit, seen)
        cleared += _clear_stale(store, cfg.topic, unit, seen)
    return EventLoad(manifest, amended, result, cleared, backend.partition_location(dataset, etable, partition))


def _clear_stale(store: LandingStore, topic: str, unit, seen: dict[str, str | None]) -> int:
    """Markers left after the versioning that name content no done file has, with no publish of
    their landing hour in flight: a re-land that marked the partition and died before its done file.
    Nothing would ever clear them (the partition would never settle). Checked under the hour's publish
    lock, so a publish under way (its done file not written yet) keeps its marker."""
    removed = 0
    for hour, sha in markers.marks_of(store, unit).by_hour.items():
        if sha is not None and seen.get(hour) == sha:
            continue  # cleared meanwhile by another load
        with store.lock(publish_lock_path(topic, hour)):
            try:
                now = content_sha(store.read_bytes(done_file_path(unit.dataset, unit.table, hour)))
            except FileNotFoundError:
                now = None
            if sha != now and seen.get(hour) == now:  # the version holds the hour as its done file is now
                removed += markers.clear(store, unit, {hour: sha})
    return removed


@dataclass(frozen=True)
class Settling:
    """When an event partition is final, and whether its newest version broke that promise.

    A partition is `settled` (final) once no landing hour changed it for `settle_hours` and none
    waits to. Not being final yet is the normal state of every recent day, not a failure: the check
    passes and says until when late records may amend it (`settles_at`). It fails (`ok` False) only
    when the newest version was made after the previous one had settled: a day readers were told was
    final changed after all, the one signal worth an alert. That is a fact about the version, true
    for as long as it is the newest, so the result never goes stale as time passes."""

    settled: bool  # final now: versioned, no landing hour waiting to change it, unchanged for settle_hours
    why: str
    settles_at: str | None  # when it is (was) final if nothing changes it; None: not versioned, or a landing hour waits
    ok: bool = True  # False: the newest version amended the partition after it had settled
    previous_settled_at: str | None = None  # when the version it replaced had settled (set when ok is False)


def settling(store: LandingStore, dataset: str, table: str, partition: str, settle_hours: int,
             now: datetime | None = None, manifest: EventManifest | None = None) -> Settling:
    """Whether the partition is final (see `Settling`); costs a listing of its markers, and a read of
    its previous version only for a manifest written before `previous_amended_at` existed."""
    now = now or datetime.now(timezone.utc)
    manifest = manifest or latest_manifest(store, dataset, table, partition)
    name = f"{dataset}.{event_table(table)} {partition}"
    if manifest is None:
        return Settling(False, f"{name}: not versioned yet: nothing of it is final until it is loaded", None)
    window = timedelta(hours=settle_hours)
    made = datetime.fromisoformat(manifest.amended_at)
    at = (made + window).isoformat(timespec="seconds")
    before = _previous_amended_at(store, manifest)
    had_settled = before is not None and datetime.fromisoformat(before) + window <= made
    previous_settled_at = ((datetime.fromisoformat(before) + window).isoformat(timespec="seconds") if had_settled
                           else None)
    alert = (f"version {manifest.version}, made at {manifest.amended_at} from landing hours "
             f"{list(manifest.changed_hours)}, amended it after it had settled at {previous_settled_at} (version "
             f"{manifest.version - 1} was made at {before}, {settle_hours} h earlier or more): whoever read it as "
             "final read rows that changed since; " if had_settled else "")
    waiting = sorted(read_pending(store, dataset, table, partition))
    if waiting:
        return Settling(False, f"{name}: {alert}landing hours {waiting} changed it since version {manifest.version}; "
                               f"it is versioned again by its next load and final {settle_hours} h after its last "
                               "change", None, not had_settled, previous_settled_at)
    if now < made + window:
        return Settling(False, f"{name}: {alert}version {manifest.version} was made at {manifest.amended_at}; late "
                               f"records may still amend it until {at} ({settle_hours} h without a change), then it is "
                               "final", at, not had_settled, previous_settled_at)
    return Settling(True, f"{name}: {alert}final since {at}: version {manifest.version}, unchanged since "
                          f"{manifest.amended_at} ({settle_hours} h without a change)", at, not had_settled,
                    previous_settled_at)


def _previous_amended_at(store: LandingStore, manifest: EventManifest) -> str | None:
    """When the version `manifest` replaced was made: recorded in it, or (a manifest written before
    that field existed) read from the previous version's file; None for a first version."""
    if manifest.previous_amended_at or manifest.version <= 1:
        return manifest.previous_amended_at
    rel = event_manifest_path(manifest.dataset, manifest.table, manifest.partition, manifest.version - 1)
    try:
        before = json.loads(store.read_bytes(rel)).get("amended_at")
    except (FileNotFoundError, ValueError, AttributeError):
        return None  # unknown: not reported as an amendment of a settled day
    return before if isinstance(before, str) else None


@dataclass(frozen=True)
class Conservation:
    ok: bool
    why: str
    metadata: dict
    waiting: tuple[str, ...] = ()  # event partitions whose next version would settle the count: not yet a loss
    neighbours: tuple[str, ...] = ()  # the other partitions its landing hours feed: their counts may wait for it


def event_conservation(store: LandingStore, warehouse: Warehouse, cfg: TopicConfig, table: str,
                       partition: str) -> Conservation:
    """The warehouse holds the partition's newest version (rows read back from the warehouse), and
    every landing hour in it has all its landed rows in exactly one event partition: summed over the
    partitions its done file feeds, as their newest versions list them. A count that is off only
    where a partition waits for its next version (marked pending) is `waiting`, not a loss."""
    dataset, granularity = cfg.dataset, cfg.event_granularity
    backend = warehouse.by_event(granularity, cfg.event_time_field)
    etable = event_table(table)
    name = f"{dataset}.{etable} {partition}"
    manifest = latest_manifest(store, dataset, table, partition)
    if manifest is None:
        return Conservation(False, f"{name}: not versioned yet: load it", {})
    problems, waiting = [], set()
    rows = backend.partition_rows(dataset, etable, partition) or 0
    if rows != manifest.rows:
        problems.append(f"the warehouse holds {rows} rows, version {manifest.version} lists {manifest.rows}")
    if backend.loaded_sha(dataset, etable, partition) != manifest.sha256:
        problems.append(f"the warehouse's last load is not version {manifest.version}")
    versions: dict[str, EventManifest | None] = {partition: manifest}
    hours, behind = {}, []
    for hour in sorted(manifest.hours):
        got = read_done(store, dataset, table, hour)
        if got is None:
            problems.append(f"landing hour {hour} is in version {manifest.version} and its done file is gone")
            continue
        done, _ = got
        spread = {}
        for p in sorted(partitions_of(done, granularity)):
            if p not in versions:
                versions[p] = latest_manifest(store, dataset, table, p)
            spread[p] = (versions[p].hours.get(hour, {}).get("rows", 0) if versions[p] else 0)
        hours[hour] = {"landed": done.rows, "by_event_partition": spread}
        if sum(spread.values()) != done.rows:
            pending = sorted(p for p in spread if read_pending(store, dataset, table, p))
            text = f"landing hour {hour} landed {done.rows} rows and its event partitions hold {sum(spread.values())} ({spread})"
            if pending and sum(spread.values()) < done.rows:
                waiting.update(pending)
                behind.append(f"{text}; {pending} wait for their next version")
            else:
                problems.append(text)
    metadata = {"version": manifest.version, "rows": manifest.rows, "warehouse_rows": rows, "landing_hours": hours,
                "waiting_for": sorted(waiting)}
    neighbours = tuple(sorted({p for spread in (h["by_event_partition"] for h in hours.values()) for p in spread}
                              - {partition}))
    if problems:
        return Conservation(False, f"{name}: " + "; ".join(problems + behind), metadata, (), neighbours)
    if behind:
        return Conservation(False, f"{name}: " + "; ".join(behind) + " (the sensor asks for them; this check is "
                                   "evaluated again when they are loaded)", metadata, tuple(sorted(waiting)),
                            neighbours)
    return Conservation(True, f"{name}: version {manifest.version}, {rows} rows from {len(hours)} landing hour(s), "
                              "each landing hour's rows in exactly one event partition", metadata, (), neighbours)


__all__ = ["Conservation", "EventLoad", "EventSource", "Settling", "event_conservation", "load_event_partition",
           "retired_source", "settling"]
