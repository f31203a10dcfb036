"""Amending an event day: the day's topic has an event-time table by day beside each of its three
tables. After the day is landed, one process on the warm engine versions and loads the day's event
partitions (their first versions), lands a late hour whose records carry event times in the day's
middle hour (not timed), then times the late hour's landing-hour load (one run, every table)
against the amendment it causes: that event day of each table versioned again and loaded (one run
per partition, as the event sensor requests them), in Iceberg only the late hour's part of it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from kafka_landing_tools.bench.measure import BenchError, Job
from kafka_landing_tools.bench.processes import only_topic
from kafka_landing_tools.bench.world import DAY, DAY_LANDED, LATE_HOUR, Bench, Case


@dataclass
class _Day:
    """One process's code location, resources and instance, and the runs the amendment makes."""
    args: object
    cfg: object
    defs: object
    resources: dict
    instance: object

    def event_runs(self) -> tuple[list[str], int]:
        """One tick of the event sensor, its requests run as the daemon would: "<table> <partition>" of
        each event partition loaded, and the number of runs (the same day of several tables is one)."""
        from dagster import build_sensor_context

        from kafka_landing.warehouse.sensors import EVENT_SENSOR_NAME, PARTITION_TAG
        from kafka_landing_tools.demo.loads import run_event_requests

        res = self.resources
        with build_sensor_context(instance=self.instance, resources={"landing": res["landing"],
                                                                     "warehouse": res["warehouse"]}) as ctx:
            tick = self.defs.resolve_sensor_def(EVENT_SENSOR_NAME)(ctx)
        runs = run_event_requests(self.defs, tick, self.instance, resources=res, raise_on_error=False)
        if not all(r.success for r in runs):
            raise BenchError(f"{self.args.topic}: an event partition load failed; its log is above")
        return [f"{key.path[-1]} {req.partition_key or req.tags[PARTITION_TAG]}" for req in tick.run_requests
                for key in req.asset_selection], len(tick.run_requests)

    def land_late_hour(self) -> None:
        from kafka_landing.definitions import landing_job_name

        late = self.args.late_hour
        landed = self.defs.resolve_job_def(landing_job_name(self.args.topic)).execute_in_process(
            instance=self.instance, resources=self.resources, raise_on_error=False, partition_key=late)
        if not landed.success:
            raise BenchError(f"landing the late hour {late} of {self.args.topic} failed; its log is above")

    def load_late_hour(self) -> None:
        from dagster import materialize

        from kafka_landing.warehouse.assets import warehouse_key
        from kafka_landing_tools.demo.loads import load_run_defs

        late = self.args.late_hour
        loaded = materialize(load_run_defs(self.defs, [warehouse_key(self.cfg.dataset, t) for t in self.cfg.tables]),
                             instance=self.instance, resources=self.resources, partition_key=late,
                             raise_on_error=False)
        if not loaded.success:
            raise BenchError(f"loading the late hour {late} of {self.args.topic} failed; its log is above")


def contender_event_amendment(args) -> dict:
    """The three stages' seconds; the records of the amended partitions and the rows the
    warehouse wrote for them (only the landing hours that changed them)."""
    os.environ["KAFKA_LANDING_WAREHOUSE_ROOT"] = args.warehouse_root
    cfg = only_topic(args)
    from dagster import DagsterInstance

    from kafka_landing.definitions import build_definitions, build_resources

    defs, resources, seconds = build_definitions(), build_resources(), {}
    with DagsterInstance.ephemeral() as instance:
        day = _Day(args, cfg, defs, resources, instance)
        t0 = time.monotonic()
        first, runs = day.event_runs()
        seconds[f"first versions of the day ({len(first)} event partitions, {runs} run(s))"] = \
            round(time.monotonic() - t0, 2)
        day.land_late_hour()
        t0 = time.monotonic()
        day.load_late_hour()
        seconds[f"the late hour's landing-hour load ({len(cfg.tables)} tables, one run)"] = \
            round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        amended, runs = day.event_runs()
        seconds[f"the amendment ({len(amended)} event partitions, {runs} run(s))"] = round(time.monotonic() - t0, 2)
    records, written = _amended_rows(resources["landing"].store(), cfg, first, amended, args.topic)
    return {"records": records, "written": written, "stages": seconds}


def _amended_rows(store, cfg, first: list[str], amended: list[str], topic: str) -> tuple[int, int]:
    """The rows of the amended partitions' latest versions, and of the landing hours that changed them."""
    from kafka_landing.warehouse.by_event.versions import latest_manifest

    rows = written = 0
    for name in amended:
        table, partition = name.split(" ")
        m = latest_manifest(store, cfg.dataset, table[:-len("__by_event")], partition)
        if not m.amended and partition in {p.split(" ")[1] for p in first}:
            raise BenchError(f"{topic}: {name} was not amended (version {m.version})")
        rows += m.rows
        written += sum(m.hours[h]["rows"] for h in m.changed_hours if h in m.hours)
    return rows, written


def prepare(bench: Bench) -> None:
    """The late hour lands into a copy of the day's landing root: the other cases' stays as it was."""
    bench.copy_root("landing", "landing_events")


def jobs(bench: Bench) -> list[Job]:
    return [Job("event amendment", "event_amendment",
                bench.argv(bench.day, bench.day_keys, "--warehouse-root", str(bench.work / "warehouse_events"),
                           "--late-hour", bench.late_key, root="landing_events"),
                None, f"{bench.day}: the event days the late hour amended")]


def report(bench: Bench, m: dict) -> dict:
    return {"amendment": {"late_records": bench.late_records, "hours": len(bench.day_keys), **m["event amendment"]}}


CASE = Case("amendment", jobs, report, {"event_amendment": contender_event_amendment},
            needs=frozenset({DAY, LATE_HOUR, DAY_LANDED}), prepare=prepare)

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
