"""Loads grouped into runs: run keys, attempts, and which runs covered a load.

The queue (`tick`) asks the Dagster instance which runs covered each load it examined
(`covering_runs`) and plans (`plan_loads`): none -> request; one in flight -> wait; all
finished and the content still not loaded -> request again under a new run key, at most
`MAX_ATTEMPTS` times, then give up. What is ready is grouped: one run per table covers a
run of consecutive ready landing hours at the same attempt (at most `MAX_HOURS_PER_RUN`),
so a backfill costs a few runs, not one per hour; the tables of the same hours share a run, and
so do the event partitions of the same day (`tables_together`).

Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafka_landing.handoff.units import EVENT, HOUR, LoadUnit
from kafka_landing.naming import Hour, table_dir

MAX_ATTEMPTS = 3
# Run statuses (Dagster's names) after which a run will not change anything any more.
FINISHED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})


# --- run keys and what to do with a pending load -----------------------------------

def run_key(done_file: str, sha: str, attempt: int = 1) -> str:  # a landing hour's first series
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


def decide(keys: Sequence[str], statuses: Mapping[str, Sequence[str]], max_attempts: int = MAX_ATTEMPTS
           ) -> Decision:
    """What to do with content known not to be loaded, given its attempt keys and the statuses of
    the runs per run key. A run key is never requested twice (Dagster would drop it), so a retry is
    a new key; the retries are bounded, and never silent."""
    keys = list(keys)[:max_attempts]
    seen = tuple((k, s) for k in keys for s in statuses.get(k, ()))
    used = max((i for i, k in enumerate(keys, 1) if statuses.get(k)), default=0)
    if any(s not in FINISHED for _, s in seen):
        return Decision("wait", used, None, seen)
    if used < max_attempts:
        return Decision("request", used + 1, keys[used], seen)
    return Decision("give_up", used, None, seen)


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


def member_tag(hour: Hour) -> str:
    """The run tag key a member of `hour` is named under: its hour of the week, e.g.
    `kafka_landing/load.Fri13`. Distinct for any 168 consecutive hours."""
    h = Hour(hour).start
    return f"{MEMBER_TAG_PREFIX}{_WEEKDAYS[h.weekday()]}{h.hour:02d}"


EVENT_TAG = "kafka_landing/event_partition"  # <dataset>.<event table>/<partition>, on every event load run
EVENT_CONTENT_TAG = "kafka_landing/event_content"  # .sNN -> the marker set a run of several event tables loaded


@dataclass(frozen=True, order=True)
class PendingLoad:
    """One unit's content, known not to be loaded: a member of at most one run. `sha`: a landing
    hour's done-file hash, or an event partition's marker set (`markers.identity`). `round`: a
    new series of attempts after a refusal that healed with time (a quota refilled); "" first."""

    unit: LoadUnit
    sha: str
    round: str = ""

    @property
    def th(self) -> LoadUnit:
        return self.unit

    @property
    def base(self) -> str:
        """`<done file or event marker folder>@<sha16>[~<round>]`: the member's identity."""
        return f"{self.unit.queue_key}@{self.sha[:16]}" + (f"~{self.round}" if self.round else "")

    @property
    def key(self) -> str:
        """The member's identity, and its run key when requested alone (first attempt)."""
        return self.base

    def attempt_key(self, attempt: int) -> str:
        """The first attempt keeps the key format of earlier versions (path@hash)."""
        return self.base if attempt == 1 else f"{self.base}#attempt{attempt}"

    def attempt_keys(self, max_attempts: int = MAX_ATTEMPTS) -> list[str]:
        return [self.attempt_key(a) for a in range(1, max_attempts + 1)]

    @property
    def tag(self) -> tuple[str, str]:
        """(key, value) of the run tag naming this member. A landing hour: its hour of the week ->
        `<hour>@<sha16>` (the hash tells tables apart: a done file names its dataset and table). An
        event partition: `<dataset>.<event table>/<partition>`, whatever its markers, so a run of
        any marker set in flight makes the partition wait (a backfill versions a day a few times,
        not once per landing hour)."""
        if self.unit.kind == EVENT:
            return EVENT_TAG, f"{self.unit.name}/{self.unit.partition}"
        suffix = f"~{self.round}" if self.round else ""
        return member_tag(self.unit.partition), f"{self.unit.partition}@{self.sha[:16]}{suffix}"

    @property
    def slot_tags(self) -> tuple[tuple[str, str], ...]:
        """The (key, value) pairs naming this member in a run of several tables (`tables_together`),
        under its table's slot, so no two members of such a run share a key. A landing hour: its hour
        of the week and slot -> `<dataset>.<table>/<hour>@<sha16>` (each member's runs are found by one
        indexed query per hour of the week and slot). An event partition: `kafka_landing/event_partition.sNN`
        -> `<dataset>.<event table>/<partition>` (found as by its own tag) and `kafka_landing/event_content.sNN`
        -> `<sha16>[~<round>]`, the marker set the run loaded (`made_by`)."""
        slot = f"s{table_slot(self.unit.dataset, self.unit.table):02d}"
        key, value = self.tag
        if self.unit.kind == EVENT:
            return (f"{key}.{slot}", value), (f"{EVENT_CONTENT_TAG}.{slot}", self.content)
        return (f"{key}.{slot}", f"{self.unit.name}/{value}"),

    @property
    def content(self) -> str:
        return self.sha[:16] + (f"~{self.round}" if self.round else "")

    @property
    def found_by(self) -> tuple[tuple[str, str], ...]:
        """The tags a run covering this member carries: its own, or its slot's in a run of tables."""
        return self.tag, self.slot_tags[0]

    def made_by(self, run: SeenRun) -> bool:
        """Whether `run` was an attempt at this very content (not only a run of the same unit)."""
        if self.unit.kind == EVENT:
            (named, value), (content, sha) = self.slot_tags
            return (run.tags.get(RUN_KEY_TAG) in self.attempt_keys(max(MAX_ATTEMPTS, run.attempt))
                    or (run.tags.get(named) == value and run.tags.get(content) == sha))
        return True


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
    by_tag = {t: ld for ld in loads for t in ld.found_by}
    by_key = {k: ld for ld in loads for k in ld.attempt_keys(max_attempts)}
    found: dict[PendingLoad, dict[str, SeenRun]] = {ld: {} for ld in loads}
    for run in runs:
        hit = {by_tag[(k, v)] for k, v in run.tags.items() if (k, v) in by_tag}
        if run.tags.get(RUN_KEY_TAG) in by_key:
            hit.add(by_key[run.tags[RUN_KEY_TAG]])
        for ld in hit:
            found[ld][run.run_id] = run
    return {ld: tuple(sorted(rs.values(), key=lambda r: (r.attempt, r.run_id))) for ld, rs in found.items()}


RUN_QUERY_VALUES = 300  # tag values in one query of the instance's runs


def run_queries(loads: Sequence[PendingLoad]) -> list[tuple[str, list[str]]]:
    """The (tag, values) queries of the instance that find the runs that covered any of `loads`, few
    and indexed: by run key for runs of earlier versions, by member tag (one query per tag key among
    them), at most `RUN_QUERY_VALUES` values each."""
    by_tag: dict[str, list[str]] = {}
    for ld in loads:
        for k, v in ld.found_by:
            by_tag.setdefault(k, []).append(v)
    queries = [(RUN_KEY_TAG, [k for ld in loads for k in ld.attempt_keys()]), *sorted(by_tag.items())]
    return [(tag, values[i:i + RUN_QUERY_VALUES]) for tag, values in queries
            for i in range(0, len(values), RUN_QUERY_VALUES)]


def _decision(ld: PendingLoad, runs: Sequence[SeenRun], max_attempts: int) -> Decision:
    """`decide` for one member, its runs placed under the attempt keys by the attempt they made.
    A run of the same unit for other content (an event partition's earlier markers) only makes it
    wait while in flight; it is no attempt at this content."""
    keys = ld.attempt_keys(max_attempts)
    if any(r.status not in FINISHED for r in runs):
        return Decision("wait", 0, None, tuple((r.tags.get(RUN_KEY_TAG, ""), r.status) for r in runs))
    statuses: dict[str, list[str]] = {}
    for run in runs:
        if ld.made_by(run):
            statuses.setdefault(keys[min(run.attempt, max_attempts) - 1], []).append(run.status)
    return decide(keys, statuses, max_attempts)


@dataclass(frozen=True)
class LoadGroup:
    """One run to request: consecutive hours of one table, every member at the same attempt."""

    loads: tuple[PendingLoad, ...]  # oldest first
    attempt: int

    @property
    def dataset(self) -> str:
        return self.loads[0].unit.dataset

    @property
    def table(self) -> str:
        return self.loads[0].unit.table

    @property
    def name(self) -> str:
        return self.loads[0].unit.name

    @property
    def hours(self) -> list[str]:
        """Its units' partitions: hours (a landing-hour group), or the one event partition."""
        return [ld.unit.partition for ld in self.loads]

    @property
    def run_key(self) -> str:
        """Alone: the single load's key (`<done file>@<sha16>[#attempt<n>]`, as earlier versions).
        Grouped: `tables/<dataset>/<table>/hours=<first>..<last>@<hash of the members' keys>[#attempt<n>]`.
        A run key is launched once: a retry is a later attempt, so a new key."""
        if len(self.loads) == 1:
            return self.loads[0].attempt_key(self.attempt)
        digest = hashlib.sha256("\n".join(ld.key for ld in self.loads).encode()).hexdigest()[:16]
        base = f"{table_dir(self.dataset, self.table)}/hours={self.loads[0].unit.partition}..{self.loads[-1].unit.partition}@{digest}"
        return base if self.attempt == 1 else f"{base}#attempt{self.attempt}"

    def tags(self) -> dict[str, str]:
        """What the run carries so a later tick knows what it covered (and people, what it loads)."""
        tags = {TABLE_TAG: self.name, ATTEMPT_TAG: str(self.attempt), **dict(ld.tag for ld in self.loads)}
        if len(self.loads) == 1 and self.loads[0].unit.kind == HOUR:
            tags.update({"kafka_landing/done_file": self.loads[0].unit.done_file,
                         "kafka_landing/done_sha256": self.loads[0].sha})
        return tags


TABLE_SLOTS = 64  # at most this many tables per run: each holds a slot of its own (`table_slot`)


def table_slot(dataset: str, table: str) -> int:
    """A table's slot, the same in every run and every release: tables of one run have distinct slots."""
    return int(hashlib.sha256(f"{dataset}.{table}".encode()).hexdigest()[:8], 16) % TABLE_SLOTS


def tables_together(groups: Sequence[LoadGroup], history: Callable[[LoadGroup], object]
                    ) -> list[tuple[LoadGroup, ...]]:
    """The groups as runs, up to one table per slot: landing-hour groups of different tables that
    cover the same hours at the same attempt, and whose tables have the same partitions (`history`:
    a key of them; one run covers one partitions definition), load in one run; so do event groups
    of the same partition at the same attempt (the run names its partition by tag, so their tables'
    partitions definitions may differ). A last attempt stays alone, as in `plan_loads`. Order kept:
    a run comes where its first group was."""
    runs: list[list[LoadGroup]] = []
    open_runs: dict[tuple, list[list[LoadGroup]]] = {}
    for g in groups:
        if 1 < MAX_ATTEMPTS == g.attempt:
            runs.append([g])
            continue
        kind = g.loads[0].unit.kind
        key = (kind, tuple(g.hours), g.attempt, history(g) if kind == HOUR else None)
        slot = table_slot(g.dataset, g.table)
        run = next((r for r in open_runs.get(key, []) if slot not in {table_slot(x.dataset, x.table) for x in r}), None)
        if run is None:
            run = []
            runs.append(run)
            open_runs.setdefault(key, []).append(run)
        run.append(g)
    return [tuple(r) for r in runs]


# How long a sensor holds its ready runs back while a run it requested is still queued (`holds`).
HOLD_SECONDS = 30


def holds(queued_at: float | None, now: float) -> bool:
    """Whether a sensor holds its ready runs back: while the last run it requested (created at
    `queued_at`, None if none is queued) waits in Dagster's queue, for at most HOLD_SECONDS. A run
    asked for now would start after that one anyway; asked for once it starts, it takes every table
    that became ready meanwhile, so a backlog (the hour's landing of many topics publishing one
    after another, most of the Spark slots busy) costs a few big runs, not a run per tick, each
    paying its process start. Nothing is lost: what is held is examined again at the next tick."""
    return queued_at is not None and now - queued_at < HOLD_SECONDS


def run_key_of(run: Sequence[LoadGroup]) -> str:
    """A group's own run key alone; several tables' landing hours:
    `tables/<n>/hours=<first>..<last>@<hash of every member's key>[#attempt<n>]`; several tables'
    event partition: `events/<n>/partition=<partition>@<hash>[#attempt<n>]`."""
    if len(run) == 1:
        return run[0].run_key
    digest = hashlib.sha256("\n".join(ld.key for g in run for ld in g.loads).encode()).hexdigest()[:16]
    if run[0].loads[0].unit.kind == HOUR:
        base = f"tables/{len(run)}/hours={run[0].hours[0]}..{run[0].hours[-1]}@{digest}"
    else:
        base = f"events/{len(run)}/partition={run[0].hours[0]}@{digest}"
    return base if run[0].attempt == 1 else f"{base}#attempt{run[0].attempt}"


def tags_of(run: Sequence[LoadGroup]) -> dict[str, str]:
    """A group's own tags alone; several tables': every member under its slot's tags, and the tables."""
    if len(run) == 1:
        return run[0].tags()
    return {TABLE_TAG: ",".join(g.name for g in run), ATTEMPT_TAG: str(run[0].attempt),
            **{k: v for g in run for ld in g.loads for k, v in ld.slot_tags}}


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
    for ld in sorted(set(loads), key=lambda x: (x.unit.kind, x.unit.dataset, x.unit.table, x.unit.partition, x.sha)):
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
        alone = (1 < max_attempts == a) or ld.unit.kind == EVENT
        prev = current[-1].unit if current else None
        joins = (prev is not None and not alone and a == attempt and len(current) < max_hours
                 and (prev.dataset, prev.table) == (ld.unit.dataset, ld.unit.table)
                 and ld.unit.hour.number - prev.hour.number == 1)
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
    groups.sort(key=lambda g: (g.loads[0].unit.partition, g.name, g.attempt))
    return LoadPlan(tuple(groups), tuple(waiting), tuple(given_up))


def retire_config(*units: LoadUnit) -> dict[str, list[str]]:
    """The config of a run that empties `units` (the retire job's): done files, and event partitions
    by name."""
    return {"done_files": [u.done_file for u in units if u.kind == HOUR],
            "event_partitions": [f"{u.name}/{u.partition}" for u in units if u.kind != HOUR]}
