"""LOAD, by event time: version an event partition from the done files as they stand, then
replace it whole in the warehouse (`event_partitions` says how versions are made).

Under the partition's lock: make the next version if the content changed, load it unless the
warehouse already holds it (its load record names the version's hash, as a landing hour's names
its done file's), then remove the pending markers the versioning saw satisfied. Killed anywhere,
the next load finds the version written and loads it, or makes it again from the same done files.

Before any event load of a table, its superseded partitions are handed over, once (`hand_over`):
the single `__unknown__` of before and event days outside `naming.EVENT_TIME_FROM`..`EVENT_TIME_UNTIL`,
whose records now belong to the unknown partitions of their landing days.

The checks' arithmetic is here too: conservation across the two views (each landing hour's rows,
summed over the event partitions its done file feeds, equal its landed rows) and settling. Pure:
no Dagster; Spark only through the factory a backend may call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka_landing.config import TopicConfig
from kafka_landing.errors import KafkaLandingError
from kafka_landing.event_partitions import (
    EventManifest,
    EventPartitionError,
    latest_manifest,
    next_manifest,
    read_done,
)
from kafka_landing.handoff import markers
from kafka_landing.handoff.event_index import granularity_of, index_hours, partitions_of, sources
from kafka_landing.handoff.manifests import DoneFileError, content_sha, read_done_file_or_none
from kafka_landing.handoff.units import LoadUnit, event_unit
from kafka_landing.naming import (
    EVENT_PARTITION_RE,
    EVENT_TIME_FROM,
    EVENT_TIME_UNTIL,
    EVENTS_DIR,
    done_file_path,
    event_handover_lock_path,
    event_handover_path,
    event_lock_path,
    event_manifest_path,
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
    warnings: tuple[str, ...] = ()  # what a person should know (a superseded partition not handed over)


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
    etable = event_table(table)
    with store.lock(event_lock_path(dataset, table, partition)) as held:
        manifest, amended, seen = next_manifest(store, held, dataset, table, partition, granularity, now)
        result = _load_version(backend, store, manifest, spark)
        unit = event_unit(dataset, table, partition)
        cleared = markers.clear(store, unit, seen)
        cleared += _clear_stale(store, cfg.topic, unit, seen)
    return EventLoad(manifest, amended, result, cleared, backend.partition_location(dataset, etable, partition),
                     warnings)


def _load_version(backend: Warehouse, store: LandingStore, manifest: EventManifest, spark: SparkFactory
                  ) -> LoadResult | None:
    """Load the version unless the warehouse holds it (None). A superseded partition emptied that was
    never loaded holds nothing to empty (BigQuery refused its days: they are outside its range)."""
    loaded = backend.loaded(manifest.dataset, manifest.target, manifest.partition)
    if (loaded or {}).get("sha256") == manifest.sha256 or _never_held(manifest, loaded):
        return None
    return backend.load_partition(store, manifest, spark, done_file=manifest.path, done_sha256=manifest.sha256)


def _never_held(manifest: EventManifest, loaded: dict | None) -> bool:
    return loaded is None and manifest.rows == 0 and superseded(manifest.partition)


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
        for hour in sources(store, dataset, table, partition):
            got = read_done(store, dataset, table, hour)
            seen[hour] = got[1] if got else None
            if got and unknown_partition(hour) in partitions_of(got[0], granularity):
                moved.setdefault(unknown_partition(hour), {})[hour] = got[1]
        # Empty now (no file is cut into it), unless a landing hour in its version lost its done file:
        # then nothing is written and the hand-over is tried again as it is.
        manifest, _, _ = next_manifest(store, held, dataset, table, partition, granularity, now, ({}, seen))
        for q, hours in sorted(moved.items()):
            index_hours(store, dataset, table, q, hours)
            last = max(hours)
            markers.mark(store, [event_unit(dataset, table, q)], done_file_path(dataset, table, last), hours[last])
        if moved:  # its own run finds the new version loaded and shows it empty
            last = max(h for hours in moved.values() for h in hours)
            markers.mark(store, [event_unit(dataset, table, partition)], done_file_path(dataset, table, last),
                         seen[last])
        _load_version(event_backend(warehouse, cfg, partition), store, manifest, spark)
    return {"version": manifest.version, "landing_hours": sum(len(h) for h in moved.values()), "to": sorted(moved)}


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
    if superseded(partition) and manifest.rows == 0:  # its records moved, not amended: no alert
        return Settling(True, f"{name}: no file is cut into it any more: its records were handed over to the "
                              f"unknown partitions of their landing days at {manifest.amended_at}", at)
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
    backend = event_backend(warehouse, cfg, partition)
    etable = event_table(table)
    name = f"{dataset}.{etable} {partition}"
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
    if (loaded or {}).get("sha256") != manifest.sha256 and not _never_held(manifest, loaded):
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


__all__ = ["Conservation", "EventLoad", "EventSource", "Settling", "event_backend", "event_conservation", "hand_over",
           "load_event_partition", "retired_source", "settling", "unknown_counts"]
