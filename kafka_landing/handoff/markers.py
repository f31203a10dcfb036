"""The hand-off's markers: one protocol for every unit that waits to be loaded.

Publish marks a unit before or right after it changes what the unit holds; the queue lists
marked units, examines them, requests loads, and gives up on what asking again cannot help;
the load step clears a unit's markers once it holds what they name, or refuses them. Every
unit (`units.LoadUnit`: a landing hour, a retired hour, an event partition) uses the same
functions and the same marker body:

    {"unit": "hour" | "event", "done_file": <the landing hour's done file>, "sha256": <its hash>,
     "marked_at": ...}

A marker names the landing hour that changed the unit and the content of that hour's done
file. A landing hour has one marker (itself); an event partition has one per landing hour
that changed it since its last load. Where they are (`naming`):

    pending_loads/<ds>/<t>/hour=<H>.json                   landing hour H of table t
    pending_event_loads/<ds>/<t>/<P>/hour=<H>.json         event partition P, changed by landing hour H
    beside them, `_refused` records: the unit's load failed for good (or until `heals_at`)
    pending_loads/_given_up/..., pending_event_loads/_given_up/...: the queue gave up on it

- `mark`: overwrite the hour's marker with the new content's hash; it also drops the unit's
  refusal and given-up record (new content: what failed may pass now).
- `clear`: compare-and-delete, under the lock `mark` takes: only markers still naming the
  content the load saw go, so a re-land during a load stays pending (`clear_and_read`: and
  the markers left, read under that lock).
- `refuse` / `refusal`: a load that failed for good (or until a time, e.g. a spent quota) is
  recorded for the marks it saw; the queue does not ask again until the marks change.
- `give_up`: the queue's attempts are used up; the unit no longer takes a place among those it
  examines each tick, until a new `mark` or a load clears it.
- `list_units`: from listings only, no marker read: a tick's cost before its budget is a few
  listings per table, whatever the number of markers.

Markers and refusals written by earlier versions (a refusal inside an hour's marker, an event
refusal keyed `marks_sha256`) are read as before. Landing imports this module, never the
warehouse. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import NamedTuple

from kafka_landing.handoff.manifests import content_sha
from kafka_landing.handoff.units import EVENT, HOUR, LoadUnit, event_unit, hour_unit
from kafka_landing.naming import (
    DONE_FILE_RE,
    EVENT_GIVEN_UP_DIR,
    EVENT_PENDING_DIR,
    IDENTIFIER,
    check_event_partition,
    event_given_up_path,
    event_lock_path,
    event_pending_dir,
    event_pending_path,
    hour_folder_tag,
    pending_dir,
    pending_lock_path,
    pending_marker_path,
    refusal_path,
)
from kafka_landing.store.base import LandingStore

__all__ = ["Cleared", "Marks", "Refusal", "clear", "clear_and_read", "content_sha", "give_up", "given_up", "list_units", "mark", "marker_path",
           "given_up_path", "identity", "marks_of", "parse_done_path", "refusal", "refuse", "TableHour"]

TableHour = LoadUnit  # the landing-hour unit's name before there were other units


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def parse_done_path(rel: str) -> LoadUnit:
    m = DONE_FILE_RE.match(rel)
    if not m:
        raise ValueError(f"{rel!r} is not a done file path (tables/<dataset>/<table>/hour=<YYYY-MM-DDTHH>/_DONE.json)")
    return hour_unit(m["dataset"], m["table"], m["hour"])


def marker_path(unit: LoadUnit, hour: str | None = None) -> str:
    """The marker landing hour `hour` (the unit's own, for an HOUR unit) leaves for `unit`."""
    if unit.kind == EVENT:
        return event_pending_path(unit.dataset, unit.table, unit.partition, hour)
    return pending_marker_path(unit.dataset, unit.table, unit.partition)


def given_up_path(unit: LoadUnit) -> str:
    if unit.kind == EVENT:
        return event_given_up_path(unit.dataset, unit.table, unit.partition)
    return pending_marker_path(unit.dataset, unit.table, unit.partition, given_up=True)


def _lock(unit: LoadUnit) -> str:
    return event_lock_path(unit.dataset, unit.table) if unit.kind == EVENT else pending_lock_path(unit.dataset, unit.table)


@dataclass(frozen=True)
class Marks:
    """A unit's markers as read: {landing hour: the done-file hash its marker names (None: unreadable)}."""

    by_hour: Mapping[str, str | None]

    def __bool__(self) -> bool:
        return bool(self.by_hour)

    @property
    def hours(self) -> list[str]:
        return sorted(self.by_hour)


def identity(unit: LoadUnit, marks: Marks) -> str:
    """What a refusal and a run request of `unit` are for: an HOUR unit's content hash, an
    EVENT unit's marker set (the same markers, the same refusal; a new marker, a new request)."""
    if unit.kind == HOUR:
        return marks.by_hour.get(unit.partition) or ""
    return hashlib.sha256(json.dumps(sorted(marks.by_hour.items()), default=str).encode()).hexdigest()


def _named_sha(raw: bytes) -> str | None:
    try:
        sha = json.loads(raw).get("sha256")
    except (ValueError, AttributeError):
        return None
    return sha if isinstance(sha, str) else None


def _read(store: LandingStore, rel: str) -> dict | None:
    """A marker or record as written ({} if unreadable), None if absent."""
    try:
        raw = json.loads(store.read_bytes(rel))
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


# --- mark -----------------------------------------------------------------------------

def mark(store: LandingStore, units: Sequence[LoadUnit], done_file: str, content: bytes | str) -> list[str]:
    """Say that landing hour `done_file` (whose content is `content`, or its hash) changed what each
    of `units` holds: each waits for a load of it. One lock per table. Returns the markers' paths."""
    sha = content if isinstance(content, str) else content_sha(content)
    hour = parse_done_path(done_file).hour
    out = []
    by_lock: dict[str, list[LoadUnit]] = {}
    for u in units:
        by_lock.setdefault(_lock(u), []).append(u)
    for lock, mine in by_lock.items():
        with store.lock(lock) as held:
            for u in mine:
                rel = marker_path(u, hour)
                body = json.dumps({"unit": u.kind, "done_file": done_file, "sha256": sha, "marked_at": _now()})
                held.write_atomic(rel, body.encode())
                for stale in (given_up_path(u), refusal_path(u.kind, u.dataset, u.table, u.partition)):
                    if store.exists(stale):  # new content: what failed or was given up on may pass now
                        held.delete(stale)
                out.append(rel)
    return out


def mark_pending(store: LandingStore, done_file: str, content: bytes) -> str:
    """Mark the landing hour of `done_file` (publish, right after writing it)."""
    return mark(store, [parse_done_path(done_file)], done_file, content)[0]


# --- read -----------------------------------------------------------------------------

def marks_of(store: LandingStore, unit: LoadUnit) -> Marks:
    """The unit's markers as they stand (an HOUR unit's one read; an EVENT unit's, a listing and a
    read per landing hour that marked it)."""
    if unit.kind == HOUR:
        try:
            raw = store.read_bytes(marker_path(unit))
        except FileNotFoundError:
            return Marks({})
        return Marks({unit.partition: _named_sha(raw)})
    out = {}
    for rel in store.list(event_pending_dir(unit.dataset, unit.table, unit.partition), "hour=*.json"):
        if hour := hour_folder_tag(rel.rsplit("/", 1)[-1]):
            try:
                out[hour] = _named_sha(store.read_bytes(rel))
            except FileNotFoundError:
                continue  # cleared since the listing
    return Marks(out)


def read_marker(store: LandingStore, unit: LoadUnit, given_up: bool = False) -> dict | None:
    """An HOUR unit's marker as written ({} if unreadable), None if there is none (`given_up`: the
    record `give_up` left)."""
    return _read(store, given_up_path(unit) if given_up else marker_path(unit))


# --- refuse ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Refusal:
    why: str
    heals_at: str | None = None  # a refusal for a cause that heals with time (a spent quota): ask again then

    def holds(self, now: datetime | None = None) -> bool:
        """Still in force: for good, or until `heals_at`."""
        if self.heals_at is None:
            return True
        return (now or datetime.now(timezone.utc)) < datetime.fromisoformat(self.heals_at)


def refuse(store: LandingStore, unit: LoadUnit, marks: Marks, why: str, heals_at: datetime | None = None) -> None:
    """Record that loading `unit` as `marks` stand failed for good (what the data or the warehouse
    says), or until `heals_at`: the queue does not ask again until then or until the marks change."""
    if not marks:
        return
    record = {"sha256": identity(unit, marks), "why": why[:4000], "at": _now(),
              **({"heals_at": heals_at.isoformat(timespec="seconds")} if heals_at else {})}
    with store.lock(_lock(unit)) as held:
        held.write_atomic(refusal_path(unit.kind, unit.dataset, unit.table, unit.partition),
                          json.dumps(record).encode())


def refusal(store: LandingStore, unit: LoadUnit, marks: Marks, marker: dict | None = None) -> Refusal | None:
    """Why loading `unit` as `marks` stand was refused, or None. `marker`: an HOUR unit's marker
    already read (refusals of earlier versions are inside it)."""
    sha = identity(unit, marks)
    if not sha:
        return None
    raw = _read(store, refusal_path(unit.kind, unit.dataset, unit.table, unit.partition)) or {}
    if raw.get("sha256", raw.get("marks_sha256")) == sha:
        return Refusal(str(raw.get("why") or "refused"), raw.get("heals_at"))
    if unit.kind == HOUR:
        old = (marker if marker is not None else read_marker(store, unit) or {}).get("refused")
        if isinstance(old, dict) and old.get("sha256") == sha:
            return Refusal(str(old.get("why") or "refused"))
    return None


# --- clear ----------------------------------------------------------------------------

def clear(store: LandingStore, unit: LoadUnit, seen: Marks | Mapping[str, str | None]) -> int:
    """Remove the unit's markers that still name what a load saw (`seen`: {landing hour: hash},
    None for a marker that was unreadable); a marker naming newer content stays. The unit now
    holds what it was asked to, so its refusal and given-up record go too. Returns markers removed."""
    return clear_and_read(store, unit, seen).removed


class Cleared(NamedTuple):
    removed: int  # markers removed
    left: Marks  # the unit's markers left: what still waits, as read under the lock `clear` took


def clear_and_read(store: LandingStore, unit: LoadUnit, seen: Marks | Mapping[str, str | None]) -> Cleared:
    """`clear`, answering the markers it left too: the compare-and-delete reads them under its lock
    anyway, so a load that needs them next (an event partition's) reads them no more."""
    seen = seen.by_hour if isinstance(seen, Marks) else seen
    removed, left = 0, {}
    with store.lock(_lock(unit)) as held:
        for hour, sha in marks_of(store, unit).by_hour.items():
            if hour in seen and seen[hour] == sha:
                # Under a lock that stays ours: a marker a later holder rewrote (new content) is not deleted.
                held.delete(marker_path(unit, hour))
                removed += 1
            else:
                left[hour] = sha
        for stale in (given_up_path(unit), refusal_path(unit.kind, unit.dataset, unit.table, unit.partition)):
            if store.exists(stale):
                held.delete(stale)
    return Cleared(removed, Marks(left))


def clear_pending(store: LandingStore, done_file: str, sha: str | None) -> bool:
    """Clear a landing hour's marker if it names `sha` (and whatever was given up on for it)."""
    unit = parse_done_path(done_file)
    had = store.exists(given_up_path(unit))
    return clear(store, unit, {unit.partition: sha}) > 0 or had


# --- give up --------------------------------------------------------------------------

def give_up(store: LandingStore, unit: LoadUnit, seen: Marks, sha: str, why: str, runs: Sequence[str] = ()) -> bool:
    """The queue will not ask for content `sha` of `unit` again (its attempts are used up, it was
    refused, its done file contradicts its path): record why, so it stops taking a place among the
    units examined each tick, if the markers still are what the queue saw. An HOUR unit's marker
    moves aside; an EVENT unit keeps its markers (its versioning reads them) beside the record.
    A new `mark` or a load that clears the unit removes it. True if recorded."""
    record = {"unit": unit.kind, "sha256": sha,
              "given_up": {"why": why[:4000], "runs": list(runs), "at": _now()}}
    with store.lock(_lock(unit)) as held:
        if marks_of(store, unit).by_hour != dict(seen.by_hour):
            return False
        if unit.kind == HOUR:
            record = {**(read_marker(store, unit) or {}), **record, "done_file": unit.done_file}
        else:
            record["marks"] = dict(seen.by_hour)
        held.write_atomic(given_up_path(unit), json.dumps(record).encode())
        if unit.kind == HOUR:
            held.delete(marker_path(unit))
        return True


def given_up(store: LandingStore, unit: LoadUnit) -> dict | None:
    """The record `give_up` left for the unit, None if there is none."""
    return _read(store, given_up_path(unit))


def given_up_why(record: dict | None) -> str:
    g = (record or {}).get("given_up")
    return str(g.get("why") or "given up") if isinstance(g, dict) else "given up"


# --- list -----------------------------------------------------------------------------

def subfolders(store: LandingStore, rel_dir: str) -> list[str]:
    """The folders under `rel_dir`, but not those starting with "_" (`_given_up`, `_refused`)."""
    return [n for n in store.subdirs(rel_dir) if not n.startswith("_")]


def _tables(store: LandingStore, root: str, only: Iterable[tuple[str, str]] | None,
            keep: Callable[[str, str], bool] | None = None) -> list[tuple[str, str]]:
    if only is not None:
        found = sorted(set(only))
    else:
        found = [(d, t) for d in subfolders(store, root) if IDENTIFIER.match(d)
                 for t in subfolders(store, f"{root}/{d}") if IDENTIFIER.match(t)]
    return [(d, t) for d, t in found if keep is None or keep(d, t)]


def list_units(store: LandingStore, kind: str = HOUR, tables: Iterable[tuple[str, str]] | None = None,
               given_up: bool = False, keep: Callable[[str, str], bool] | None = None) -> list[LoadUnit]:
    """Every unit of `kind` with a marker (of `tables` if given, and of those `keep` keeps;
    `given_up`: those given up on instead), oldest first. Listings only: one per table kept (an
    event table's is one walk)."""
    out = []
    if kind == HOUR:
        for dataset, table in _tables(store, pending_dir(given_up), tables, keep):
            for rel in store.list(pending_dir(given_up, dataset, table), "hour=*.json"):
                if hour := hour_folder_tag(rel.rsplit("/", 1)[-1]):
                    out.append(hour_unit(dataset, table, hour))
        return sorted(out)
    root = EVENT_GIVEN_UP_DIR if given_up else EVENT_PENDING_DIR
    for dataset, table in _tables(store, root, tables, keep):
        if given_up:
            names = {rel.rsplit("/", 1)[-1][:-5] for rel in store.list(f"{root}/{dataset}/{table}", "*.json")}
        else:
            base = event_pending_dir(dataset, table)
            names = {rel[len(base) + 1:].split("/", 1)[0] for rel in store.walk(base, ".json")
                     if rel.rsplit("/", 1)[-1].startswith("hour=")}
        for p in names:
            try:
                out.append(event_unit(dataset, table, check_event_partition(p)))
            except ValueError:
                continue  # not a folder publish wrote
    return sorted(out)


def list_pending(store: LandingStore, only_dataset: str | None = None, only_table: str | None = None,
                 given_up: bool = False) -> list[LoadUnit]:
    """Every landing hour with a marker (of one table if given), oldest first."""
    if only_dataset and only_table:
        return list_units(store, HOUR, [(only_dataset, only_table)], given_up)
    units = list_units(store, HOUR, None, given_up)
    return [u for u in units if only_dataset is None or u.dataset == only_dataset]


