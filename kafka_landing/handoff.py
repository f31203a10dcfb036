"""The hand-off between landing and loading: what landing leaves for the warehouse, in the
landing root, and the one content hash both sides compare.

- A done file (`tables/<dataset>/<table>/hour=<H>/_DONE.json`, see `manifests.DoneFile`) says
  that a table's hour is complete; its identity is the SHA-256 of its bytes (`content_sha`).
- Beside it, publish() leaves a small marker per (table, hour) (`mark_pending`):

      pending_loads/<dataset>/<table>/hour=<H>.json   {"done_file", "sha256", "marked_at"}

  A re-land overwrites it with the new content's hash.
- A load, once its hour is in place and recorded, removes the marker only if it still
  names the content it loaded (`clear_pending`, compare-and-delete under the table's lock,
  the lock `mark_pending` takes too): a re-land during a load stays pending.
- A load that failed for good is recorded on the marker (`refuse_pending`); one nobody will
  ask for again is moved aside (`give_up_pending`) to

      pending_loads/_given_up/<dataset>/<table>/hour=<H>.json   (the marker, and why)

  A re-land (`mark_pending`) or a load of the hour (`clear_pending`) removes it.

Landing imports this module, never the warehouse; the warehouse's queue (`warehouse/load_queue`)
builds on it. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from kafka_landing.naming import (
    DONE_FILE_RE,
    IDENTIFIER,
    TABLES_DIR,
    dataset_dir,
    done_file_glob,
    done_file_path,
    hour_folder_tag,
    pending_dir,
    pending_lock_path,
    pending_marker_path,
)
from kafka_landing.store.base import LandingStore


@dataclass(frozen=True, order=True)
class TableHour:
    hour: str  # an hour tag, 2026-11-20T13 (first, so sorting is oldest first)
    dataset: str
    table: str

    @property
    def done_file(self) -> str:
        return done_file_path(self.dataset, self.table, self.hour)

    @property
    def marker(self) -> str:
        return pending_marker_path(self.dataset, self.table, self.hour)

    @property
    def given_up_marker(self) -> str:
        return pending_marker_path(self.dataset, self.table, self.hour, given_up=True)

    @property
    def name(self) -> str:
        return f"{self.dataset}.{self.table}"


def parse_done_path(rel: str) -> TableHour:
    m = DONE_FILE_RE.match(rel)
    if not m:
        raise ValueError(f"{rel!r} is not a done file path (tables/<dataset>/<table>/hour=<YYYY-MM-DDTHH>/_DONE.json)")
    return TableHour(m["hour"], m["dataset"], m["table"])


def content_sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def mark_pending(store: LandingStore, done_file_rel_path: str, content_bytes: bytes) -> str:
    """Say that (table, hour) of this done file waits for a load of exactly this content.
    Call it right after the done file is written. Returns the marker's path."""
    th = parse_done_path(done_file_rel_path)
    body = json.dumps({"done_file": th.done_file, "sha256": content_sha(content_bytes),
                       "marked_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode()
    with store.lock(pending_lock_path(th.dataset, th.table)) as held:
        held.fence()
        store.write_atomic(th.marker, body)
        if store.exists(th.given_up_marker):  # new content: what was given up on is not the hour's any more
            held.fence()
            store.delete(th.given_up_marker)
    return th.marker


_MISSING = object()


def _marker_sha(store: LandingStore, th: TableHour, rel: str | None = None):
    """The hash a marker names; None if unreadable (it still means "look here"); _MISSING if absent."""
    try:
        raw = store.read_bytes(rel or th.marker)
    except FileNotFoundError:
        return _MISSING
    try:
        sha = json.loads(raw).get("sha256")
        return sha if isinstance(sha, str) else None
    except (ValueError, AttributeError):
        return None


def marker_sha(store: LandingStore, th: TableHour) -> str | None:
    """The content hash the marker of (table, hour) names, None if there is none (or unreadable)."""
    sha = _marker_sha(store, th)
    return None if sha is _MISSING else sha


def read_marker(store: LandingStore, th: TableHour, given_up: bool = False) -> dict | None:
    """The marker of (table, hour) as written ({} if unreadable), None if there is none
    (`given_up`: the one moved aside by `give_up_pending`)."""
    try:
        raw = json.loads(store.read_bytes(th.given_up_marker if given_up else th.marker))
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


def refusal(marker: dict | None, sha: str) -> str | None:
    """Why content `sha` was refused for good (`refuse_pending`), or None if it was not."""
    refused = (marker or {}).get("refused")
    if isinstance(refused, dict) and refused.get("sha256") == sha:
        return str(refused.get("why") or "refused")
    return None


def refuse_pending(store: LandingStore, done_file_rel_path: str, sha: str, why: str) -> bool:
    """Record on the marker that content `sha` failed terminally (what the data or the warehouse
    says, not a service briefly away), so the sensor does not ask for it again: only new content
    (a re-land writes a new marker) or a person re-materialising the hour loads it. True if
    recorded; False if the marker is absent or names other content. A load given up on and
    tried again by hand that fails for good says so on the marker moved aside."""
    th = parse_done_path(done_file_rel_path)
    with store.lock(pending_lock_path(th.dataset, th.table)) as held:
        for given_up in (False, True):
            marker = read_marker(store, th, given_up)
            if marker and marker.get("sha256") == sha:
                marker["refused"] = {"sha256": sha, "why": why[:4000],
                                     "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
                held.fence()
                store.write_atomic(th.given_up_marker if given_up else th.marker, json.dumps(marker).encode())
                return True
        return False


def give_up_pending(store: LandingStore, th: TableHour, seen: str | None, sha: str, why: str,
                    runs: Sequence[str] = ()) -> bool:
    """Move the marker of (table, hour) aside, saying why, if it still names `seen` (the hash
    read before the done file, None: unreadable): the sensor will not ask for content `sha`
    again, so it must not take a place among the markers it examines each tick. A re-land
    (new marker) or a load of the hour (`clear_pending`) removes it. True if moved."""
    with store.lock(pending_lock_path(th.dataset, th.table)) as held:
        marker = read_marker(store, th)
        if marker is None or (marker.get("sha256") if isinstance(marker.get("sha256"), str) else None) != seen:
            return False
        moved = {**marker, "done_file": th.done_file, "sha256": sha,
                 "given_up": {"why": why[:4000], "runs": list(runs),
                              "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}}
        held.fence()
        store.write_atomic(th.given_up_marker, json.dumps(moved).encode())
        held.fence()
        store.delete(th.marker)
        return True


def given_up_why(marker: dict | None) -> str:
    """What `give_up_pending` recorded on a marker moved aside."""
    given_up = (marker or {}).get("given_up")
    return str(given_up.get("why") or "given up") if isinstance(given_up, dict) else "given up"


def clear_pending(store: LandingStore, done_file_rel_path: str, sha: str | None) -> bool:
    """Remove the marker only if it still names content `sha` (None: an unreadable marker):
    False if absent or naming newer content, which then stays pending. Called once the
    hour's done file holds content that is loaded (or is gone), which also settles a load
    given up on (`give_up_pending`), whatever content it named (a person fixed the done file
    and materialised the hour): that goes too. True if a marker was removed."""
    th = parse_done_path(done_file_rel_path)
    removed = False
    with store.lock(pending_lock_path(th.dataset, th.table)) as held:
        current = _marker_sha(store, th)
        if current is not _MISSING and current == sha:
            held.fence()
            store.delete(th.marker)
            removed = True
        if store.exists(th.given_up_marker):
            held.fence()
            store.delete(th.given_up_marker)
            removed = True
    return removed


def subfolders(store: LandingStore, rel_dir: str) -> list[str]:
    """The folders under `rel_dir`, but not those starting with "_" (`_given_up`, `_loads`)."""
    return [n for n in store.subdirs(rel_dir) if not n.startswith("_")]


def list_pending(store: LandingStore, only_dataset: str | None = None, only_table: str | None = None,
                 given_up: bool = False) -> list[TableHour]:
    """Every (table, hour) with a marker (of one table if given), oldest hour first. Costs O(markers).
    `given_up`: the markers moved aside instead (`give_up_pending`)."""
    out = []
    for dataset in [only_dataset] if only_dataset else subfolders(store, pending_dir(given_up)):
        if not IDENTIFIER.match(dataset):
            continue  # not a folder the hand-off wrote
        for table in [only_table] if only_table else subfolders(store, pending_dir(given_up, dataset)):
            if not IDENTIFIER.match(table):
                continue
            for rel in store.list(pending_dir(given_up, dataset, table), "hour=*.json"):
                if hour := hour_folder_tag(rel.rsplit("/", 1)[-1]):
                    out.append(TableHour(hour, dataset, table))
    return sorted(out)


def landed_hours(store: LandingStore, dataset: str, table: str) -> list[str]:
    """Hour tags of (dataset, table) that have a done file, oldest first."""
    return sorted(hour_folder_tag(rel.rsplit("/", 2)[-2]) for rel in store.glob(done_file_glob(dataset, table)))


def listed_tables(store: LandingStore) -> list[tuple[str, str]]:
    """(dataset, table) folders under tables/: cheap, to warn about unconfigured ones."""
    return [(d, t) for d in subfolders(store, TABLES_DIR) for t in subfolders(store, dataset_dir(d))]
