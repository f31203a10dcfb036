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

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping, Protocol

from kafka_landing.naming import ONE_HOUR, floor_hour, hour_tag, to_millis

MANIFEST_VERSION = 1


class PlanningError(RuntimeError):
    pass


class HourNotClosedError(PlanningError):
    pass


class UnknownTopicError(PlanningError):
    pass


class RetentionGapError(PlanningError):
    pass


class LogView(Protocol):
    """What planning needs to know about a topic's log, right now."""

    def partitions(self, topic: str) -> list[int] | None:
        """Partition ids, or None when the topic does not exist."""

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, log end offset)."""

    def offsets_for_time(self, topic: str, partitions: list[int], millis: int) -> dict[int, int | None]:
        """First offset with timestamp >= millis per partition, None when there is none yet."""


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
    hour: str  # hour tag, e.g. 2026-01-31T13
    planned_at: str  # ISO timestamp
    grace_minutes: int
    rows_per_task: int
    partitions: tuple[PartitionSlice, ...]
    tasks: tuple[SliceTask, ...]
    skipped: tuple[dict, ...] = ()  # offsets lost to retention, skipped on request
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
            topic=d["topic"], hour=d["hour"], planned_at=d["planned_at"],
            grace_minutes=d["grace_minutes"], rows_per_task=d["rows_per_task"],
            partitions=tuple(PartitionSlice(**p) for p in d["partitions"]),
            tasks=tuple(SliceTask(**t) for t in d["tasks"]),
            skipped=tuple(d.get("skipped", ())), version=d.get("version", MANIFEST_VERSION),
        )


def check_closed(hour: datetime, now: datetime, grace_minutes: int) -> None:
    closes = hour + ONE_HOUR + timedelta(minutes=grace_minutes)
    if closes > now:
        raise HourNotClosedError(
            f"hour {hour_tag(hour)} is still open: it closes at {closes.isoformat()} "
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


def _neighbours(frozen: Mapping[datetime, SlicePlan], hour: datetime, partition: int):
    """(end of the nearest frozen hour below, start of the nearest frozen hour above, adjacency flags)."""
    below = [h for h in frozen if h < hour and frozen[h].partition(partition)]
    above = [h for h in frozen if h > hour and frozen[h].partition(partition)]
    lo = frozen[max(below)].partition(partition) if below else None
    hi = frozen[min(above)].partition(partition) if above else None
    lo_adjacent = bool(below) and max(below) == hour - ONE_HOUR
    hi_adjacent = bool(above) and min(above) == hour + ONE_HOUR
    return (lo.end if lo else None), (hi.start if hi else None), lo_adjacent, hi_adjacent


def _clamp(value: int, lo: int | None, hi: int | None) -> int:
    if lo is not None:
        value = max(value, lo)
    if hi is not None:
        value = min(value, hi)
    return value


def _boundary(chained: int | None, found: int | None, log_end: int, lo: int | None, hi: int | None) -> tuple[int, str]:
    """A boundary and where it came from: the adjacent frozen hour's, else the first
    offset at or after the time (the log end if none yet), kept between frozen neighbours."""
    if chained is not None:
        return chained, "chained"
    value, source = (found, "timestamp") if found is not None else (log_end, "log_end")
    return _clamp(value, lo, hi), source


def plan_slice(
    topic: str,
    hour: datetime,
    now: datetime,
    log: LogView,
    frozen: Mapping[datetime, SlicePlan],
    grace_minutes: int,
    rows_per_task: int,
    skip_retention_gaps: bool = False,
) -> SlicePlan:
    """Plan (not yet freeze) hour `hour` of `topic`, given the topic's frozen hours."""
    if hour != floor_hour(hour):
        raise ValueError(f"{hour.isoformat()} is not the start of an hour")
    check_closed(hour, now, grace_minutes)
    partitions = log.partitions(topic)
    if partitions is None:
        raise UnknownTopicError(f"topic {topic!r} does not exist on the Kafka cluster")
    partitions = sorted(partitions)

    # Watermarks first: a record produced after this read has an offset >= log_end,
    # so "no record with timestamp >= T" is answered against a log end that was true.
    marks = {p: log.watermarks(topic, p) for p in partitions}
    at_start = log.offsets_for_time(topic, partitions, to_millis(hour))
    at_end = log.offsets_for_time(topic, partitions, to_millis(hour + ONE_HOUR))

    slices, skipped = [], []
    for p in partitions:
        log_start, log_end = marks[p]
        lo, hi, lo_adj, hi_adj = _neighbours(frozen, hour, p)
        start, start_from = _boundary(lo if lo_adj else None, at_start.get(p), log_end, lo, hi)
        end, end_from = _boundary(hi if hi_adj else None, at_end.get(p), log_end, start, hi)
        if start < log_start:
            lost_to = min(log_start, end)
            if not skip_retention_gaps:
                raise RetentionGapError(
                    f"topic {topic!r} partition {p}: offsets [{start}, {lost_to}) of hour {hour_tag(hour)} "
                    f"were deleted by retention (the log now starts at {log_start}). Nothing was planned. "
                    "To land the rest of the hour and record the loss, run with skip_retention_gaps=true."
                )
            skipped.append({"partition": p, "start": start, "end": lost_to, "reason": "deleted by retention"})
            start = lost_to
        if end < start:  # only possible if a frozen neighbour is inconsistent with the log
            raise PlanningError(f"topic {topic!r} partition {p}: planned end {end} before start {start}")
        slices.append(PartitionSlice(p, start, end, log_start, log_end, start_from, end_from))

    return SlicePlan(
        topic=topic, hour=hour_tag(hour), planned_at=now.isoformat(timespec="seconds"),
        grace_minutes=grace_minutes, rows_per_task=rows_per_task, partitions=tuple(slices),
        tasks=split_tasks(slices, rows_per_task), skipped=tuple(skipped),
    )
