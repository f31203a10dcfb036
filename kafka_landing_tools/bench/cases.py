"""Every case, in the order a full run measures them, and
every process a measurement can run (`--contender NAME`)."""

from __future__ import annotations

from typing import Callable

from kafka_landing_tools.bench import (
    amendment,
    backfill,
    fixed_cost,
    freshness,
    many_topics,
    memory,
    processes,
    replay,
    stages,
    throughput,
    warehouse_load,
    widening,
    year_table,
)
from kafka_landing_tools.bench.world import Case

CASES: tuple[Case, ...] = tuple(m.CASE for m in (throughput, stages, memory, fixed_cost, backfill, replay,
                                                 warehouse_load, amendment, widening, year_table, many_topics,
                                                 freshness))
BY_NAME = {c.name: c for c in CASES}


def contenders() -> dict[str, Callable]:
    """Each process by name: the shared ones and every case's."""
    found = dict(processes.CONTENDERS)
    for case in CASES:
        found |= case.contenders
    return found


def chosen(names: list[str] | None) -> list[Case]:
    """The cases of these names in the run's order (all of them without names)."""
    unknown = sorted(set(names or ()) - set(BY_NAME))
    if unknown:
        raise ValueError(f"no case {', '.join(unknown)}: the cases are {', '.join(BY_NAME)}")
    return [c for c in CASES if names is None or c.name in names]
