"""Warehouse loads waiting to happen, kept small so the done-file sensor's tick
costs the same with a day or with years of hours on disk.

Why: a done file's mtime says nothing about whether it was loaded (copies keep
old mtimes), a load can fail, and globbing every done file ever written on
every tick grows without bound. So:

- Landing leaves a marker per (table, hour) it published, naming the done
  file's content hash; a load removes it only if it still names what was
  loaded (`handoff`: markers, compare-and-delete, refusals, moving aside).
- The warehouse records what it loaded per (table, hour): the done file's
  content hash (`Warehouse.loaded`, per backend).
- The sensor lists the markers, not the done files, and asks the Dagster
  instance which loads ran (`decide`): none -> request; one in flight -> wait;
  all finished and the content still not loaded -> request again under a new
  run key, at most `MAX_ATTEMPTS` times, then give up (below).
- What is ready is grouped (`plan_loads`): one run per table covers a run of
  consecutive ready hours at the same attempt (at most `MAX_HOURS_PER_RUN`),
  so a backfill costs a few runs, not one per hour. Each run names the loads
  it covers in its tags (`member_tag`), one tag per hour, so the sensor finds
  every run that covered a load with one indexed tag query per hour of the
  week, however the loads were grouped then (`covering_runs`).
- A load nobody will ask for again (its attempts used up, refused for good,
  or a done file contradicting its path) is moved aside
  (`handoff.give_up_pending`), so it no longer takes a place among the
  markers examined per tick.
- Done files written by other tools (no marker) are found by a reconciliation
  (`reconcile`) that remembers which hours it checked, so a tick reads only
  done files of hours it has not checked yet, and checks everything again once
  a day (what changed in place without a marker).

Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kafka_landing.handoff import TableHour, content_sha, mark_pending, read_marker, subfolders
from kafka_landing.naming import (
    HOUR_TAG_FORMAT,
    ONE_HOUR,
    hour_folder_tag,
    hour_from_tag,
    hour_tag,
    last_closed_hour,
    table_dir,
)
from kafka_landing.store.base import LandingStore

MAX_ATTEMPTS = 3
# Run statuses (Dagster's names) after which a run will not change anything any more.
FINISHED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})


def _hour_tags(store: LandingStore, dataset: str, table: str) -> list[str]:
    """The hour tags of the table's hour=<H> folders, oldest first."""
    return [h for n in subfolders(store, table_dir(dataset, table)) if (h := hour_folder_tag(n))]


# --- run keys and what to do with a pending load -----------------------------------

def run_key(done_file: str, sha: str, attempt: int = 1) -> str:
    """The first attempt keeps the key format of earlier versions (path@hash), so a sensor
    upgraded in place does not reload what it already requested."""
    base = f"{done_file}@{sha[:16]}"
    return base if attempt == 1 else f"{base}#attempt{attempt}"


def attempt_keys(done_file: str, sha: str, max_attempts: int = MAX_ATTEMPTS) -> list[str]:
    return [run_key(done_file, sha, a) for a in range(1, max_attempts + 1)]


@dataclass(frozen=True)
class Decision:
    action: str  # "request", "wait" (a run is in flight) or "give_up" (every attempt finished, not loaded)
    attempt: int  # the attempt to request, or the last one made
    run_key: str | None
    runs: tuple[tuple[str, str], ...]  # (run key, status) of the runs seen for this content


def decide(done_file: str, sha: str, statuses: Mapping[str, Sequence[str]], max_attempts: int = MAX_ATTEMPTS
           ) -> Decision:
    """What to do with content `sha` of `done_file`, known not to be loaded, given the
    statuses of the runs per run key. A run key is never requested twice (Dagster would
    drop it), so a retry is a new key; the retries are bounded, and never silent."""
    keys = attempt_keys(done_file, sha, max_attempts)
    seen = tuple((k, s) for k in keys for s in statuses.get(k, ()))
    used = max((i for i, k in enumerate(keys, 1) if statuses.get(k)), default=0)
    if any(s not in FINISHED for _, s in seen):
        return Decision("wait", used, None, seen)
    if used < max_attempts:
        return Decision("request", used + 1, keys[used], seen)
    return Decision("give_up", used, None, seen)


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


def _hour_number(tag: str) -> int:
    return int(hour_from_tag(tag).timestamp()) // 3600


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


def _reconcile_one(store: LandingStore, th: TableHour, loaded_sha: Callable[[str, str, str], str | None]
                   ) -> bool | None:
    """Mark the done file of `th` pending if its content is not loaded, not pending and not
    given up on. True if marked; None if there is no done file (yet)."""
    try:
        content = store.read_bytes(th.done_file)
    except FileNotFoundError:
        return None
    sha = content_sha(content)
    if loaded_sha(th.dataset, th.table, th.hour) == sha or store.exists(th.marker):
        return False
    if (read_marker(store, th, given_up=True) or {}).get("sha256") == sha:
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
    again_after: float = RECONCILE_AGAIN_AFTER,
) -> tuple[ScanPosition, list[TableHour], int]:
    """Read the done files of the configured `tables` that `position` says were never
    checked, then those due to be read again, at most `budget` of them and until `clock()`
    passes `deadline`; mark every one whose content is not the content loaded
    (`loaded_sha(dataset, table, hour)`) and that has no marker (pending, or given up on for
    that content). Returns (the new position, hours marked, done files read)."""
    tables = sorted(tables)
    names = [f"{d}.{t}" for d, t in tables]
    if not names:
        return ScanPosition(), [], 0
    start = names.index(position.table) if position.table in names else 0
    now = clock()
    scans = {k: v for k, v in position.tables.items() if k in names}
    listed: dict[str, dict[int, str]] = {}
    marked, scanned = [], 0

    def out_of_budget() -> bool:
        return scanned >= budget or (deadline is not None and clock() >= deadline)

    def read(th: TableHour) -> bool:
        nonlocal scanned
        scanned += 1
        found = _reconcile_one(store, th, loaded_sha)
        if found:
            marked.append(th)
        return found is not None

    # Hours never checked, each table in turn from where the last call ran out.
    for i in [*range(start, len(names)), *range(start)]:
        name, (dataset, table) = names[i], tables[i]
        if out_of_budget():
            return ScanPosition(name, scans), marked, scanned
        scan = scans.get(name) or TableScan(now)
        listed[name] = {_hour_number(h): h for h in _hour_tags(store, dataset, table)}
        checked = scan.checked() & listed[name].keys()  # a folder gone and back is new again
        stopped = False
        for n in sorted(listed[name].keys() - checked):
            if stopped := out_of_budget():
                break
            if read(TableHour(listed[name][n], dataset, table)):
                checked.add(n)  # a folder without its done file (yet) is looked at again
        scans[name] = TableScan(scan.since, _runs(checked), scan.again)
        if stopped:
            return ScanPosition(name, scans), marked, scanned

    # Everything checked: a table whose hours were all read long enough ago has them read again.
    for name, (dataset, table) in zip(names, tables):
        scan = scans[name]
        if scan.again is None and now - scan.since < again_after:
            continue
        began, last = scan.again or (now, -1)
        checked = scan.checked()
        for n in sorted(k for k in listed[name] if k > last and k in checked):
            if out_of_budget():
                scans[name] = TableScan(scan.since, scan.hours, (began, last))
                return ScanPosition(None, scans), marked, scanned
            read(TableHour(listed[name][n], dataset, table))
            last = n
        scans[name] = TableScan(began, scan.hours)
    return ScanPosition(None, scans), marked, scanned


# --- hours behind ----------------------------------------------------------------

@dataclass(frozen=True)
class Behind:
    first_landed_hour: str | None  # the first landed (or loaded) hour: where counting starts
    last_closed_hour: str | None
    missing: tuple[str, ...]  # closed hours from first_landed_hour on with nothing loaded, oldest first

    @property
    def hours(self) -> int:
        return len(self.missing)


def hours_behind(landed: Iterable[str], loaded: Iterable[str], now: datetime, grace_minutes: int) -> Behind:
    """Closed hours not loaded, counted from the table's first landed or loaded hour: hours
    before a table's first data are not "behind" (a new table, or a partitions start that
    predates the topic), every closed hour after it is, landed or not."""
    loaded = set(loaded)
    known = set(landed) | loaded
    last = last_closed_hour(now, grace_minutes)
    if not known:
        return Behind(None, hour_tag(last), ())
    first = min(known)
    missing = []
    h = hour_from_tag(first)
    while h <= last:
        tag = h.strftime(HOUR_TAG_FORMAT)
        if tag not in loaded:
            missing.append(tag)
        h += ONE_HOUR
    return Behind(first, hour_tag(last), tuple(missing))


# --- loads grouped into runs ---------------------------------------------------------
#
# A load ("member") is one done file's content: (table, hour, sha). A run covers a run of
# consecutive hours of one table; its tags name every member, under the member's hour of
# the week, so no two members of a run (at most 168 consecutive hours) share a tag key,
# and the runs that covered a member are found by the tag (key = its hour of the week,
# value = hour@sha16): one indexed query per hour of the week among the pending loads,
# whatever the history. Runs of earlier versions (one per hour, no member tags) are
# found by their run keys (`attempt_keys`).
#
# Attempts are per member, numbered by the runs that covered it (`decide` over the
# `kafka_landing/load_attempt` tag of each). A run groups members at the same attempt,
# so its attempt number is each member's; the last attempt is taken alone, so one hour
# that brings a whole run down (a killed worker) cannot use up its neighbours' attempts.

MAX_HOURS_PER_RUN = 168  # one week: also what makes hour-of-the-week tag keys unique within a run
MEMBER_TAG_PREFIX = "kafka_landing/load."
ATTEMPT_TAG = "kafka_landing/load_attempt"
TABLE_TAG = "kafka_landing/table"
RUN_KEY_TAG = "dagster/run_key"
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_ATTEMPT_SUFFIX = re.compile(r"#attempt(\d+)$")


def member_tag(hour: str) -> str:
    """The run tag key a member of `hour` (an hour tag) is named under: its hour of the week,
    e.g. `kafka_landing/load.Fri13`. Distinct for any 168 consecutive hours."""
    h = hour_from_tag(hour)
    return f"{MEMBER_TAG_PREFIX}{_WEEKDAYS[h.weekday()]}{h.hour:02d}"


@dataclass(frozen=True, order=True)
class PendingLoad:
    """One done file's content, known not to be loaded: a member of at most one run."""

    th: TableHour
    sha: str

    @property
    def key(self) -> str:
        """`<done file>@<sha16>`: the member's identity, and its run key when requested alone."""
        return run_key(self.th.done_file, self.sha)

    @property
    def tag(self) -> tuple[str, str]:
        """(key, value) of the run tag naming this member: hour of the week -> `<hour>@<sha16>`
        (the content hash tells tables apart: a done file names its dataset and table)."""
        return member_tag(self.th.hour), f"{self.th.hour}@{self.sha[:16]}"


@dataclass(frozen=True)
class SeenRun:
    """A run on the instance, as much as the sensor needs of it."""

    run_id: str
    status: str  # Dagster's run status name
    tags: Mapping[str, str]

    @property
    def attempt(self) -> int:
        """The attempt the run made: its attempt tag, else its run key's suffix, else 1."""
        raw = self.tags.get(ATTEMPT_TAG, "")
        if raw.isdigit() and int(raw) > 0:
            return int(raw)
        m = _ATTEMPT_SUFFIX.search(self.tags.get(RUN_KEY_TAG, ""))
        return int(m.group(1)) if m else 1


def covering_runs(loads: Iterable[PendingLoad], runs: Iterable[SeenRun], max_attempts: int = MAX_ATTEMPTS
                  ) -> dict[PendingLoad, tuple[SeenRun, ...]]:
    """The runs that covered each load: named by its member tag, or (one hour per run, as
    earlier versions requested) carrying one of its attempt keys as run key. Each run once."""
    loads = list(loads)
    by_tag = {ld.tag: ld for ld in loads}
    by_key = {k: ld for ld in loads for k in attempt_keys(ld.th.done_file, ld.sha, max_attempts)}
    found: dict[PendingLoad, dict[str, SeenRun]] = {ld: {} for ld in loads}
    for run in runs:
        hit = {by_tag[(k, v)] for k, v in run.tags.items() if k.startswith(MEMBER_TAG_PREFIX) and (k, v) in by_tag}
        if run.tags.get(RUN_KEY_TAG) in by_key:
            hit.add(by_key[run.tags[RUN_KEY_TAG]])
        for ld in hit:
            found[ld][run.run_id] = run
    return {ld: tuple(sorted(rs.values(), key=lambda r: (r.attempt, r.run_id))) for ld, rs in found.items()}


def _decision(ld: PendingLoad, runs: Sequence[SeenRun], max_attempts: int) -> Decision:
    """`decide` for one member, its runs placed under the attempt keys by the attempt they made."""
    keys = attempt_keys(ld.th.done_file, ld.sha, max_attempts)
    statuses: dict[str, list[str]] = {}
    for run in runs:
        statuses.setdefault(keys[min(run.attempt, max_attempts) - 1], []).append(run.status)
    return decide(ld.th.done_file, ld.sha, statuses, max_attempts)


@dataclass(frozen=True)
class LoadGroup:
    """One run to request: consecutive hours of one table, every member at the same attempt."""

    loads: tuple[PendingLoad, ...]  # oldest first
    attempt: int

    @property
    def dataset(self) -> str:
        return self.loads[0].th.dataset

    @property
    def table(self) -> str:
        return self.loads[0].th.table

    @property
    def name(self) -> str:
        return self.loads[0].th.name

    @property
    def hours(self) -> list[str]:
        return [ld.th.hour for ld in self.loads]

    @property
    def run_key(self) -> str:
        """Alone: the single load's key (`<done file>@<sha16>[#attempt<n>]`, as earlier versions).
        Grouped: `tables/<dataset>/<table>/hours=<first>..<last>@<hash of the members' keys>[#attempt<n>]`.
        A run key is launched once: a retry is a later attempt, so a new key."""
        if len(self.loads) == 1:
            ld = self.loads[0]
            return run_key(ld.th.done_file, ld.sha, self.attempt)
        digest = hashlib.sha256("\n".join(ld.key for ld in self.loads).encode()).hexdigest()[:16]
        base = f"{table_dir(self.dataset, self.table)}/hours={self.loads[0].th.hour}..{self.loads[-1].th.hour}@{digest}"
        return base if self.attempt == 1 else f"{base}#attempt{self.attempt}"

    def tags(self) -> dict[str, str]:
        """What the run carries so a later tick knows what it covered (and people, what it loads)."""
        tags = {TABLE_TAG: self.name, ATTEMPT_TAG: str(self.attempt), **dict(ld.tag for ld in self.loads)}
        if len(self.loads) == 1:
            tags.update({"kafka_landing/done_file": self.loads[0].th.done_file,
                         "kafka_landing/done_sha256": self.loads[0].sha})
        return tags


@dataclass(frozen=True)
class LoadPlan:
    groups: tuple[LoadGroup, ...]  # oldest first hour first
    waiting: tuple[PendingLoad, ...]  # a run covering it is in flight
    given_up: tuple[tuple[PendingLoad, tuple[SeenRun, ...]], ...]  # every attempt finished, not loaded


def plan_loads(loads: Iterable[PendingLoad], runs: Mapping[PendingLoad, Sequence[SeenRun]],
               max_hours: int = MAX_HOURS_PER_RUN, max_attempts: int = MAX_ATTEMPTS) -> LoadPlan:
    """Group the loads not loaded into runs, given the runs that covered each (`covering_runs`).

    A load with a covering run in flight waits; one whose attempts are used up is given up;
    the others are ready at their next attempt. A group is a maximal run of consecutive
    hours of one table ready at the same attempt, cut every `max_hours`; a last attempt
    (when retries exist) is requested alone. Deterministic: the same state gives the same
    groups and keys, so a duplicate tick asks for the runs Dagster already has."""
    if not 1 <= max_hours <= MAX_HOURS_PER_RUN:
        raise ValueError(f"max_hours={max_hours}: a run covers 1 to {MAX_HOURS_PER_RUN} hours "
                         "(its member tags are keyed by the hour of the week)")
    ready: list[tuple[PendingLoad, int]] = []
    waiting, given_up = [], []
    for ld in sorted(set(loads), key=lambda x: (x.th.dataset, x.th.table, x.th.hour, x.sha)):
        seen = tuple(runs.get(ld, ()))
        d = _decision(ld, seen, max_attempts)
        if d.action == "wait":
            waiting.append(ld)
        elif d.action == "give_up":
            given_up.append((ld, seen))
        else:
            ready.append((ld, d.attempt))
    groups: list[LoadGroup] = []
    current: list[PendingLoad] = []
    attempt = 0
    for ld, a in ready:
        alone = 1 < max_attempts == a
        prev = current[-1].th if current else None
        joins = (prev is not None and not alone and a == attempt and len(current) < max_hours
                 and (prev.dataset, prev.table) == (ld.th.dataset, ld.th.table)
                 and hour_from_tag(ld.th.hour) - hour_from_tag(prev.hour) == ONE_HOUR)
        if joins:
            current.append(ld)
            continue
        if current:
            groups.append(LoadGroup(tuple(current), attempt))
        current, attempt = [ld], a
        if alone:
            groups.append(LoadGroup(tuple(current), attempt))
            current = []
    if current:
        groups.append(LoadGroup(tuple(current), attempt))
    groups.sort(key=lambda g: (g.loads[0].th.hour, g.name, g.attempt))
    return LoadPlan(tuple(groups), tuple(waiting), tuple(given_up))
