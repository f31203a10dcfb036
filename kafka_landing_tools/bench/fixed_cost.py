"""Fixed cost: what a run costs before its records. *Process start* imports, builds the
definitions, the job, the resources and an instance, and exits without a run; *empty hour* does
the same, then freezes and lands an hour of a topic with no record."""

from __future__ import annotations

from kafka_landing_tools.bench.measure import Job
from kafka_landing_tools.bench.processes import landing_job
from kafka_landing_tools.bench.world import EMPTY, Bench, Case


def contender_startup(args) -> int:
    """Process start alone: Python, the imports, the definitions and an instance; no run."""
    from dagster import DagsterInstance

    landing_job(args)
    with DagsterInstance.ephemeral():
        pass
    return 0


def jobs(bench: Bench) -> list[Job]:
    first = bench.keys[:1]
    return [Job("process start", "startup", bench.argv(bench.empty, first), 0),
            Job("empty hour", "kafka_landing", bench.argv(bench.empty, first), 0, f"{bench.empty} {first[0]}")]


def report(bench: Bench, m: dict) -> dict:
    return {"fixed_cost": {"process_start": m["process start"], "empty_hour": m["empty hour"]}}


CASE = Case("fixed_cost", jobs, report, {"startup": contender_startup}, needs=frozenset({EMPTY}))

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
