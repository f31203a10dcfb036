"""A dry-run plan of a backfill: what landing a range of hours would read, without freezing anything.

Why: before launching a backfill an operator wants to see, per hour and partition, the
offsets and record counts that would be read, which hours are already frozen, landed and
loaded, and what would stop the run (a retention gap, an outlier timestamp), all at once
rather than one failed run at a time.

The hours are planned oldest first, each against the frozen hours plus the dry-run plans
of the earlier hours (in memory only), so the result equals what freezing those hours in
that order would freeze when no data arrives in between. Nothing is written.

Pure: no Dagster, no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Callable, Mapping

from kafka_landing.config import TopicConfig
from kafka_landing.handoff.manifests import content_sha
from kafka_landing.kafka_slices.plan import (
    HourNotClosedError,
    PlanningError,
    SlicePlan,
    UnknownTopicError,
    check_closed,
    plan_slice,
)
from kafka_landing.naming import ONE_HOUR, Hour, done_file_path, floor_hour
from kafka_landing.store.base import LandingStore

FROZEN, PLANNED, OPEN, ERROR = "frozen", "would freeze", "open", "error"
MAX_HOURS = 24 * 366  # a typo in a year should not plan a century

# (dataset, table, hour tag) -> the warehouse's load record ({"sha256", ...}) or None
LoadedLookup = Callable[[str, str, str], "dict | None"]


@dataclass(frozen=True)
class HourRow:
    hour: Hour  # 2026-11-20T13
    state: str  # FROZEN, PLANNED, OPEN or ERROR
    plan: SlicePlan | None
    error: str | None = None
    landed: bool = False  # a done file exists for every table of the topic
    loaded: bool = False  # the warehouse recorded a load of every one of those done files' content
    before_first_hour: bool = False  # not a partition of the topic: Dagster cannot land it until first_hour moves

    @property
    def records(self) -> int | None:
        return self.plan.records if self.plan else None


def hours_between(first: datetime, last: datetime) -> list[datetime]:
    """Both ends included, as a Dagster backfill range is."""
    if first != floor_hour(first) or last != floor_hour(last):
        raise ValueError(f"{first.isoformat()} .. {last.isoformat()}: both ends must be starts of hours")
    if first > last:
        raise ValueError(f"the range starts at {Hour(first).key}, after its end {Hour(last).key}: swap them")
    n = int((last - first) / ONE_HOUR) + 1
    if n > MAX_HOURS:
        raise ValueError(f"{Hour(first).key} .. {Hour(last).key} is {n} hours; plan at most {MAX_HOURS} at once")
    return [first + ONE_HOUR * i for i in range(n)]


def _landed_loaded(store: LandingStore, cfg: TopicConfig, hour: datetime,
                   loaded: LoadedLookup | None) -> tuple[bool, bool]:
    shas = []
    for table in cfg.tables:
        rel = done_file_path(cfg.dataset, table, hour)
        if not store.exists(rel):
            return False, False
        shas.append((table, content_sha(store.read_bytes(rel))))
    if loaded is None:
        return True, False
    return True, all((loaded(cfg.dataset, t, Hour(hour)) or {}).get("sha256") == sha for t, sha in shas)


def dry_run(
    cfg: TopicConfig, first: datetime, last: datetime, now: datetime, log, store: LandingStore,
    frozen: Mapping[datetime, SlicePlan], loaded: LoadedLookup | None = None,
    skip_retention_gaps: bool = False, first_hour: datetime | None = None,
) -> list[HourRow]:
    """One row per hour of [first, last], oldest first. `frozen` is `freeze.load_frozen(store, topic)`;
    `first_hour` the topic's (`freeze.settled_first_hour`): earlier hours are planned but flagged.

    A planning error of one hour (retention gap, outlier timestamp, rewound log) becomes that
    hour's error text; a topic missing from Kafka fails the whole plan."""
    hours = hours_between(first, last)
    known = dict(frozen)  # never the caller's mapping: dry-run plans stay here
    rows = []
    for hour in hours:
        row = _plan_hour(cfg, hour, now, log, store, frozen, known, loaded, skip_retention_gaps)
        if first_hour is not None and hour < first_hour:
            row = replace(row, before_first_hour=True)
        rows.append(row)
    return rows


def _plan_hour(cfg: TopicConfig, hour: datetime, now: datetime, log, store: LandingStore,
               frozen: Mapping[datetime, SlicePlan], known: dict, loaded: LoadedLookup | None,
               skip_retention_gaps: bool) -> HourRow:
    """One hour's row; a planned slice joins `known`, so the next hour chains to it."""
    landed, was_loaded = _landed_loaded(store, cfg, hour, loaded)
    if hour in frozen:
        return HourRow(Hour(hour), FROZEN, frozen[hour], None, landed, was_loaded)
    try:
        check_closed(hour, now, cfg.grace_minutes)
    except HourNotClosedError as exc:
        return HourRow(Hour(hour), OPEN, None, str(exc), landed, was_loaded)
    try:
        plan = plan_slice(
            cfg.topic, hour, now, log, known, grace_minutes=cfg.grace_minutes,
            rows_per_task=cfg.rows_per_task, skip_retention_gaps=skip_retention_gaps,
            max_future_minutes=cfg.max_future_minutes, on_future_timestamp=cfg.on_future_timestamp,
        )
    except UnknownTopicError:
        raise
    except PlanningError as exc:
        return HourRow(Hour(hour), ERROR, None, str(exc), landed, was_loaded)
    known[hour] = plan
    return HourRow(Hour(hour), PLANNED, plan, None, landed, was_loaded)


def _notes(plan: SlicePlan, partition: int) -> str:
    notes = [f"retention gap [{s['start']}, {s['end']}) skipped" for s in plan.skipped if s["partition"] == partition]
    notes += [f"outlier offset {f['offset']} stamped {f['timestamp']} landed where it sits"
              for f in plan.future_records if f["partition"] == partition]
    return "; ".join(notes)


BEFORE_FIRST_HOUR = "before the topic's first hour: move first_hour earlier to land it"


def table_rows(rows: list[HourRow]) -> list[dict]:
    """One flat dict per hour and partition (one per hour without a plan): for text, Markdown, JSON."""
    out = []
    for r in rows:
        flags = {"landed": "yes" if r.landed else "no", "loaded": "yes" if r.loaded else "no"}
        first = [BEFORE_FIRST_HOUR] if r.before_first_hour else []
        if r.plan is None or not r.plan.partitions:
            note = "; ".join(first + [(r.error or "no partitions").replace("\n", " ")])
            out.append({"hour": r.hour, "state": r.state, "partition": "", "start": "", "end": "", "records": "",
                        **flags, "note": note})
            continue
        for ps in r.plan.partitions:
            note = "; ".join(first + [n for n in [_notes(r.plan, ps.partition)] if n])
            out.append({"hour": r.hour, "state": r.state, "partition": ps.partition, "start": ps.start,
                        "end": ps.end, "records": ps.records, **flags, "note": note})
    return out


COLUMNS = ("hour", "state", "partition", "start", "end", "records", "landed", "loaded", "note")


def format_table(rows: list[HourRow]) -> str:
    """A fixed-width text table, then a total line."""
    flat = [{c: str(d[c]) for c in COLUMNS} for d in table_rows(rows)]
    widths = {c: max([len(c)] + [len(d[c]) for d in flat]) for c in COLUMNS[:-1]}
    line = lambda d: "  ".join(d[c].ljust(widths[c]) for c in COLUMNS[:-1]) + "  " + d["note"]  # noqa: E731
    out = [line({c: c for c in COLUMNS}).rstrip()] + [line(d).rstrip() for d in flat]
    return "\n".join(out) + "\n" + plan_summary(rows)


def format_markdown(rows: list[HourRow]) -> str:
    flat = table_rows(rows)
    esc = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(esc(d[c]) for c in COLUMNS) + " |" for d in flat]
    return "\n".join(out) + "\n\n" + plan_summary(rows)


def plan_summary(rows: list[HourRow]) -> str:
    by = lambda s: sum(1 for r in rows if r.state == s)  # noqa: E731
    would = sum(r.records or 0 for r in rows if r.state == PLANNED)
    return (f"{len(rows)} hours: {by(FROZEN)} frozen, {by(PLANNED)} would freeze ({would} records), "
            f"{by(OPEN)} open, {by(ERROR)} with errors; {sum(r.landed for r in rows)} landed, "
            f"{sum(r.loaded for r in rows)} loaded{_before_first(rows)}. Nothing was written.")


def _before_first(rows: list[HourRow]) -> str:
    n = sum(r.before_first_hour for r in rows)
    return f"; {n} before the topic's first hour (no partitions: move first_hour earlier to land them)" if n else ""
