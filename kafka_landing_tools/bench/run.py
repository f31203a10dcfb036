"""One run of the chosen cases, one broker, the same frozen slices for every measurement: the
data the cases read is produced and frozen once, then each case's measurements run, each in a
fresh process, one case after another; the report has every section and ends with the goals."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kafka_landing_tools.bench import stack
from kafka_landing_tools.bench.data import PARTITIONS
from kafka_landing_tools.bench.goals import evaluate_goals, memory_rows
from kafka_landing_tools.bench.measure import measure, said_done, say
from kafka_landing_tools.bench.report import latest_run_span, markdown, write_latest_run
from kafka_landing_tools.bench.world import DAY_LANDED, ROOT, Bench, Case, Sizes

OUT = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Options:
    """What a run measures besides its sizes: its `cases` (`cases.CASES` in a full run), and of the
    throughput case, `contenders` (None: all of them; the tests' subsets); `workers` > 1 runs several
    measurements at once (the tests only: the timings then mean nothing); `docs_page` (a full run's:
    report.DOCS_PAGE) gets the report as its latest run."""
    cases: tuple[Case, ...]
    contenders: tuple[str, ...] | None = None
    workers: int = 1
    keep_work: bool = False
    docs_page: Path | None = None


def _start(sizes: Sizes, out: Path, on: stack.Stack, contenders: tuple[str, ...] | None) -> Bench:
    """The run's work folder and hours: the throughput hours, and the day's before them."""
    from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key

    run_id, now = uuid.uuid4().hex[:6], datetime.now(timezone.utc)
    work = out / f"work_{run_id}"
    work.mkdir(parents=True)
    first = floor_hour(now) - ONE_HOUR * (sizes.hours + 30)
    return Bench(sizes, on, work, run_id, keys=[hour_key(first + ONE_HOUR * i) for i in range(sizes.hours)],
                 day_keys=[hour_key(first - ONE_HOUR * (sizes.day_hours - i)) for i in range(sizes.day_hours)],
                 contenders=contenders, when=now.isoformat(timespec="seconds"))


def _rounds(cases: tuple[Case, ...], workers: int) -> list[tuple[Case, ...]]:
    """The cases whose jobs share the workers, round after round: each case alone in a full run (one
    worker: each measurement has the machine to itself); with workers > 1 (the tests), every case whose
    data is there in one round, then those that need what the first round lands."""
    if workers == 1:
        return [(c,) for c in cases]
    landed = {n for c in cases for n in c.lands}
    first = tuple(c for c in cases if not c.needs & landed)
    return [r for r in (first, tuple(c for c in cases if c not in first)) if r]


def _measure(bench: Bench, cases: tuple[Case, ...], workers: int) -> tuple[dict, float | None]:
    """Every case's measurements by label, and the seconds the slices took to freeze (None: none frozen)."""
    needs = {n for c in cases for n in c.needs}
    bench.produce(needs)
    for case in cases:
        if case.produce:
            case.produce(bench)
    env, m, frozen = bench.environment(), {}, None
    if job := bench.freeze_job():
        frozen = measure([job], env, bench.work)["freeze"]["seconds"]
        say(f"froze the slices in {frozen} s")
    if DAY_LANDED in needs - {n for c in cases for n in c.lands}:
        measure([bench.day_landed_job()], env, bench.work, on_done=said_done)
    for cases_at_once in _rounds(cases, workers):
        for case in cases_at_once:
            if case.prepare:
                case.prepare(bench)
        shared = [job for c in cases_at_once if not c.alone for job in c.jobs(bench)]
        m |= measure(shared, env, bench.work, workers, said_done)
        for case in (c for c in cases_at_once if c.alone):
            m |= measure(case.jobs(bench), env, bench.work, 1, said_done)
    return m, frozen


def _report(bench: Bench, options: Options, m: dict, frozen: float | None) -> dict:
    """Every measured case's part, the memory table of the throughput and memory cases, no goals yet."""
    sizes = bench.sizes
    report = {
        "when": bench.when,
        "machine": stack.machine(),
        "versions": stack.versions(),
        "parameters": {"messages": sizes.messages, "hours": sizes.hours, "day_hours": sizes.day_hours,
                       "partitions": PARTITIONS, "workers": options.workers},
        "production": bench.production,
        "freeze_seconds": frozen,
        "throughput": [],
    }
    for case in options.cases:
        report |= case.report(bench, m)
    report["memory"] = memory_rows(report["throughput"], report.get("server_memory"))
    return report


def run(sizes: Sizes, out: Path, options: Options) -> dict:
    """The chosen cases; returns the report it writes (bench.md, bench.json under `out`)."""
    if options.docs_page is not None:
        latest_run_span(options.docs_page.read_text(), options.docs_page)  # before the run, not after its minutes
    t_start = time.monotonic()
    bench = _start(sizes, out, stack.up(), options.contenders)
    ok = False
    try:
        m, frozen = _measure(bench, options.cases, options.workers)
        report = _report(bench, options, m, frozen)
        report["seconds_total"] = round(time.monotonic() - t_start, 1)
        report["goals"] = evaluate_goals(report)
        (out / "bench.json").write_text(json.dumps(report, indent=2))
        (out / "bench.md").write_text(markdown(report))
        if options.docs_page is not None:
            write_latest_run(report, options.docs_page)
            say(f"wrote the latest run into {options.docs_page}")
        print(markdown(report), flush=True)
        ok = True
        return report
    finally:
        stack.delete_topics(bench.stack.bootstrap, bench.created)
        if ok and not options.keep_work:
            shutil.rmtree(bench.work, ignore_errors=True)
