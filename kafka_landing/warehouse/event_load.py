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

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka_landing.config import TopicConfig
from kafka_landing.event_partitions import (
    EventManifest,
    clear_event_pending,
    latest_manifest,
    next_manifest,
    partitions_of,
    read_done,
    read_pending,
)
from kafka_landing.naming import event_lock_path, event_table
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.load import LoadResult, SparkFactory, Warehouse


@dataclass(frozen=True)
class EventLoad:
    manifest: EventManifest
    amended: bool  # this load made a new version
    result: LoadResult | None  # None: the warehouse held this version already
    cleared: int  # pending markers removed
    location: str


def load_event_partition(warehouse: Warehouse, store: LandingStore, cfg: TopicConfig, table: str, partition: str,
                         spark: SparkFactory, now: datetime | None = None) -> EventLoad:
    """Make the partition's version of `cfg.dataset`.`table` current and loaded. EventPartitionError /
    LoadError change nothing in the warehouse."""
    dataset, granularity = cfg.dataset, cfg.event_granularity
    backend = warehouse.by_event(granularity, cfg.event_time_field)
    etable = event_table(table)
    with store.lock(event_lock_path(dataset, table, partition)) as held:
        manifest, amended, seen = next_manifest(store, held, dataset, table, partition, granularity, now)
        result = None
        if backend.loaded_sha(dataset, etable, partition) != manifest.sha256:
            result = backend.load_hour(store, manifest.as_done_file(cfg.topic), spark, done_file=manifest.path,
                                       done_sha256=manifest.sha256)
        cleared = clear_event_pending(store, dataset, table, partition, seen)
    return EventLoad(manifest, amended, result, cleared, backend.hour_location(dataset, etable, partition))


@dataclass(frozen=True)
class Settling:
    settled: bool
    why: str
    settles_at: str | None  # when it settles if nothing changes it (None: settled, or never versioned)


def settling(store: LandingStore, dataset: str, table: str, partition: str, settle_hours: int,
             now: datetime | None = None, manifest: EventManifest | None = None) -> Settling:
    """Settled: versioned, no landing hour waiting to change it, and unchanged for `settle_hours`."""
    now = now or datetime.now(timezone.utc)
    manifest = manifest or latest_manifest(store, dataset, table, partition)
    name = f"{dataset}.{event_table(table)} {partition}"
    if manifest is None:
        return Settling(False, f"{name}: not versioned yet", None)
    waiting = sorted(read_pending(store, dataset, table, partition))
    at = datetime.fromisoformat(manifest.amended_at) + timedelta(hours=settle_hours)
    if waiting:
        return Settling(False, f"{name}: landing hours {waiting} changed it since version {manifest.version}; it "
                               "is versioned again by its next load", at.isoformat(timespec="seconds"))
    if not manifest.settled(now, settle_hours):
        return Settling(False, f"{name}: version {manifest.version} was made at {manifest.amended_at}; late records "
                               f"may still amend it until {at.isoformat(timespec='seconds')} ({settle_hours} h "
                               "without a change)", at.isoformat(timespec="seconds"))
    return Settling(True, f"{name}: version {manifest.version}, unchanged since {manifest.amended_at} "
                          f"(settled after {settle_hours} h)", None)


@dataclass(frozen=True)
class Conservation:
    ok: bool
    why: str
    metadata: dict
    waiting: tuple[str, ...] = ()  # event partitions whose next version would settle the count: not yet a loss


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
    rows = backend.hour_rows(dataset, etable, partition) or 0
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
    if problems:
        return Conservation(False, f"{name}: " + "; ".join(problems + behind), metadata)
    if behind:
        return Conservation(False, f"{name}: " + "; ".join(behind) + " (the sensor asks for them)", metadata,
                            tuple(sorted(waiting)))
    return Conservation(True, f"{name}: version {manifest.version}, {rows} rows from {len(hours)} landing hour(s), "
                              "each landing hour's rows in exactly one event partition", metadata)


__all__ = ["Conservation", "EventLoad", "Settling", "event_conservation", "load_event_partition", "settling"]
