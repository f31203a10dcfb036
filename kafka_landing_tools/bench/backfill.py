"""Backfill: the routed day landed by one run over its hours, against one single-hour run per
hour one after another in one process (one Spark session for all: the cheapest the single-hour
way gets), and against a fresh process per hour, as the hourly schedule launches them; and the
same records landed in one run as one table without event time (issue 48: what routing into three
tables and splitting by event hour cost). Each way lands into a landing root of its own from the
same frozen slices; the one run's root is the one the warehouse cases load."""

from __future__ import annotations

import subprocess
import sys

from kafka_landing_tools.bench.measure import Job
from kafka_landing_tools.bench.processes import contender_kafka_landing, landed_rows, only_topic
from kafka_landing_tools.bench.world import DAY, DAY_LANDED, Bench, Case


def contender_hourly_processes(args) -> int:
    """The hours as the hourly schedule launches them: one fresh process per hour (Python, Dagster,
    a Spark session each), one after another."""
    for h in args.hour_keys:
        subprocess.run([sys.executable, "-m", "kafka_landing_tools.bench", "--contender", "kafka_landing",
                        "--topic", args.topic, "--hour-keys", h, "--landing-root", args.landing_root,
                        "--out-dir", args.out_dir], check=True, stdout=subprocess.DEVNULL)
    return landed_rows(args, only_topic(args))


PLAIN_TABLE = "day_plain"


def contender_kafka_landing_plain(args) -> int:
    """The day's records landed in one run as one table, no routing, no event time."""
    import os
    from pathlib import Path

    import yaml

    full = yaml.safe_load(Path(os.environ["KAFKA_LANDING_TOPICS_CONFIG"]).read_text())
    plain = Path(args.out_dir) / f"topics_plain_{os.getpid()}.yaml"
    full["topics"][args.topic] = {"dataset": "bench", "table": PLAIN_TABLE, "rows_per_task": 100_000}
    plain.write_text(yaml.safe_dump(full))
    os.environ["KAFKA_LANDING_TOPICS_CONFIG"] = str(plain)
    return contender_kafka_landing(args)


def prepare(bench: Bench) -> None:
    """The other ways land into roots of their own with the same frozen slices: every way lands
    hours never landed before."""
    from kafka_landing.naming import slice_dir

    for root in ("landing_runs", "landing_processes", "landing_plain"):
        bench.copy_root("landing", root, slice_dir(bench.day))


def jobs(bench: Bench) -> list[Job]:
    day, keys = bench.day, bench.day_keys
    n, records = len(keys), bench.records(day, keys)
    return [
        Job("backfill one run", "kafka_landing", bench.argv(day, keys), records, f"{day}, {n} hours in one run"),
        Job("backfill single-hour runs", "kafka_landing", bench.argv(day, keys, "--mode", "runs", root="landing_runs"),
            records, f"{day}, {n} hours in {n} runs"),
        Job("backfill hourly processes", "hourly_processes", bench.argv(day, keys, root="landing_processes"),
            records, f"{day}, {n} hours in {n} processes"),
        Job("backfill one run, one table", "kafka_landing_plain", bench.argv(day, keys, root="landing_plain"),
            records, f"{day}, {n} hours in one run as one table without event time"),
    ]


def report(bench: Bench, m: dict) -> dict:
    return {"backfill": {"hours": len(bench.day_keys), "one_run": m["backfill one run"],
                         "single_runs": m["backfill single-hour runs"], "processes": m["backfill hourly processes"],
                         "plain": m["backfill one run, one table"]}}


CASE = Case("backfill", jobs, report, {"hourly_processes": contender_hourly_processes,
                                       "kafka_landing_plain": contender_kafka_landing_plain}, needs=frozenset({DAY}),
            lands=frozenset({DAY_LANDED}), prepare=prepare)

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
