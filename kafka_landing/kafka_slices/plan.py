"""Offset planning: the frozen slice of one topic for one hour.

For hour H = [T, T+1h) and partition p the slice is [b(T), b(T+1h)) where a
boundary b(T) is the first offset whose timestamp is >= T (Kafka's
offsets_for_times), or the log end when no such record exists yet. b never
decreases in T, so consecutive hours tile the log.

A boundary is frozen by the first hour that plans it and is reused by its
neighbour afterwards (chaining), so a boundary that was "the log end" when H
was planned does not move when late records arrive: those records belong to
H+1, never to no hour and never to two. Planning in any order works because a
new boundary is clamped between the nearest frozen boundaries below and above.

Pure: no Dagster, no Spark, no Kafka client. The log is read through `LogView`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, NamedTuple, Protocol

from kafka_landing.config import FAIL, FUTURE_POLICIES, LAND, TopicConfig
from kafka_landing.errors import KafkaLandingError, LandingError
from kafka_landing.naming import Hour, slice_dir, to_millis

MANIFEST_VERSION = 1


class PlanningError(KafkaLandingError, RuntimeError):
    """What the log or the config says about an hour: terminal."""


class HourNotClosedError(PlanningError):
    pass


class UnknownTopicError(PlanningError):
    pass


class RetentionGapError(PlanningError):
    pass


class LogRewoundError(PlanningError):
    """The log ends below an offset a frozen hour already holds: the topic was re-created."""


class FutureTimestampError(PlanningError):
    """A record stamped far in the future would hold back every later boundary of its partition."""




class LogView(Protocol):
    """What planning needs to know about a topic's log, right now, as a
    read_committed consumer sees it (log end = last stable offset)."""

    def partitions(self, topic: str) -> list[int] | None:
        """Partition ids, or None when the topic does not exist."""

    def topic_id(self, topic: str) -> str | None:
        """The topic's id (KIP-516), new whenever the topic is re-created; None if the cluster has none."""

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, log end offset)."""

    def offsets_for_time(self, topic: str, partitions: list[int], millis: int) -> dict[int, tuple[int, int] | None]:
        """Per partition, (offset, timestamp) of the first offset with timestamp >= millis, as
        Kafka's ListOffsets answers it (a transaction marker counts), or None when there is none yet."""

    def first_record(self, topic: str, partition: int, start: int, end: int,
                     min_millis: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the first committed record in [start, end) stamped >= min_millis
        (any timestamp when None), or None. Reads records: used only to settle doubtful boundaries."""


@dataclass(frozen=True)
class PartitionSlice:
    partition: int
    start: int  # inclusive
    end: int  # exclusive
    log_start: int  # earliest offset still in the log when planned
    log_end: int  # log end when planned
    start_from: str  # "chained" (a frozen neighbour), "timestamp" or "log_end"
    end_from: str

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SliceTask:
    """One Spark task's share of a slice: a contiguous offset range of one partition."""

    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class SlicePlan:
    topic: str
    hour: Hour  # 2026-01-31T13
    planned_at: str  # ISO timestamp
    grace_minutes: int
    rows_per_task: int
    partitions: tuple[PartitionSlice, ...]
    tasks: tuple[SliceTask, ...]
    skipped: tuple[dict, ...] = ()  # offsets lost to retention, skipped on request
    future_records: tuple[dict, ...] = ()  # far-future records landed where they sit, by policy
    topic_id: str | None = None  # the Kafka topic id when planned: offsets alone cannot tell a re-created topic
    version: int = MANIFEST_VERSION

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    def partition(self, p: int) -> PartitionSlice | None:
        return next((s for s in self.partitions if s.partition == p), None)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "SlicePlan":
        return cls(
            topic=d["topic"], hour=Hour(d["hour"]), planned_at=d["planned_at"],
            grace_minutes=d["grace_minutes"], rows_per_task=d["rows_per_task"],
            partitions=tuple(PartitionSlice(**p) for p in d["partitions"]),
            tasks=tuple(SliceTask(**t) for t in d["tasks"]),
            skipped=tuple(d.get("skipped", ())), future_records=tuple(d.get("future_records", ())),
            topic_id=d.get("topic_id"), version=d.get("version", MANIFEST_VERSION),
        )


RETENTION_AFTER_FREEZING = "deleted by retention after freezing"


def without_deleted(plan: SlicePlan, log_starts: Mapping[int, int]) -> SlicePlan:
    """The frozen slice less the offsets retention deleted since it was frozen, each range listed
    under `skipped`: what landing can still read, and the loss it records when asked to skip it."""
    def cut(partition: int, start: int, end: int) -> int:
        return min(max(start, log_starts.get(partition, 0)), end)

    skipped = list(plan.skipped)
    for p in plan.partitions:
        if cut(p.partition, p.start, p.end) > p.start:
            skipped.append({"partition": p.partition, "start": p.start, "end": cut(p.partition, p.start, p.end),
                            "reason": RETENTION_AFTER_FREEZING})
    return replace(
        plan,
        partitions=tuple(replace(p, start=cut(p.partition, p.start, p.end)) for p in plan.partitions),
        tasks=tuple(replace(t, start=cut(t.partition, t.start, t.end)) for t in plan.tasks
                    if cut(t.partition, t.start, t.end) < t.end),
        skipped=tuple(skipped),
    )


def check_closed(hour: Hour, now: datetime, grace_minutes: int) -> None:
    closes = hour.closes(grace_minutes)
    if closes > now:
        raise HourNotClosedError(
            f"hour {hour} is still open: it closes at {closes.isoformat()} "
            f"(end of hour + {grace_minutes} min grace); now is {now.isoformat(timespec='seconds')}"
        )


def split_tasks(partitions: Iterable[PartitionSlice], rows_per_task: int) -> tuple[SliceTask, ...]:
    if rows_per_task < 1:
        raise ValueError("rows_per_task must be positive")
    tasks = []
    for p in partitions:
        for start in range(p.start, p.end, rows_per_task):
            tasks.append(SliceTask(p.partition, start, min(start + rows_per_task, p.end)))
    return tuple(tasks)


@dataclass(frozen=True)
class HourTask:
    """A frozen task of one hour: the unit one landing file never crosses."""

    hour: Hour
    partition: int
    start: int
    end: int


def hour_tasks(plans: Iterable[SlicePlan]) -> list[HourTask]:
    """Every non-empty frozen task of the hours, by partition and offset."""
    tasks = [HourTask(p.hour, t.partition, t.start, t.end) for p in plans for t in p.tasks if t.end > t.start]
    return sorted(tasks, key=lambda t: (t.partition, t.start))


#: At most this many frozen tasks are read by one Spark task: each is a landing file of its own per
#: table, and a Spark task keeps the files of its frozen tasks open until it ends (the writer then
#: needs no sort; see `write.write_good`).
TASKS_PER_READ = 8


def read_segments(tasks: Iterable[HourTask], parallelism: int,
                  tasks_per_read: int = TASKS_PER_READ) -> list[dict[int, tuple[int, int]]]:
    """How to read the tasks of a run of hours from Kafka: a list of reads, each at most one
    contiguous offset range [start, end) per partition. Ranges are cut only between frozen tasks,
    so no task is ever split across two Spark tasks and a landing file's content does not depend
    on which hours were read together. Contiguous tasks are merged up to about 1/parallelism of
    the records and at most `tasks_per_read` tasks (fewer, bigger reads, a bounded number of open
    files), and non-contiguous ones (a gap between hours that were not chained) never share a
    range, so offsets outside the hours are never read."""
    by_partition: dict[int, list[HourTask]] = {}
    for t in tasks:
        by_partition.setdefault(t.partition, []).append(t)
    total = sum(t.end - t.start for ts in by_partition.values() for t in ts)
    target = max(1, -(-total // max(1, parallelism)))
    pieces: dict[int, list[tuple[int, int]]] = {}
    for p, ts in sorted(by_partition.items()):
        out = pieces.setdefault(p, [])
        merged = 0  # tasks in out[-1]
        for t in sorted(ts, key=lambda t: t.start):
            if out and out[-1][1] == t.start and out[-1][1] - out[-1][0] < target and merged < tasks_per_read:
                out[-1] = (out[-1][0], t.end)
                merged += 1
            else:
                if out and out[-1][1] > t.start:
                    raise PlanningError(f"partition {p}: tasks overlap at offset {t.start} (hour {t.hour}); "
                                        "frozen slices of different hours must not share offsets")
                out.append((t.start, t.end))
                merged = 1
    reads = max((len(v) for v in pieces.values()), default=0)
    return [{p: v[i] for p, v in sorted(pieces.items()) if i < len(v)} for i in range(reads)]


def _neighbours(frozen: Mapping[Hour, SlicePlan], hour: Hour, partition: int):
    """(end of the nearest frozen hour below, start of the nearest frozen hour above, adjacency flags)."""
    below = [h for h in frozen if h < hour and frozen[h].partition(partition)]
    above = [h for h in frozen if h > hour and frozen[h].partition(partition)]
    lo = frozen[max(below)].partition(partition) if below else None
    hi = frozen[min(above)].partition(partition) if above else None
    lo_adjacent = bool(below) and max(below) == hour.plus(-1)
    hi_adjacent = bool(above) and min(above) == hour.plus(1)
    return (lo.end if lo else None), (hi.start if hi else None), lo_adjacent, hi_adjacent


def frozen_for_planning(
    hours: Iterable[Hour], hour: Hour, partitions: Iterable[int], topic_id: str | None,
    read: Callable[[Hour], SlicePlan | None],
) -> dict[Hour, SlicePlan]:
    """Of the frozen `hours` (known by name only), read just the ones `plan_slice` needs to plan
    `hour`, so that planning against them gives the plan planning against all of them gives.

    From the hour outward, on each side, until every current partition was found on that side
    (the nearest frozen hour holding it is all `_neighbours` uses; every hour read on the way
    below joins `known_below`, and a partition found nowhere means the whole side was read) and,
    when the topic has an id, some read hour carries one (every frozen hour that has an id has
    the same one, as `check_same_topic` let no other in). The nearest hour alone is NOT always
    enough: an older hour frozen after a partition was added knows more partitions than a newer
    hour frozen before. Usually one hour is read on each side that has one."""
    wanted = set(partitions)
    below = sorted((h for h in hours if h < hour), reverse=True)
    above = sorted(h for h in hours if h > hour)
    plans: dict[Hour, SlicePlan] = {}
    for side in (below, above):
        missing = set(wanted)
        for h in side:
            id_known = topic_id is None or any(p.topic_id is not None for p in plans.values())
            if not missing and id_known:
                break
            plan = read(h)
            if plan is None:
                continue
            plans[h] = plan
            missing -= {ps.partition for ps in plan.partitions}
    return {h: plans[h] for h in sorted(plans)}


def _clamp(value: int, lo: int | None, hi: int | None) -> int:
    if lo is not None:
        value = max(value, lo)
    if hi is not None:
        value = min(value, hi)
    return value


def _iso(millis: int) -> str:
    try:
        return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{millis} ms since the epoch"


@dataclass(frozen=True)
class PlanRules:
    """How a topic's hours are planned: its config's planning options, and whether this run lands
    what retention left of an hour, recording the loss (`skip_retention_gaps`), or stops there."""

    grace_minutes: int
    rows_per_task: int
    max_future_minutes: int = 60
    on_future_timestamp: str = FAIL
    skip_retention_gaps: bool = False

    def __post_init__(self) -> None:
        if self.on_future_timestamp not in FUTURE_POLICIES:
            raise ValueError(f"on_future_timestamp must be one of {FUTURE_POLICIES}, got {self.on_future_timestamp!r}")

    @classmethod
    def of(cls, cfg: TopicConfig, skip_retention_gaps: bool = False) -> PlanRules:
        return cls(cfg.grace_minutes, cfg.rows_per_task, cfg.max_future_minutes, cfg.on_future_timestamp,
                   skip_retention_gaps)


class _Asked(NamedTuple):
    """What Kafka said of one partition before any boundary was looked for."""

    log_start: int
    log_end: int
    at_start: tuple[int, int] | None  # Kafka's first (offset, timestamp) stamped >= the hour's start
    at_end: tuple[int, int] | None  # and >= its end


def _ask(log: LogView, topic: str, hour: Hour, partitions: list[int]) -> dict[int, _Asked]:
    """Watermarks first: a record produced after this read has an offset >= log_end, so "no record
    with timestamp >= T" is answered against a log end that was true."""
    marks = {p: log.watermarks(topic, p) for p in partitions}
    at_start = log.offsets_for_time(topic, partitions, to_millis(hour.start))
    at_end = log.offsets_for_time(topic, partitions, to_millis(hour.plus(1).start))
    return {p: _Asked(*marks[p], at_start.get(p), at_end.get(p)) for p in partitions}


@dataclass
class _Planning:
    """One hour of a topic being planned against its frozen hours: each partition's slice, and
    the retention gaps skipped and far-future records landed on the way."""

    topic: str
    hour: Hour
    now: datetime
    log: LogView
    frozen: Mapping[Hour, SlicePlan]
    rules: PlanRules
    skipped: list = field(default_factory=list)
    future_records: list = field(default_factory=list)
    # The partitions the frozen hours below know: one they do not was added after they were planned.
    known_below: set[int] = field(init=False)

    def __post_init__(self) -> None:
        self.known_below = {ps.partition for h, plan in self.frozen.items() if h < self.hour for ps in plan.partitions}

    def plan_partition(self, p: int, asked: _Asked) -> PartitionSlice:
        lo, hi, lo_adjacent, hi_adjacent = _neighbours(self.frozen, self.hour, p)
        self._check_not_rewound(p, (lo, hi), asked.log_end)
        if lo_adjacent:
            start, start_from = lo, "chained"
        elif self.known_below and p not in self.known_below:
            # A partition is created empty, at offset 0: what retention took since is a gap like any other.
            start, start_from = _clamp(0, None, hi), "added_later"
        else:
            start, start_from = _Search(self, p, asked, lo, hi).boundary(to_millis(self.hour.start), asked.at_start)
        if hi_adjacent:
            end, end_from = hi, "chained"
        else:
            end, end_from = _Search(self, p, asked, start, hi).boundary(to_millis(self.hour.plus(1).start),
                                                                        asked.at_end)
        start = self._past_retention_gap(p, start, end, asked.log_start)
        if end < start:  # only possible if a frozen neighbour is inconsistent with the log
            raise PlanningError(f"topic {self.topic!r} partition {p}: planned end {end} before start {start}")
        # Recorded by the hour they land in; one found before the start belongs to the hour below.
        self.future_records[:] = [f for f in self.future_records if f["partition"] != p or start <= f["offset"] < end]
        return PartitionSlice(p, start, end, asked.log_start, asked.log_end, start_from, end_from)

    def _check_not_rewound(self, p: int, frozen_offsets: tuple[int | None, int | None], log_end: int) -> None:
        for frozen_offset in frozen_offsets:
            if frozen_offset is not None and frozen_offset > log_end:
                raise LogRewoundError(
                    f"topic {self.topic!r} partition {p}: frozen hours of this topic reach offset {frozen_offset}, "
                    f"but the log now ends at {log_end}: the topic was deleted and re-created (or the partition "
                    f"truncated). Nothing was planned for hour {self.hour}. The frozen slices under "
                    f"{slice_dir(self.topic)}/ describe the old topic: land the new one under another name, or move "
                    "that folder aside to start the topic's landing history anew."
                )

    def _past_retention_gap(self, p: int, start: int, end: int, log_start: int) -> int:
        """Where the slice starts: past the offsets retention deleted, recorded as skipped if the rules allow."""
        if start >= log_start:
            return start
        lost_to = min(log_start, end)
        if not self.rules.skip_retention_gaps:
            raise RetentionGapError(
                f"topic {self.topic!r} partition {p}: offsets [{start}, {lost_to}) of hour {self.hour} "
                f"were deleted by retention (the log now starts at {log_start}). Nothing was planned. "
                "To land the rest of the hour and record the loss, run with skip_retention_gaps=true."
            )
        self.skipped.append({"partition": p, "start": start, "end": lost_to, "reason": "deleted by retention"})
        return lost_to


@dataclass
class _Search:
    """Where one boundary of one partition is looked for, and what planning may do there."""

    planning: _Planning
    partition: int
    asked: _Asked
    floor: int | None  # no boundary below this (the hour's start, or the frozen end below)
    ceiling: int | None  # nor above this (the frozen start above)

    @property
    def max_future_ms(self) -> int:
        return self.planning.rules.max_future_minutes * 60_000

    def _first(self, start: int, end: int, min_millis: int | None = None) -> tuple[int, int] | None:
        return self.planning.log.first_record(self.planning.topic, self.partition, start, end, min_millis)

    def boundary(self, millis: int, found: tuple[int, int] | None) -> tuple[int, str]:
        """The first committed record at or after the floor stamped >= millis, and where it came from.

        Kafka's answer (`found`) is taken as it is unless it is doubtful: below the floor (a
        record stamped >= millis already sits in an earlier hour) or stamped far past millis (a
        transaction marker written long after the records it closes, a record stamped in the
        future, or an idle partition). Only then are records read to settle it."""
        limit = _clamp(self.asked.log_end, self.floor, self.ceiling)
        if found is None:
            return limit, "log_end"
        offset, stamped = found
        if (self.floor is None or offset >= self.floor) and stamped <= millis + self.max_future_ms:
            return _clamp(offset, self.floor, self.ceiling), "timestamp"
        pos = max(offset, self.floor if self.floor is not None else offset, self.asked.log_start)
        source = "timestamp"
        while pos < limit:
            rec = self._first(pos, limit)
            if rec is None:
                return pos, source  # only offsets without a record (markers, aborted) up to the limit
            if rec[1] < millis:  # records stamped before the boundary time follow it: find the first one after
                rec, source = self._first(rec[0], limit, millis), "scan"
                if rec is None:
                    return limit, "log_end"
            offset, stamped = rec
            if stamped <= millis + self.max_future_ms:
                return offset, source
            outlier, nxt = self._outlier(offset, stamped, limit)
            if not outlier:
                return offset, source  # an idle partition waking up: the boundary really is that late
            self._future(offset, stamped, millis)
            # Land it where it sits: with the record after it, so every boundary agrees on its hour.
            if nxt is None or nxt[1] >= millis:
                return offset, source
            pos, source = nxt[0], "scan"
        return limit, "log_end"

    def _outlier(self, offset: int, stamped: int, limit: int) -> tuple[bool, tuple[int, int] | None]:
        """A record far past the boundary time is an outlier, not an idle partition waking up, when it
        is stamped in the future of the wall clock or the record after it is stamped well before it.
        Returns the verdict and the record after it."""
        nxt = self._first(offset + 1, limit)
        if stamped > to_millis(self.planning.now) + self.max_future_ms:
            return True, nxt
        return nxt is not None and nxt[1] < stamped - self.max_future_ms, nxt

    def _future(self, offset: int, stamped: int, millis: int) -> None:
        planning, minutes = self.planning, self.planning.rules.max_future_minutes
        if planning.rules.on_future_timestamp != LAND:
            raise FutureTimestampError(
                f"topic {planning.topic!r} partition {self.partition}: offset {offset} is stamped {_iso(stamped)}, "
                f"more than max_future_minutes={minutes} past the boundary {_iso(millis)} of hour "
                f"{planning.hour}, and the records after it are stamped earlier. Kafka's "
                "offsets_for_times would hold every later boundary of this partition at that offset, making "
                "the following hours silently empty. Nothing was planned. Either land it where it sits by "
                "setting `on_future_timestamp: land` for this topic (it is recorded in the slice manifest), "
                "or raise max_future_minutes if such timestamps are normal here. To stop such records at the "
                "source, set the broker's log.message.timestamp.after.max.ms."
            )
        if any(f["partition"] == self.partition and f["offset"] == offset for f in planning.future_records):
            return
        planning.future_records.append({
            "partition": self.partition, "offset": offset, "timestamp": _iso(stamped),
            "boundary": _iso(millis), "action": "landed where it sits",
        })


def plan_slice(topic: str, hour: Hour, now: datetime, log: LogView, frozen: Mapping[Hour, SlicePlan],
               rules: PlanRules) -> SlicePlan:
    """Plan (not yet freeze) hour `hour` of `topic`, given the topic's frozen hours."""
    check_closed(hour, now, rules.grace_minutes)
    partitions = log.partitions(topic)
    if partitions is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist on the Kafka cluster")
    topic_id = log.topic_id(topic)
    check_same_topic(topic, topic_id, frozen.values(), f"Nothing was planned for hour {hour}.")
    planning = _Planning(topic, hour, now, log, frozen, rules)
    slices = [planning.plan_partition(p, asked) for p, asked in _ask(log, topic, hour, sorted(partitions)).items()]
    return SlicePlan(
        topic=topic, hour=hour, planned_at=now.isoformat(timespec="seconds"),
        grace_minutes=rules.grace_minutes, rows_per_task=rules.rows_per_task, partitions=tuple(slices),
        tasks=split_tasks(slices, rules.rows_per_task), skipped=tuple(planning.skipped),
        future_records=tuple(planning.future_records), topic_id=topic_id,
    )


def check_same_topic(topic: str, topic_id: str | None, plans: Iterable[SlicePlan], then: str) -> None:
    """A topic deleted and re-created under its name has a new id, whatever its offsets: a new log
    that already passed the frozen boundaries would otherwise chain on and never land its head."""
    if topic_id is None:
        return
    for plan in plans:
        if plan.topic_id is not None and plan.topic_id != topic_id:
            raise LogRewoundError(
                f"topic {topic!r} was deleted and re-created: its topic id is now {topic_id}, but hour {plan.hour} "
                f"was frozen from topic id {plan.topic_id}. {then} The frozen slices under slices/{topic}/ describe "
                "the old topic: land the new one under another name, or move that folder aside to start the "
                "topic's landing history anew."
            )


def check_still_in_kafka(log, plan: SlicePlan, marks: dict[int, tuple[int, int]] | None = None,
                         skip_retention_gaps: bool = False) -> SlicePlan:
    """The slice to land: offsets retention deleted, or a log re-created below the slice, since the
    slice was frozen are a clear error before Spark starts, not a short read; with
    `skip_retention_gaps` the deleted ranges are left out and recorded instead. `log`: a
    KafkaLogView, one for every hour of the run; `marks`: the watermarks already asked for."""
    marks = {} if marks is None else marks
    log_starts = {}
    for p in plan.partitions:
        if p.records == 0:
            continue
        if p.partition not in marks:
            marks[p.partition] = log.watermarks(plan.topic, p.partition)
        log_start, log_end = marks[p.partition]
        if p.start < log_start and not skip_retention_gaps:
            raise LandingError(
                f"topic {plan.topic!r} partition {p.partition}: offsets [{p.start}, {min(log_start, p.end)}) "
                f"of hour {plan.hour} were deleted by retention after the slice was frozen "
                f"(the log now starts at {log_start}). Nothing was landed. To land what Kafka still holds and "
                "record the loss in the done files, materialise the hour with skip_retention_gaps: true in the "
                "landing run config."
            )
        log_starts[p.partition] = log_start
        if log_end < p.end:
            raise LandingError(
                f"topic {plan.topic!r} partition {p.partition}: the slice of hour {plan.hour} holds offsets "
                f"[{p.start}, {p.end}) but the log now ends at {log_end}: the topic was deleted and "
                "re-created (or the partition truncated) after the slice was frozen. Nothing was landed; "
                "the landed files of this hour, if any, are untouched."
            )
    # After the watermarks: with the brokers away, those fail first and fast, as they always did.
    try:
        check_same_topic(plan.topic, log.topic_id(plan.topic), [plan], "Nothing was landed; the landed files of "
                         "this hour, if any, are untouched.")
    except LogRewoundError as exc:
        raise LandingError(str(exc)) from None
    return without_deleted(plan, log_starts)
