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

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Mapping

from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.handoff.manifests import content_sha
from kafka_landing.kafka_slices.freeze import load_frozen, settled_first_hour
from kafka_landing.kafka_slices.plan import (
    HourNotClosedError,
    LogView,
    PlanningError,
    PlanRules,
    SlicePlan,
    UnknownTopicError,
    plan_slice,
)
from kafka_landing.naming import Hour, dead_letter_manifest_path, done_file_path
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
    gone: tuple[tuple[int, int, int], ...] = ()  # a frozen hour's (partition, start, end) Kafka no longer holds
    archived: bool = False  # landed before: a landing with `source: archive` (or `auto`) can read its archive
    stale: bool = False  # landed under another routing or event time than the config's now: replay it

    @property
    def records(self) -> int | None:
        return self.plan.records if self.plan else None


@dataclass(frozen=True)
class TopicHistory:
    """What is already there of a topic's hours: its frozen slices, its done files (in `store`),
    the warehouse's loads of them, and its first hour (the hours before it are no partitions)."""

    store: LandingStore
    frozen: Mapping[Hour, SlicePlan]  # `freeze.load_frozen`
    loaded: LoadedLookup | None = None
    first_hour: Hour | None = None  # `freeze.settled_first_hour`

    @classmethod
    def read(cls, store: LandingStore, config: LandingConfig, topic: str,
             loaded: LoadedLookup | None = None) -> TopicHistory:
        return cls(store, load_frozen(store, topic), loaded, settled_first_hour(store, config, topic))

    def landed_loaded(self, cfg: TopicConfig, hour: Hour) -> tuple[bool, bool]:
        shas = []
        for table in cfg.tables:
            rel = done_file_path(cfg.dataset, table, hour)
            if not self.store.exists(rel):
                return False, False
            shas.append((table, content_sha(self.store.read_bytes(rel))))
        if self.loaded is None:
            return True, False
        return True, all((self.loaded(cfg.dataset, t, hour) or {}).get("sha256") == sha for t, sha in shas)

    def archived_stale(self, cfg: TopicConfig, hour: Hour) -> tuple[bool, bool]:
        """(the hour has an archive, it was landed under another shape than `cfg`'s), from its
        dead-letter manifest: its `shape`, or for one written before it had that, its tables."""
        manifest = self.store.read_json(dead_letter_manifest_path(cfg.topic, hour))
        if manifest is None:
            return False, False
        if "shape" in manifest:
            return True, manifest["shape"] != cfg.landing_shape
        return True, sorted(map(tuple, manifest.get("tables", ()))) != [(cfg.dataset, t) for t in cfg.tables]


def hours_between(first: Hour, last: Hour) -> list[Hour]:
    """Both ends included, as a Dagster backfill range is."""
    if first > last:
        raise ValueError(f"the range starts at {first.key}, after its end {last.key}: swap them")
    n = last.number - first.number + 1
    if n > MAX_HOURS:
        raise ValueError(f"{first.key} .. {last.key} is {n} hours; plan at most {MAX_HOURS} at once")
    return [first.plus(i) for i in range(n)]


def dry_run(cfg: TopicConfig, first: Hour, last: Hour, now: datetime, log: LogView, history: TopicHistory,
            skip_retention_gaps: bool = False) -> list[HourRow]:
    """One row per hour of [first, last], oldest first; the hours before `history.first_hour`
    are planned but flagged.

    A planning error of one hour (retention gap, outlier timestamp, rewound log) becomes that
    hour's error text; a topic missing from Kafka fails the whole plan."""
    rules = PlanRules.of(cfg, skip_retention_gaps)
    known = dict(history.frozen)  # never the caller's mapping: dry-run plans stay here
    marks: dict[int, tuple[int, int]] = {}  # a partition's watermarks, asked once for the range
    present: set[int] | None = None  # the topic's partitions now (none: deleted since), asked once
    rows = []
    for hour in hours_between(first, last):
        gone: tuple = ()
        if hour in history.frozen:
            state, plan, error = FROZEN, history.frozen[hour], None
            if present is None:
                present = set(log.partitions(cfg.topic) or ())
            gone = _gone(log, plan, present, marks)
        else:
            state, plan, error = _plan_hour(cfg.topic, hour, now, log, known, rules)
        before = history.first_hour is not None and hour < history.first_hour
        archived, stale = history.archived_stale(cfg, hour) if state == FROZEN else (False, False)
        rows.append(HourRow(hour, state, plan, error, *history.landed_loaded(cfg, hour), before_first_hour=before,
                            gone=gone, archived=archived, stale=stale))
    return rows


def _gone(log: LogView, plan: SlicePlan, present: set[int],
          marks: dict[int, tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """The frozen slice's offsets Kafka no longer holds, per partition: below the log's start
    (retention, a deleted and re-created topic), past its end (a truncated log), or in a
    partition (or topic) that is no more. Landing the hour again from Kafka would fail on them;
    its landed files are what remains of them. `present`: the topic's partitions now; `marks`: the
    watermarks asked so far."""
    out = []
    for p in plan.partitions:
        if p.records == 0:
            continue
        if p.partition not in present:
            out.append((p.partition, p.start, p.end))
            continue
        if p.partition not in marks:
            marks[p.partition] = log.watermarks(plan.topic, p.partition)
        start, end = marks[p.partition]
        if p.start < start:
            out.append((p.partition, p.start, min(start, p.end)))
        if end < p.end:
            out.append((p.partition, max(end, p.start), p.end))
    return tuple(out)


def _plan_hour(topic: str, hour: Hour, now: datetime, log: LogView, known: dict[Hour, SlicePlan],
               rules: PlanRules) -> tuple[str, SlicePlan | None, str | None]:
    """(state, plan, error) of an hour not frozen; a planned slice joins `known`, so the next hour chains to it."""
    try:
        plan = plan_slice(topic, hour, now, log, known, rules)
    except HourNotClosedError as exc:  # before Kafka is asked anything
        return OPEN, None, str(exc)
    except UnknownTopicError:
        raise
    except PlanningError as exc:
        return ERROR, None, str(exc)
    known[hour] = plan
    return PLANNED, plan, None


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
            gone = [f"Kafka no longer holds [{a}, {b}): " + ("a landing with source archive (or auto) reads the hour's "
                                                            "archive" if r.archived else "no archive either: lost")
                    for p, a, b in r.gone if p == ps.partition]
            stale = ["landed under another routing or event time: replay it"] if r.stale and ps is r.plan.partitions[0] else []
            note = "; ".join(first + [n for n in [_notes(r.plan, ps.partition)] if n] + gone + stale)
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
            f"{sum(r.loaded for r in rows)} loaded{_before_first(rows)}{_gone_hours(rows)}. Nothing was written.")


def _gone_hours(rows: list[HourRow]) -> str:
    n = sum(bool(r.gone) for r in rows)
    archived = sum(bool(r.gone) and r.archived for r in rows)
    stale = sum(r.stale for r in rows)
    out = (f"; {n} frozen hour(s) whose offsets Kafka no longer holds in part: {archived} would be read from their "
           f"archive by a landing with source auto (or archive), {n - archived} have none") if n else ""
    return out + (f"; {stale} landed under another routing or event time than the config's (replay them)"
                  if stale else "")


def _before_first(rows: list[HourRow]) -> str:
    n = sum(r.before_first_hour for r in rows)
    return f"; {n} before the topic's first hour (no partitions: move first_hour earlier to land them)" if n else ""
