"""An event-time table and a landing-hour table after a year: a reader's plan of one day's query
against a week-old table's, and the files of a day once upkeep compacted the finished days.

The tables are made by the warehouse (its spec and properties), then given a day's files per
commit as a year of loads leaves them: one file per landing hour (that brought records of the day,
for the event table: 24 here), added with pyiceberg (daily commits, not hourly: 8,760 commits
would take the case minutes and leave the same merged manifests). Then the year's tables are
upkept with the stack's Spark (`upkeep`: compaction, through the product) and planned again."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kafka_landing_tools.bench.measure import BenchError, Job
from kafka_landing_tools.bench.world import Bench, Case

WEEK_DAYS, FILES_PER_DAY, ROWS_PER_FILE = 7, 24, 50
IDENT = ("bench", "orders__by_event")
LANDING = ("bench", "orders")
_SCHEMA = {"type": "struct", "fields": [{"name": "order_id", "type": "string", "nullable": True, "metadata": {}},
                                        {"name": "created_at", "type": "timestamp", "nullable": True, "metadata": {}}]}
_START = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _day_files(folder: Path, day: int, event: bool) -> list[str]:
    """A day's files as loads leave them: one per landing hour (that brought records of the day)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    tag = (_START + timedelta(days=day)).strftime("%Y-%m-%d")
    paths = []
    for h in range(FILES_PER_DAY):
        hour = (_START + timedelta(days=day, hours=h)).strftime("%Y-%m-%dT%H")
        when = _START + timedelta(days=day, hours=h)
        path = folder / f"{day}_{h}.parquet"
        columns = {"order_id": [f"{day}-{h}-{i}" for i in range(ROWS_PER_FILE)],
                   "created_at": pa.array([when] * ROWS_PER_FILE, pa.timestamp("us", tz="UTC"))}
        pq.write_table(pa.table({**columns, **({"event_day": [tag] * ROWS_PER_FILE} if event else {}),
                                 "hour": [hour] * ROWS_PER_FILE}), path)
        paths.append(str(path))
    return paths


def _table_of(root: Path, days: int, event: bool = True):
    """(the backend, the table) holding `days` days, made as the warehouse makes it: the event-time
    table, or the landing-hour one."""
    from kafka_landing.warehouse.iceberg import IcebergWarehouse

    wh = IcebergWarehouse(str(root / "warehouse"))
    backend, ident = (wh.by_event("day", "created_at"), IDENT) if event else (wh, LANDING)
    backend.commits.create(ident, _SCHEMA, [(_day_files(root / "files", 0, event), {"kafka-landing.bench": "day 0"})])
    for d in range(1, days):
        backend.table(*ident).add_files(_day_files(root / "files", d, event), check_duplicate_files=False)
    return backend, backend.table(*ident)


def _plan(t, day: int) -> tuple[float, int]:
    """(the best of 7 plans of one day's query, in ms; the files it plans): by its event day, or by
    its landing hours' range on a landing-hour table."""
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

    tag = (_START + timedelta(days=day)).strftime("%Y-%m-%d")
    event = "event_day" in {f.name for f in t.schema().fields}
    where = EqualTo("event_day", tag) if event else And(GreaterThanOrEqual("hour", f"{tag}T00"),
                                                         LessThanOrEqual("hour", f"{tag}T23"))
    best, files = float("inf"), 0
    for _ in range(7):
        t0 = time.perf_counter()
        files = len(list(t.scan(row_filter=where).plan_files()))
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1), files


def _most_files_a_day(t) -> int:
    per: dict[str, int] = {}
    for task in t.scan().plan_files():
        per[task.file.partition[0]] = per.get(task.file.partition[0], 0) + 1
    return max(per.values())


def _year_of(root: Path, days: int, spark, event: bool) -> dict:
    """One table's year (event-time, or landing-hour), planned before and after upkeep, against
    its week-old table; its rows checked after compaction."""
    from kafka_landing.warehouse.iceberg import upkeep

    ident = IDENT if event else LANDING
    _, week = _table_of(root / f"{ident[1]}_week", WEEK_DAYS, event)
    week_ms, _ = _plan(week, WEEK_DAYS // 2)
    t0 = time.monotonic()
    backend, year = _table_of(root / f"{ident[1]}_year", days, event)
    built = round(time.monotonic() - t0, 1)
    before_ms, before_files = _plan(year, days // 2)
    manifests_before = len(year.current_snapshot().manifests(year.io))
    t0 = time.monotonic()
    [kept] = upkeep(backend, timedelta(days=3650), now=_START + timedelta(days=days + 2), spark=lambda: spark,
                    tables=[ident])
    compact_seconds = round(time.monotonic() - t0, 1)
    year = backend.table(*ident)
    after_ms, after_files = _plan(year, days // 2)
    rows = sum(task.file.record_count for task in year.scan().plan_files())
    if rows != days * FILES_PER_DAY * ROWS_PER_FILE:
        raise BenchError(f"the compacted year of {'.'.join(ident)} holds {rows} rows, not the "
                         f"{days * FILES_PER_DAY * ROWS_PER_FILE} it was given: the compaction lost or doubled rows")
    if not event:  # an hour's rows, counted from the compacted day's row groups
        hour = (_START + timedelta(days=days // 2, hours=5)).strftime("%Y-%m-%dT%H")
        if (counted := backend.partition_rows(*LANDING, hour)) != ROWS_PER_FILE:
            raise BenchError(f"hour {hour} of the compacted landing year counts {counted} rows, not {ROWS_PER_FILE}")
    return {"records": rows, "days": days, "files_per_day_before": before_files, "week_plan_ms": week_ms,
            "year_plan_ms_before": before_ms, "year_plan_ms": after_ms, "files_per_day_after": after_files,
            "most_files_a_day": _most_files_a_day(year), "partitions_compacted": kept.partitions_compacted,
            "manifests_before": manifests_before, "manifests": len(year.current_snapshot().manifests(year.io)),
            "built_seconds": built, "compact_seconds": compact_seconds}


def contender_year_table(args) -> dict:
    from kafka_landing import defaults
    from kafka_landing.spark_setup import open_session, session_config

    root, days = Path(args.warehouse_root), int(args.days)
    spark = open_session(os.environ.get("SPARK_REMOTE") or defaults.SPARK_CONNECT_URL, session_config())
    return {**_year_of(root, days, spark, event=True), "landing": _year_of(root, days, spark, event=False)}


def jobs(bench: Bench) -> list[Job]:
    days = bench.sizes.year_days
    return [Job("a year of an event table", "year_table",  # and of a landing-hour table, in the same process
                ["--warehouse-root", str(bench.work / "year_table"), "--out-dir", str(bench.work), "--days", str(days)],
                days * FILES_PER_DAY * ROWS_PER_FILE, f"an event table of {days} days, {FILES_PER_DAY} files each")]


def report(bench: Bench, m: dict) -> dict:
    return {"year_table": m["a year of an event table"]}


CASE = Case("year_table", jobs, report, {"year_table": contender_year_table})

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
