"""Warehouse load: after the day is landed in one run, the Iceberg warehouse assets of every table
of the day (with their conservation checks), each way in a fresh process and a warehouse of its
own: every landed hour in one run (Iceberg's range load: one Spark job and one commit per table),
the same hours one by one with its single-hour load (a run per hour, one after another in one
process: the cheapest that way gets), and one hour alone (the run's fixed cost). The rows in the
tables must equal the slices' records."""

from __future__ import annotations

import os

from kafka_landing_tools.bench.data import day_tables
from kafka_landing_tools.bench.measure import BenchError, Job
from kafka_landing_tools.bench.processes import only_topic, partitions, runs_of
from kafka_landing_tools.bench.world import DAY, DAY_LANDED, Bench, Case


def contender_warehouse(args) -> int:
    """The warehouse assets of every table of the topic over the hours: one run, or (`--mode runs`)
    one run per hour in this process, as load runs requested for those tables would do it; returns
    the rows now in the tables."""
    os.environ["KAFKA_LANDING_WAREHOUSE_ROOT"] = args.warehouse_root
    cfg = only_topic(args)
    from dagster import DagsterInstance, materialize

    from kafka_landing.definitions import build_definitions, build_resources
    from kafka_landing.naming import hour_from_key, hour_tag
    from kafka_landing.store import open_store
    from kafka_landing.warehouse.assets import warehouse_key
    from kafka_landing_tools.demo.loads import load_run_defs

    defs = build_definitions()
    resources = build_resources()
    assets = load_run_defs(defs, [warehouse_key(cfg.dataset, t) for t in cfg.tables])
    with DagsterInstance.ephemeral() as instance:
        for hours in runs_of(args):
            result = materialize(assets, instance=instance, resources=resources, raise_on_error=False,
                                 **partitions(hours))
            if not result.success:
                raise BenchError(f"loading {cfg.tables} hours {hours[0]}..{hours[-1]} failed; its log is above")
    backend = resources["warehouse"].backend(open_store(args.landing_root))
    return sum(backend.partition_rows(cfg.dataset, t, hour_tag(hour_from_key(h))) or 0 for t in cfg.tables
               for h in args.hour_keys)


def jobs(bench: Bench) -> list[Job]:
    day, keys, last = bench.day, bench.day_keys, bench.day_keys[-1:]
    what = f"{day} ({', '.join(day_tables())})"

    def load(label: str, folder: str, hour_keys: list[str], *more: str) -> Job:
        return Job(label, "warehouse",
                   bench.argv(day, hour_keys, "--warehouse-root", str(bench.work / folder), *more),
                   bench.records(day, hour_keys), f"{what}, {len(hour_keys)} hours from {hour_keys[0]}, in Iceberg")

    return [load("warehouse all hours", "warehouse_all", keys),
            load("warehouse one hour", "warehouse_one", last),
            load("warehouse single-hour runs", "warehouse_runs", keys, "--mode", "runs")]


def report(bench: Bench, m: dict) -> dict:
    return {"warehouse": {"tables": day_tables(), "hours": len(bench.day_keys), "all_hours": m["warehouse all hours"],
                          "one_hour": m["warehouse one hour"], "single_runs": m["warehouse single-hour runs"]}}


CASE = Case("warehouse_load", jobs, report, {"warehouse": contender_warehouse}, needs=frozenset({DAY, DAY_LANDED}))

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
