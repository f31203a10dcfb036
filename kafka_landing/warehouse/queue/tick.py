"""One queue tick, for every kind of unit that waits to be loaded: the loop the three sensors share.

A tick must end within Dagster's sensor timeout (60 s) on a bucket answering in tens of
milliseconds per call, whatever the history, so it works against a deadline that counts
from its start, listings included, and what does not fit goes on at the next tick, from
where this one stopped (`Cursor`):

1. List the marked units of the kind (listings only: no marker is read to list them).
   A unit the kind does not take (a table in no config, an hour that is not a partition)
   is set aside by name, for one warning per table.
2. Examine units, tables taking turns from where the last tick stopped, until the deadline:
   read what the unit's markers name, and decide (`Kind.examine`):
   - loaded already -> clear its markers;
   - gone (its done file removed) -> clear them, and say so;
   - refused for good, or its done file contradicts its path -> move it aside: asking again
     cannot help until a landing hour marks it anew;
   - refused until a time (a spent quota) -> nothing until then, then a new round of attempts;
   - otherwise it is a load to make (a `PendingLoad`).
3. Ask the instance for the runs that covered those loads (one callable: the sensor's) and
   plan (`runs.plan_loads`): wait for a run in flight, move aside a load whose attempts are
   used up, group the rest into runs.
4. Move aside what step 2 and 3 gave up on, within the same deadline.

The result (`TickPlan`) is plain data; a sensor only turns it into run requests and log
lines. No Dagster, no Spark: its only I/O is the landing store's (listings, done files, and
the markers steps 2 and 4 clear or move aside).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import zip_longest

from kafka_landing.handoff import markers
from kafka_landing.handoff.manifests import DoneFileError, read_done_file
from kafka_landing.handoff.markers import Marks, Refusal
from kafka_landing.handoff.units import EVENT, HOUR, LoadUnit
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.queue.runs import (
    MAX_ATTEMPTS,
    LoadGroup,
    LoadPlan,
    PendingLoad,
    SeenRun,
    covering_runs,
    plan_loads,
)

# Seconds from the start of a tick until which each step may go on (Dagster gives a tick 60 s).
EXAMINE_SECONDS = 35
TICK_SECONDS = 45  # moving loads aside stops there; what is left is moved on the next tick
MAX_EXAMINED_PER_TICK = 2000
MAX_REQUESTS_PER_TICK = 200  # runs (a landing-hour run covers up to MAX_HOURS_PER_RUN hours)


# --- what a kind decides about one unit ----------------------------------------------

@dataclass(frozen=True)
class Load:
    load: PendingLoad
    seen: Marks


@dataclass(frozen=True)
class Clear:
    seen: Marks
    gone: bool = False  # its done file is gone: nothing to load


@dataclass(frozen=True)
class Aside:
    why: str
    reason: str  # "refused", "invalid", "attempts"
    seen: Marks
    sha: str
    runs: tuple[str, ...] = ()  # the runs that tried it (attempts used up)


@dataclass(frozen=True)
class Skip:
    why: str = ""  # looked at again next tick (a refusal that heals later, a marker cleared meanwhile)
    refused: bool = False


Examined = Load | Clear | Aside | Skip


class Kind:
    """What one kind of unit does in the shared loop: which units it takes, and what it makes of
    one. Subclasses: `LandingHours`, `RetiredHours`, `EventPartitions`."""

    kind: str = HOUR
    moves_aside_refused = True  # a refused unit is moved out of the examined ones

    def takes_table(self, dataset: str, table: str) -> bool:
        return True

    def listed_tables(self) -> Iterable[tuple[str, str]] | None:
        """The tables whose markers to list; None: every table's (filtered by `takes_table`)."""
        return None

    def takes(self, unit: LoadUnit) -> str | None:
        """None if the unit is this kind's to load; otherwise why not (warned once per table)."""
        return None

    def examine(self, store: LandingStore, unit: LoadUnit, now: datetime) -> Examined:
        raise NotImplementedError


def _round(refused: Refusal | None, now: datetime) -> str | None:
    """None while a refusal holds; "" with none; its time once a refusal that heals has healed
    (a new round of attempts, under new run keys)."""
    if refused is None:
        return ""
    if refused.holds(now):
        return None
    return refused.heals_at.replace("-", "").replace(":", "")[:13] if refused.heals_at else ""


class LandingHours(Kind):
    """Landing hours of the configured tables: load each done file's content once."""

    def __init__(self, tables: Iterable[tuple[str, str]], is_partition: Callable[[LoadUnit], bool],
                 loaded_sha: Callable[[str, str, str], str | None]):
        self.tables = frozenset(tables)
        self.is_partition = is_partition
        self.loaded_sha = loaded_sha

    def takes_table(self, dataset: str, table: str) -> bool:
        return (dataset, table) in self.tables

    def takes(self, unit: LoadUnit) -> str | None:
        return None if self.is_partition(unit) else "not a partition"

    def wants(self, done) -> str | None:
        return None

    def examine(self, store: LandingStore, unit: LoadUnit, now: datetime) -> Examined:
        marker = markers.read_marker(store, unit)  # before the done file: a marker written after it is newer
        if marker is None:
            return Skip()  # loaded since the listing
        seen = Marks({unit.partition: marker.get("sha256") if isinstance(marker.get("sha256"), str) else None})
        try:
            done, sha = read_done_file(store, unit.done_file)
        except DoneFileError as exc:
            if exc.gone:
                return Clear(seen, gone=True)
            if exc.transient:
                return Skip(str(exc))
            content = _bytes_or_none(store, unit.done_file)
            return Aside("; ".join(exc.problems) or str(exc), "invalid", seen,
                         markers.content_sha(content) if content is not None else "")
        if (why := self.wants(done)) is not None:
            return Skip(why)
        if self.loaded_sha(unit.dataset, unit.table, unit.partition) == sha:
            return Clear(seen)  # loaded; the marker outlived it (compare-and-delete keeps a newer one)
        refused = markers.refusal(store, unit, Marks({unit.partition: sha}), marker)
        rnd = _round(refused, now)
        if rnd is None:
            if refused.heals_at:
                return Skip(f"refused until {refused.heals_at}: {refused.why[:300]}", refused=True)
            return Aside(f"its last load failed for good ({refused.why[:500]})", "refused", seen, sha)
        return Load(PendingLoad(unit, sha, rnd), seen)


class RetiredHours(LandingHours):
    """Retired landing hours of tables in no topic's config: load them as empty hours."""

    def __init__(self, configured: Iterable[tuple[str, str]], loaded_sha: Callable[[str, str, str], str | None]):
        super().__init__((), lambda u: True, loaded_sha)
        self.configured = frozenset(configured)

    def takes_table(self, dataset: str, table: str) -> bool:
        return (dataset, table) not in self.configured

    def wants(self, done) -> str | None:
        return None if done.retired else "not retired: the done-file sensor names the table"


class EventPartitions(Kind):
    """Event partitions of the configured event-time tables (or, `retired`, of every other table: a
    routing change left them holding records the topic now lands elsewhere): version and load each
    marker set once."""

    kind = EVENT
    moves_aside_refused = False  # its markers stay (its versioning reads them); the refusal says it all

    def __init__(self, tables: Iterable[tuple[str, str]], retired: bool = False):
        self.tables = frozenset(tables)
        self.retired = retired

    def takes_table(self, dataset: str, table: str) -> bool:
        return ((dataset, table) in self.tables) != self.retired

    def listed_tables(self) -> Iterable[tuple[str, str]] | None:
        return None if self.retired else sorted(self.tables)

    def examine(self, store: LandingStore, unit: LoadUnit, now: datetime) -> Examined:
        seen = markers.marks_of(store, unit)
        if not seen:
            return Skip()
        sha = markers.identity(unit, seen)
        refused = markers.refusal(store, unit, seen)
        rnd = _round(refused, now)
        if rnd is None:
            return Skip(f"{unit}: {refused.why[:300]}", refused=True)
        return Load(PendingLoad(unit, sha, rnd), seen)


def _bytes_or_none(store: LandingStore, rel: str) -> bytes | None:
    try:
        return store.read_bytes(rel)
    except FileNotFoundError:
        return None


# --- the tick -------------------------------------------------------------------------

@dataclass(frozen=True)
class Cursor:
    """Where the last tick stopped examining: the next one starts after it, so no unit waits for
    the ones before it to leave the queue."""

    after: str | None = None  # the last unit examined, as `_order_key`

    def to_json(self) -> dict:
        return {"after": self.after}

    @classmethod
    def from_json(cls, raw: object) -> Cursor:
        return cls(raw.get("after")) if isinstance(raw, dict) and isinstance(raw.get("after"), str) else cls()


@dataclass
class TickPlan:
    groups: list[LoadGroup] = field(default_factory=list)  # runs to request, oldest first
    waiting: int = 0  # loads with a run in flight
    moved: list[tuple[LoadUnit, str, str]] = field(default_factory=list)  # (unit, reason, why) moved aside now
    refused: list[tuple[LoadUnit, str]] = field(default_factory=list)  # skipped: refused (for good or until a time)
    given_up: dict[str, list[LoadUnit]] = field(default_factory=dict)  # table -> units given up on (all of them)
    given_up_why: dict[str, tuple[LoadUnit, str]] = field(default_factory=dict)  # table -> one of them, and why
    not_taken: dict[str, list[tuple[LoadUnit, str]]] = field(default_factory=dict)  # table -> (unit, why)
    gone: dict[str, list[LoadUnit]] = field(default_factory=dict)  # table -> units whose done file is gone
    listed: list[LoadUnit] = field(default_factory=list)  # every marked unit of the kind taken
    examined: int = 0
    candidates: int = 0
    left_to_move: int = 0
    more_ready: int = 0  # groups beyond MAX_REQUESTS_PER_TICK, for the next tick
    cursor: Cursor = field(default_factory=Cursor)
    stopped_early: bool = False


def _order_key(unit: LoadUnit) -> str:
    return f"{unit.dataset}/{unit.table}/{unit.partition}"


def _taking_turns(units: list[LoadUnit], after: str | None) -> list[LoadUnit]:
    """Each table's oldest first, one of each table in turn, starting after `after` (the last unit
    the previous tick examined) and wrapping round: a table with thousands of pending units leaves
    the others their share, and a tick that runs out of time does not start over at the front."""
    by_table: dict[tuple[str, str], list[LoadUnit]] = {}
    for u in units:
        by_table.setdefault((u.dataset, u.table), []).append(u)
    turns = zip_longest(*(sorted(v) for _, v in sorted(by_table.items())))
    order = [u for turn in turns for u in turn if u is not None]
    if after is None:
        return order
    at = next((i for i, u in enumerate(order) if _order_key(u) == after), None)
    return order if at is None else order[at + 1:] + order[:at + 1]


@dataclass(frozen=True)
class _Times:
    """The tick's time: seconds on `clock` from `started` (its start, listings included), for the
    deadlines of its steps; and `now`, what refusals are read against."""

    started: float
    clock: Callable[[], float]
    now: datetime

    def past(self, seconds: float) -> bool:
        return self.clock() >= self.started + seconds


def tick(store: LandingStore, kind: Kind, runs_of: Callable[[Sequence[PendingLoad]], Iterable[SeenRun]],
         cursor: Cursor = Cursor(), *, started: float | None = None, clock: Callable[[], float] = time.time,
         now: datetime | None = None) -> TickPlan:
    """One tick of the queue for `kind`: the four steps of the module docstring, in turn, against one
    clock. `runs_of(loads)` answers the runs that covered any of `loads` (the sensor asks the Dagster
    instance)."""
    times = _Times(clock() if started is None else started, clock, now or datetime.now(timezone.utc))
    plan = TickPlan(cursor=cursor)
    candidates = _list(store, kind, plan)
    loads, aside = _examine(store, kind, candidates, plan, times)
    planned = _plan_runs(loads, runs_of, plan)
    _move_aside(store, kind, [*aside, *_attempts_used_up(loads, planned)], plan, times)
    _name_why_given_up(store, plan)
    plan.groups = list(planned.groups[:MAX_REQUESTS_PER_TICK])
    plan.more_ready = max(0, len(planned.groups) - MAX_REQUESTS_PER_TICK)
    return plan


def _list(store: LandingStore, kind: Kind, plan: TickPlan) -> list[LoadUnit]:
    """Step 1: the marked units of the kind (listings only), each given up on or not taken noted in
    `plan`; returns the others, the candidates to examine."""
    tables = kind.listed_tables()
    listed = markers.list_units(store, kind.kind, tables, keep=kind.takes_table)  # no listing of another's tables
    given_up = {u for u in markers.list_units(store, kind.kind, tables, given_up=True, keep=kind.takes_table)}
    candidates = []
    for u in listed:
        if not kind.takes_table(u.dataset, u.table):
            continue
        plan.listed.append(u)
        if u in given_up:
            continue  # an EVENT unit keeps its markers beside its given-up record
        if (why := kind.takes(u)) is not None:
            plan.not_taken.setdefault(u.name, []).append((u, why))
            continue
        candidates.append(u)
    for u in sorted(given_up):
        if kind.takes_table(u.dataset, u.table):
            plan.given_up.setdefault(u.name, []).append(u)
    plan.candidates = len(candidates)
    return candidates


def _examine(store: LandingStore, kind: Kind, candidates: list[LoadUnit], plan: TickPlan, times: _Times
             ) -> tuple[list[Load], list[tuple[LoadUnit, Aside]]]:
    """Step 2: examine the candidates, tables taking turns from the cursor, until the deadline; clear
    the markers of what is loaded or gone. Returns the loads to make and what to move aside."""
    loads: list[Load] = []
    aside: list[tuple[LoadUnit, Aside]] = []
    last = plan.cursor.after
    for u in _taking_turns(candidates, plan.cursor.after):
        if plan.examined >= MAX_EXAMINED_PER_TICK or times.past(EXAMINE_SECONDS):
            plan.stopped_early = True
            break
        plan.examined += 1
        last = _order_key(u)
        got = kind.examine(store, u, times.now)
        if isinstance(got, Load):
            loads.append(got)
        elif isinstance(got, Clear):
            markers.clear(store, u, got.seen)
            if got.gone:
                plan.gone.setdefault(u.name, []).append(u)
        elif isinstance(got, Aside):
            aside.append((u, got))
        elif got.refused:
            plan.refused.append((u, got.why))
    plan.cursor = Cursor(last if plan.stopped_early else None)
    return loads, aside


def _plan_runs(loads: list[Load], runs_of: Callable[[Sequence[PendingLoad]], Iterable[SeenRun]], plan: TickPlan
               ) -> LoadPlan:
    """Step 3: the runs that covered the loads, and what that makes of each (`runs.plan_loads`)."""
    pending = [ld.load for ld in loads]
    planned = plan_loads(pending, covering_runs(pending, runs_of(pending), MAX_ATTEMPTS), max_attempts=MAX_ATTEMPTS)
    plan.waiting = len(planned.waiting)
    return planned


def _attempts_used_up(loads: list[Load], planned: LoadPlan) -> list[tuple[LoadUnit, Aside]]:
    """The loads step 3 gave up on, to move aside with the runs that tried them."""
    seen_of = {ld.load: ld.seen for ld in loads}
    aside = []
    for ld, seen_runs in planned.given_up:
        ids = [r.run_id for r in seen_runs]
        aside.append((ld.unit, Aside(f"finished {MAX_ATTEMPTS} times without loading it (runs {ids})", "attempts",
                                     seen_of[ld], ld.sha, tuple(ids))))
    return aside


def _move_aside(store: LandingStore, kind: Kind, aside: list[tuple[LoadUnit, Aside]], plan: TickPlan,
                times: _Times) -> None:
    """Step 4: move aside what steps 2 and 3 gave up on, until the tick's deadline (the rest on the
    next tick); a kind that keeps refused units' markers only notes them."""
    for u, a in aside:
        if a.reason == "refused" and not kind.moves_aside_refused:
            plan.refused.append((u, a.why))
            continue
        if times.past(TICK_SECONDS):
            plan.left_to_move += 1
            continue
        if markers.give_up(store, u, a.seen, a.sha, a.why, a.runs):
            plan.moved.append((u, a.reason, a.why))
            plan.given_up.setdefault(u.name, []).append(u)


def _name_why_given_up(store: LandingStore, plan: TickPlan) -> None:
    """One example per table given up on, and why, for its warning: read only if none moved now."""
    moved = {u.name: (u, why) for u, _, why in reversed(plan.moved)}
    for name, units in plan.given_up.items():
        plan.given_up_why[name] = moved.get(name) or (units[0], markers.given_up_why(markers.given_up(store, units[0])))
