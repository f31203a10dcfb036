"""MEASURES of the event-time view: the arithmetic the event asset shows and its checks judge.

- `settling`: whether a partition is final (no landing hour changed it for `settle_hours`, none
  waits to), until when it may change if not, and whether its newest version changed it after it
  had been final.
- `event_conservation`: conservation across the two views: each landing hour's rows, summed over
  the event partitions its done file feeds, equal its landed rows; and the warehouse holds the
  newest version.
- `unknown_counts`: what an unknown partition shows of why its records have none.

They read the versions, the done files and the markers (never write them), and the warehouse
through its interface. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka_landing.config import TopicConfig
from kafka_landing.handoff import markers
from kafka_landing.handoff.event_index import partitions_of
from kafka_landing.handoff.units import LoadUnit, event_unit
from kafka_landing.naming import (
    EVENT_TIME_FROM,
    EVENT_TIME_UNTIL,
    event_manifest_path,
    event_table,
    is_unknown,
    superseded,
)
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import Warehouse
from kafka_landing.warehouse.by_event.load import event_backend
from kafka_landing.warehouse.by_event.versions import EventManifest, latest_manifest, read_done


@dataclass(frozen=True)
class Settling:
    """Whether an event partition is final now, and if not, until when it may change.

    A partition is final (`settled`) once no landing hour changed it for `settle_hours` and none
    waits to. Before that it is not final yet, the normal state of every recent day: `settles_at`
    says until when late records may amend it (None while a landing hour waits to: it is versioned
    again first). `amended_after_final`: its newest version changed it after the version it replaced
    had been final (at `previous_settled_at`), and it is not final again yet: whoever read it as
    final read rows that changed since. Each is true now, of the newest version and the markers: it
    changes only when the partition does or its `settles_at` passes."""

    settled: bool  # final now: versioned, no landing hour waiting to change it, unchanged for settle_hours
    why: str
    settles_at: str | None  # when it is (was) final if nothing changes it; None: not versioned, or a landing hour waits
    previous_settled_at: str | None = None  # until it is final again: when the version it replaced became final

    @property
    def amended_after_final(self) -> bool:
        return self.previous_settled_at is not None


def settling(store: LandingStore, manifest: EventManifest, waiting: Sequence[str], settle_hours: int,
             now: datetime | None = None) -> Settling:
    """Whether the partition of `manifest`, its newest version, is final (see `Settling`). `waiting`:
    the landing hours whose markers name content the version does not hold (what the load left,
    `EventLoad.waiting`; `current_settling` reads them). Reads the previous version only for a
    manifest written before `previous_amended_at` existed."""
    now = now or datetime.now(timezone.utc)
    name = _name(manifest.dataset, manifest.table, manifest.partition)
    window = timedelta(hours=settle_hours)
    made = datetime.fromisoformat(manifest.amended_at)
    at = _iso(made + window)
    if superseded(manifest.partition) and manifest.rows == 0:  # its records moved, not amended: no alert
        return Settling(True, f"{name}: final: no file is cut into it any more: its records were handed over to "
                              f"the unknown partitions of their landing days at {manifest.amended_at}", at)
    before = _previous_amended_at(store, manifest)
    was_final = _iso(datetime.fromisoformat(before) + window) if (
        before is not None and datetime.fromisoformat(before) + window <= made) else None
    amended = (f"version {manifest.version}, made at {manifest.amended_at} from landing hours "
               f"{list(manifest.changed_hours)}, amended it after it had been final since {was_final} (version "
               f"{manifest.version - 1} was made at {before})" if was_final else "")
    if not waiting and now >= made + window:
        return Settling(True, f"{name}: final since {at}: version {manifest.version}, unchanged since "
                              f"{manifest.amended_at} ({settle_hours} h without a change)"
                              + (f"; earlier, {amended}" if amended else ""), at)
    head = (f"{name}: changed after it was final: {amended}: whoever read it as final should read it again; "
            if amended else f"{name}: not final yet: ")
    if waiting:
        return Settling(False, f"{head}landing hours {sorted(map(str, waiting))} changed it since version "
                               f"{manifest.version}: it is versioned again by its next load, then final "
                               f"{settle_hours} h after its last change", None, was_final)
    return Settling(False, f"{head}version {manifest.version} was made at {manifest.amended_at}; late records may "
                           f"still amend it until {at} ({settle_hours} h without a change), then it is final and "
                           "this check turns green by itself", at, was_final)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def current_settling(store: LandingStore, unit: LoadUnit, settle_hours: int, now: datetime | None = None) -> Settling:
    """`settling` of the event partition `unit` as it stands: its newest version and its markers, each
    read once (the `settled` check's reads); not final before its first version."""
    manifest = latest_manifest(store, unit.dataset, unit.table, unit.partition)
    if manifest is None:
        return Settling(False, f"{_name(unit.dataset, unit.table, unit.partition)}: not final yet: not versioned "
                               "yet: its first load versions it", None)
    return settling(store, manifest, markers.marks_of(store, unit).hours, settle_hours, now)


def _name(dataset: str, table: str, partition: str) -> str:
    return f"{dataset}.{event_table(table)} {partition}"


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
    backend = event_backend(warehouse, cfg, partition)
    etable = event_table(table)
    name = _name(dataset, table, partition)
    manifest = latest_manifest(store, dataset, table, partition)
    if manifest is None:
        return Conservation(False, f"{name}: not versioned yet: load it", {})
    problems, waiting = [], set()
    loaded = backend.loaded(dataset, etable, partition)
    if superseded(partition) and manifest.rows == 0:
        rows = 0  # handed over, it holds nothing (and the table it was in may be another's now)
    else:
        rows = backend.partition_rows(dataset, etable, partition) or 0
    if rows != manifest.rows:
        problems.append(f"the warehouse holds {rows} rows, version {manifest.version} lists {manifest.rows}")
    if not manifest.held_by(loaded):
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
            pending = sorted(p for p in spread if markers.marks_of(store, event_unit(dataset, table, p)))
            text = f"landing hour {hour} landed {done.rows} rows and its event partitions hold {sum(spread.values())} ({spread})"
            if pending and sum(spread.values()) < done.rows:
                waiting.update(pending)
                behind.append(f"{text}; {pending} wait for their next version")
            else:
                problems.append(text)
    metadata = {"version": manifest.version, "rows": manifest.rows, "warehouse_rows": rows, "landing_hours": hours,
                "waiting_for": sorted(waiting), **unknown_counts(manifest)}
    neighbours = tuple(sorted({p for spread in (h["by_event_partition"] for h in hours.values()) for p in spread}
                              - {partition}))
    if problems:
        return Conservation(False, f"{name}: " + "; ".join(problems + behind), metadata, (), neighbours)
    if behind:
        return Conservation(False, f"{name}: " + "; ".join(behind) + " (the sensor asks for them; this check is "
                                   "evaluated again when they are loaded)", metadata, tuple(sorted(waiting)),
                            neighbours)
    return Conservation(True, f"{name}: version {manifest.version}, {rows} rows from {len(hours)} landing hour(s), "
                              "each landing hour's rows in exactly one event partition" + _unknown_text(manifest),
                        metadata, (), neighbours)


def unknown_counts(manifest: EventManifest) -> dict:
    """What an unknown partition's metadata shows of why its records have no event partition: rows
    with no event time, rows with a sentinel one (by event hour); {} for any other partition."""
    if not is_unknown(manifest.partition):
        return {}
    sentinels = manifest.sentinel_rows
    return {"no_event_time_rows": manifest.no_event_time_rows, "sentinel_time_rows": sum(sentinels.values()),
            "sentinel_event_hours": dict(list(sentinels.items())[:SENTINELS_SHOWN])}


SENTINELS_SHOWN = 24  # sentinel event hours named in metadata (their rows are always counted whole)


def _unknown_text(manifest: EventManifest) -> str:
    counts = unknown_counts(manifest)
    if not counts or not counts["sentinel_time_rows"]:
        return ""
    return (f"; {counts['sentinel_time_rows']} of them have an event time outside {EVENT_TIME_FROM[:10]}.."
            f"{EVENT_TIME_UNTIL[:10]} (a sentinel: {', '.join(counts['sentinel_event_hours'])}), so they are here "
            "with the records that have none")


__all__ = ["Conservation", "SENTINELS_SHOWN", "Settling", "current_settling", "event_conservation", "settling",
           "unknown_counts"]
