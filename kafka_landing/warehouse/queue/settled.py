"""WHEN an event partition becomes final: the `settled` checks to evaluate again at that time (the
settled sensor's tick). No Dagster, no Spark.

A partition's `settled` check says the truth when it runs: not final yet, and until when. Nothing
else runs it at that time (a load runs it only when the partition changes), so each tick finds the
partitions whose settle time (their newest version's `amended_at` + the topic's `settle_hours`)
passed since the last tick, and the sensor asks for a check-only run of each. What the sensor keeps
between ticks (`SettledPosition`) is the time up to which it has looked; the first tick looks back
`LOOKBACK_EXTRA` beyond the longest `settle_hours`, so a fresh daemon catches up on the days that
settled lately without scanning years.

What a tick costs: per table one listing of its partitions' version files with their write times
(`versions.newest_versions`), and a read of each version written since about `settle_hours` before
the last tick, once: a version's file is written when the version is made, so one written long
before the last tick settled before it (give or take `CLOCK_SKEW` between the store's clock and the
loader's), and the position remembers what each version read said until the listing no longer
needs it. A count of reads and a time budget bound a tick, as `reconcile`'s; what does not fit goes
on at the next tick, which looks from the same time again (what it read is remembered, and a
request it repeats has the same run key, which Dagster runs once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from kafka_landing.naming import event_table
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.by_event.versions import EventPartitionError, VersionFile, newest_versions, read_version

CLOCK_SKEW = timedelta(hours=1)  # how far a version's `amended_at` may be after its file's write time
LOOKBACK_EXTRA = timedelta(days=1)  # the first tick looks back the longest settle_hours and this


class Budget(NamedTuple):
    """What one tick may spend; the rest waits for the next tick."""

    reads: int = 500  # manifest versions read
    seconds: float = 15  # from the tick's start, listings included
    requests: int = 200  # checks asked for


@dataclass(frozen=True)
class Seen:
    """What a partition's newest version said when a tick read it."""

    version: int
    written: float  # its file's write time, as listed: with the version, what identifies the file read
    amended_at: str | None  # None: it could not be read (warned once; read again when a new version comes)
    asked: bool = False  # its check was asked for at its settle time

    def to_json(self) -> list:
        return [self.version, self.written, self.amended_at, self.asked]

    @classmethod
    def from_json(cls, raw: list) -> Seen:
        version, written, amended_at, asked = raw
        return cls(int(version), float(written), None if amended_at is None else str(amended_at), bool(asked))


@dataclass(frozen=True)
class SettledPosition:
    """What the settled sensor keeps between ticks (in its cursor)."""

    until: str | None = None  # every partition that became final up to this time was asked for; None: never looked
    seen: Mapping[str, Seen] = field(default_factory=dict)  # "dataset/table/partition" -> its newest version read

    def to_json(self) -> dict:
        return {"until": self.until, "seen": {k: s.to_json() for k, s in sorted(self.seen.items())}}

    @classmethod
    def from_json(cls, raw: object) -> SettledPosition:
        """Anything unreadable (an older cursor) starts again: it looks back as a first tick does."""
        try:
            until = raw["until"]
            if until is not None:
                datetime.fromisoformat(until)
            return cls(until, {str(k): Seen.from_json(v) for k, v in raw["seen"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls()


@dataclass(frozen=True)
class Settled:
    """An event partition whose newest version became final since the last tick (unless a landing
    hour waits to change it: its check says so)."""

    dataset: str
    table: str  # the landing-hour table; its event-time table is `event_table(table)`
    partition: str
    version: int
    settles_at: str

    @property
    def run_key(self) -> str:
        """One check-only run per partition and version (and when that settles: a version number used
        again, after its manifests were removed, is another version)."""
        return f"settled/{self.dataset}.{event_table(self.table)}/{self.partition}@v{self.version}/{self.settles_at}"


@dataclass
class SettledPlan:
    since: str  # what the tick looked from
    position: SettledPosition = field(default_factory=SettledPosition)  # what to keep for the next tick
    due: list[Settled] = field(default_factory=list)  # the checks to ask for, the earliest settled first
    listed: int = 0  # partitions listed
    read: int = 0  # versions read
    unreadable: list[str] = field(default_factory=list)  # why, for each version that could not be read
    more_due: int = 0  # settled, asked for on a later tick (over the budget's requests)
    stopped_early: bool = False  # the budget ran out before every version was read


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def _key(dataset: str, table: str, partition: str) -> str:
    return f"{dataset}/{table}/{partition}"


class _Spend:
    """One tick's spending, reads and time, against its budget."""

    def __init__(self, budget: Budget, clock: Callable[[], float]):
        self.budget, self.clock = budget, clock
        self.deadline = clock() + budget.seconds

    def late(self) -> bool:
        return self.clock() >= self.deadline


def find_settled(store: LandingStore, tables: Mapping[tuple[str, str], int], position: SettledPosition,
                 now: datetime, budget: Budget = Budget(), clock: Callable[[], float] = time.time) -> SettledPlan:
    """The partitions of the event-time `tables` ((dataset, landing-hour table) -> its topic's
    settle_hours) whose settle time passed since `position.until` (on a first tick: the longest
    settle_hours and `LOOKBACK_EXTRA` before `now`), up to `now`."""
    spend = _Spend(budget, clock)
    since = (datetime.fromisoformat(position.until) if position.until
             else now - timedelta(hours=max(tables.values(), default=0)) - LOOKBACK_EXTRA)
    plan = SettledPlan(_iso(since))
    seen = _read_recent(store, tables, position, since, plan, spend)
    due = _due(seen, tables, since, now)
    for settled in due[:budget.requests]:
        plan.due.append(settled)
        key = _key(settled.dataset, settled.table, settled.partition)
        seen[key] = Seen(seen[key].version, seen[key].written, seen[key].amended_at, asked=True)
    plan.more_due = max(0, len(due) - budget.requests)
    looked = not plan.stopped_early and not plan.more_due
    plan.position = SettledPosition(_iso(now) if looked else position.until, seen)
    return plan


def _due(seen: Mapping[str, Seen], tables: Mapping[tuple[str, str], int], since: datetime, now: datetime
         ) -> list[Settled]:
    """The partitions `seen` whose settle time is after `since` and not after `now`, not asked for
    yet, the earliest first."""
    due = []
    for key, s in seen.items():
        dataset, table, partition = key.split("/", 2)
        if s.asked or s.amended_at is None:
            continue
        settles_at = datetime.fromisoformat(s.amended_at) + timedelta(hours=tables[(dataset, table)])
        if since < settles_at <= now:
            due.append((settles_at, Settled(dataset, table, partition, s.version, _iso(settles_at))))
    return [settled for _, settled in sorted(due, key=lambda d: (d[0], d[1].run_key))]


def _read_recent(store: LandingStore, tables: Mapping[tuple[str, str], int], position: SettledPosition,
                 since: datetime, plan: SettledPlan, spend: _Spend) -> dict[str, Seen]:
    """Each listed partition whose newest version may settle after `since`, as read (or as the
    position remembers it), oldest written first, within the budget. A table the budget left unlisted
    keeps what the position remembers of it."""
    recent: list[tuple[VersionFile, str, str]] = []
    seen: dict[str, Seen] = {}
    for (dataset, table), hours in sorted(tables.items()):
        if spend.late():
            plan.stopped_early = True
            seen.update({k: s for k, s in position.seen.items() if k.startswith(_key(dataset, table, ""))})
            continue
        listed = newest_versions(store, dataset, table)
        plan.listed += len(listed)
        oldest = (since - timedelta(hours=hours) - CLOCK_SKEW).timestamp()  # written before: settled before `since`
        recent += [(v, dataset, table) for v in listed if v.written > oldest]
    for v, dataset, table in sorted(recent, key=lambda r: (r[0].written, r[1], r[2], r[0].partition)):
        key = _key(dataset, table, v.partition)
        known = position.seen.get(key)
        if known is not None and (known.version, known.written) == (v.version, v.written):
            seen[key] = known
        elif plan.read >= spend.budget.reads or spend.late():
            plan.stopped_early = True
        elif (got := _read(store, dataset, table, v, plan)) is not None:
            seen[key] = got
    return seen


def _read(store: LandingStore, dataset: str, table: str, v: VersionFile, plan: SettledPlan) -> Seen | None:
    """What version `v` says of when it was made; None if a newer version removed it meanwhile (the
    next listing shows that one)."""
    plan.read += 1
    try:
        return Seen(v.version, v.written, read_version(store, dataset, table, v.partition, v.version).amended_at)
    except FileNotFoundError:
        return None
    except EventPartitionError as exc:
        plan.unreadable.append(str(exc))
        return Seen(v.version, v.written, None)


__all__ = ["Budget", "CLOCK_SKEW", "LOOKBACK_EXTRA", "Seen", "Settled", "SettledPlan", "SettledPosition",
           "find_settled"]
