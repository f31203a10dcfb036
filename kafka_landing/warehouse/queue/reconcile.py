"""Done files nobody marked, and hours behind: what the queue finds without a marker.

Why: a done file's mtime says nothing about whether it was loaded (copies keep
old mtimes), and globbing every done file ever written on every tick grows
without bound. So done files written by other tools (no marker) are found by a
reconciliation (`reconcile`) that remembers which hours it checked, so a tick
reads only done files of hours it has not checked yet, and checks everything
again once a day (what changed in place without a marker).

Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from kafka_landing.handoff.manifests import content_sha, landed_hours
from kafka_landing.handoff.markers import TableHour, given_up, list_pending, mark_pending, marker_path, subfolders
from kafka_landing.naming import Hour, hour_folder_tag, last_closed_hour, table_dir
from kafka_landing.store.base import LandingStore


def _hours(store: LandingStore, dataset: str, table: str) -> list[Hour]:
    """The hours of the table's hour=<H> folders, oldest first."""
    return [h for n in subfolders(store, table_dir(dataset, table)) if (h := hour_folder_tag(n))]


# --- reconciliation: done files nobody marked -----------------------------------------
#
# A bucket tells a done file's name for the price of a listing (a page of names per call)
# but its content, or even its mtime (which copies may set back anyway), only for one call
# per object. So what reconciliation remembers is names: per table, the hours whose done
# file it has checked. Each call lists each table's hour folders and first reads the hours
# never checked (a new hour, or one whose folder had gone and came back, put there by
# another tool with whatever mtime). What changes in place without a marker (a copy over an
# existing hour, a publish that crashed between the done file and its marker, a warehouse
# that forgot its loads) has no cheaper sign: a table whose hours were all checked
# `RECONCILE_AGAIN_AFTER` ago has them read again, oldest first, with what budget the hours
# never checked leave.

RECONCILE_AGAIN_AFTER = 24 * 3600  # seconds
RECONCILE_PER_TICK = 10_000  # done files a sensor tick reads at most
RECONCILE_SECONDS = 15  # seconds from the start of a sensor tick the reconciliation may take


def _runs(numbers: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted inclusive runs of consecutive numbers: a table's hours are one run or a few."""
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return tuple((a, b) for a, b in out)


@dataclass(frozen=True)
class TableScan:
    since: float  # when the hours checked were last all read (seconds since the epoch)
    hours: tuple[tuple[int, int], ...] = ()  # runs of hour numbers (hours since the epoch) checked
    again: tuple[float, int] | None = None  # a reading again under way: (when it began, last hour read)

    def checked(self) -> set[int]:
        return {n for a, b in self.hours for n in range(a, b + 1)}


@dataclass(frozen=True)
class ScanPosition:
    """Where reconciliation stands (the sensor keeps it in its cursor): per "dataset.table",
    what was checked; and the table the next call starts with, so that tables take turns
    when a call runs out of budget."""

    table: str | None = None
    tables: Mapping[str, TableScan] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"next": self.table,
                "tables": {k: {"since": int(v.since), "hours": [list(r) for r in v.hours],
                               **({"again": [int(v.again[0]), v.again[1]]} if v.again else {})}
                           for k, v in sorted(self.tables.items())}}

    @classmethod
    def from_json(cls, raw: object) -> ScanPosition:
        """Anything unreadable (an older cursor) starts again: every done file is read once."""
        try:
            tables = {}
            for k, v in raw["tables"].items():
                again = (float(v["again"][0]), int(v["again"][1])) if v.get("again") else None
                tables[str(k)] = TableScan(float(v["since"]), tuple((int(a), int(b)) for a, b in v["hours"]), again)
            return cls(raw.get("next"), tables)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return cls()


class _Reads:
    """The done files one call reads: at most `budget` of them, until `clock()` passes `deadline`;
    each marked pending if its content is not loaded, not pending and not given up on."""

    def __init__(self, store: LandingStore, loaded_sha: Callable[[str, str, str], str | None], budget: int,
                 deadline: float | None, clock: Callable[[], float]):
        self.store, self.loaded_sha = store, loaded_sha
        self.budget, self.deadline, self.clock = budget, deadline, clock
        self.marked: list[TableHour] = []
        self.scanned = 0

    def spent(self) -> bool:
        return self.scanned >= self.budget or (self.deadline is not None and self.clock() >= self.deadline)

    def read(self, th: TableHour) -> bool:
        """Read the done file of `th`, and mark it if it is to load; False if there is none (yet)."""
        self.scanned += 1
        found = _reconcile_one(self.store, th, self.loaded_sha)
        if found:
            self.marked.append(th)
        return found is not None

    def outcome(self, position: ScanPosition) -> tuple[ScanPosition, list[TableHour], int]:
        """What `reconcile` returns, stopped at `position`."""
        return position, self.marked, self.scanned


def _reconcile_one(store: LandingStore, th: TableHour, loaded_sha: Callable[[str, str, str], str | None]
                   ) -> bool | None:
    """Mark the done file of `th` pending if its content is not loaded, not pending and not
    given up on. True if marked; None if there is no done file (yet)."""
    try:
        content = store.read_bytes(th.done_file)
    except FileNotFoundError:
        return None
    sha = content_sha(content)
    if loaded_sha(th.dataset, th.table, th.hour) == sha or store.exists(marker_path(th)):
        return False
    if (given_up(store, th) or {}).get("sha256") == sha:
        return False
    mark_pending(store, th.done_file, content)
    return True


def reconcile(
    store: LandingStore,
    tables: Sequence[tuple[str, str]],
    loaded_sha: Callable[[str, str, str], str | None],
    position: ScanPosition,
    budget: int,
    deadline: float | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[ScanPosition, list[TableHour], int]:
    """Read the done files of the configured `tables` that `position` says were never
    checked, then those due to be read again (`RECONCILE_AGAIN_AFTER`), at most `budget` of
    them and until `clock()` passes `deadline`; mark every one whose content is not the
    content loaded (`loaded_sha(dataset, table, hour)`) and that has no marker (pending, or
    given up on for that content). Returns (the new position, hours marked, done files read)."""
    tables = sorted(tables)
    names = [f"{d}.{t}" for d, t in tables]
    if not names:
        return ScanPosition(), [], 0
    start = names.index(position.table) if position.table in names else 0
    now = clock()
    scans = {k: v for k, v in position.tables.items() if k in names}
    reads = _Reads(store, loaded_sha, budget, deadline, clock)
    listed: dict[str, dict[int, Hour]] = {}

    # Hours never checked, each table in turn from where the last call ran out.
    for i in [*range(start, len(names)), *range(start)]:
        name, (dataset, table) = names[i], tables[i]
        if reads.spent():
            return reads.outcome(ScanPosition(name, scans))
        listed[name] = {h.number: h for h in _hours(store, dataset, table)}
        scans[name], stopped = _read_unchecked(reads, scans.get(name) or TableScan(now), listed[name], (dataset, table))
        if stopped:
            return reads.outcome(ScanPosition(name, scans))

    # Everything checked: a table whose hours were all read long enough ago has them read again.
    for name, (dataset, table) in zip(names, tables):
        scan = scans[name]
        if scan.again is None and now - scan.since < RECONCILE_AGAIN_AFTER:
            continue
        scans[name], stopped = _read_again(reads, scan, listed[name], (dataset, table), now)
        if stopped:
            return reads.outcome(ScanPosition(None, scans))
    return reads.outcome(ScanPosition(None, scans))


def _read_unchecked(reads: _Reads, scan: TableScan, hours: dict[int, Hour], key: tuple[str, str]
                    ) -> tuple[TableScan, bool]:
    """Read the table's `hours` never checked, oldest first, within the budget. Returns its scan
    then, and whether the budget stopped it."""
    checked = scan.checked() & hours.keys()  # a folder gone and back is new again
    stopped = False
    for n in sorted(hours.keys() - checked):
        if stopped := reads.spent():
            break
        if reads.read(TableHour(hours[n], *key)):
            checked.add(n)  # a folder without its done file (yet) is looked at again
    return TableScan(scan.since, _runs(checked), scan.again), stopped


def _read_again(reads: _Reads, scan: TableScan, hours: dict[int, Hour], key: tuple[str, str], now: float
                ) -> tuple[TableScan, bool]:
    """Read the table's checked `hours` again, oldest first, from where a reading again under way
    stopped, within the budget. Returns its scan then, and whether the budget stopped it."""
    began, last = scan.again or (now, -1)
    checked = scan.checked()
    for n in sorted(k for k in hours if k > last and k in checked):
        if reads.spent():
            return TableScan(scan.since, scan.hours, (began, last)), True
        reads.read(TableHour(hours[n], *key))
        last = n
    return TableScan(began, scan.hours), False


# --- hours behind ----------------------------------------------------------------

@dataclass(frozen=True)
class Behind:
    first_landed_hour: Hour | None  # the first landed (or loaded) hour: where counting starts
    last_closed_hour: Hour | None
    missing: tuple[Hour, ...]  # closed hours from first_landed_hour on with nothing loaded, oldest first
    pending: int = 0  # hours waiting for a (re)load: marked, not given up

    @property
    def hours(self) -> int:
        return len(self.missing)


def hours_behind(landed: Iterable[Hour], loaded: Iterable[Hour], now: datetime, grace_minutes: int) -> Behind:
    """Closed hours not loaded, counted from the table's first landed or loaded hour: hours
    before a table's first data are not "behind" (a new table, or a partitions start that
    predates the topic), every closed hour after it is, landed or not."""
    loaded = set(loaded)
    known = set(landed) | loaded
    last = Hour(last_closed_hour(now, grace_minutes))
    if not known:
        return Behind(None, last, ())
    first = Hour(min(known))
    missing = [h for h in (first.plus(n) for n in range(last.number - first.number + 1)) if h not in loaded]
    return Behind(first, last, tuple(missing))


def table_behind(store: LandingStore, loaded: Iterable[Hour], dataset: str, table: str, now: datetime,
                 grace_minutes: int) -> Behind:
    """`hours_behind` of one table, from its done files' listing, with its pending loads counted
    (two listings, no read)."""
    behind = hours_behind(landed_hours(store, dataset, table), loaded, now, grace_minutes)
    return replace(behind, pending=len(list_pending(store, dataset, table)))


