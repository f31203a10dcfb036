"""SIGKILL at every step of landing and loading, then a re-run: checked offset by offset.

Each crash point gets a topic of its own (same demo data, same hour) in one
deployment, and a real `dagster asset materialize` process killed at that step
(`KAFKA_LANDING_CRASH_AT`). Every run executes its steps in its own process
(the in-process executor), so the whole run dies, as on a lost machine. Crash runs go two at a time;
then one clean run re-runs what every crash interrupted (one Spark start
instead of seven).

Right after each crash, whatever a consumer of done files can see must already
be exact; after the re-run, every produced offset is in its table once or is a
dead letter, each done file lists exactly the files of its folder, and each
warehouse hour holds exactly its done file's rows.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import pytest

from kafka_landing.crash_points import STEPS
from kafka_landing.naming import slice_manifest_path
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.faults.harness import (
    RUN_TIMEOUT,
    Deployment,
    HourOnDisk,
    Run,
    Started,
    WebHour,
    check_landed_exactly,
    check_loaded_exactly,
    deployment,
    finish,
    free_slot,
    killed_by_sigkill,
    read_hour,
    read_warehouse_hour,
    slots_held,
    start,
    step_key,
    warehouse_problems,
    web_topic,
)

WAREHOUSE_STEPS = tuple(s for s in STEPS if s.startswith("warehouse:"))


def slug(step: str) -> str:
    return step.replace(":", "_")


def batches(steps) -> list[list[str]]:
    """Crash runs two at a time (each on its own topic), never two loads together: the
    loads share one Dagster instance."""
    loads = [s for s in steps if s in WAREHOUSE_STEPS]
    # Landing steps first: a crash while planning starts no Spark and can go alone, last.
    rest = sorted((s for s in steps if s not in WAREHOUSE_STEPS), key=lambda s: s.startswith("slices:"))
    out = []
    while loads or rest:
        batch = [loads.pop(0)] if loads else []
        while len(batch) < 2 and rest:
            batch.append(rest.pop(0))
        out.append(batch)
    return out


@dataclass
class Crash:
    step: str
    data: WebHour
    run: Run
    slice_frozen: bool
    after: HourOnDisk  # what the done files showed right after the crash
    loaded_after: dict  # table -> warehouse rows right after the crash (None: no hour file)
    warehouse_after: list[str]  # problems of the hour files that existed right after the crash
    slots_after: list  # (pool, run id, step) claimed right after the crash
    files_after: list  # landing files in the topic's table folders right after the crash, listed or not


@dataclass
class Crashes:
    dep: Deployment
    cases: dict[str, Crash]
    rerun: Run
    rerun_blocked: set[str]  # pools the re-run found held by a killed run


BLOCKED = re.compile(r"Step blocked by limit for pool (\S+)")


def wait_freeing_dead_slots(started: Started, dep: Deployment, dead_runs: list[str]) -> set[str]:
    """Wait for the re-run. Each time it blocks on a pool whose slot a killed run still holds,
    free that one slot as an operator would (Deployment > Concurrency), so that it can go on.
    Returns the pools it was blocked on."""
    blocked: set[str] = set()
    deadline = time.monotonic() + RUN_TIMEOUT
    while started.proc.poll() is None and time.monotonic() < deadline:
        found = set(BLOCKED.findall(started.out_path.read_text(errors="replace"))) - blocked
        if found:
            blocked |= found
            for pool, run_id, step in slots_held(dep):
                if pool in found and run_id in dead_runs:
                    free_slot(dep, run_id, step)
        time.sleep(0.5)
    return blocked


@pytest.fixture(scope="module")
def crashes(produce_web_hour, bootstrap, registry_url, tmp_path_factory) -> Crashes:
    now = utcnow()
    data = {step: produce_web_hour(slug(step), now=now) for step in STEPS}
    hour = data[STEPS[0]].hour
    dep = deployment(tmp_path_factory.mktemp("crash_points"),
                     {d.topic: web_topic(f"c_{slug(step)}") for step, d in data.items()}, bootstrap, registry_url)
    cases = {}
    for batch in batches(STEPS):
        started = {}
        for step in batch:
            d, in_warehouse = data[step], step in WAREHOUSE_STEPS
            # Loads are killed in the shared instance (the re-run must meet what they leave
            # there); landing runs get an instance each, so that two can run at once.
            where = dep if in_warehouse else dep.with_own_instance(f"dagster_home_{slug(step)}")
            select = dep.landing_assets(d.topic) + (dep.warehouse_assets(d.topic) if in_warehouse else [])
            started[step] = start(where, select, hour, crash=step, name=slug(step))
        for step, st in started.items():
            d, run = data[step], finish(st)
            after = read_hour(dep, d.topic, hour, d.sent)
            loaded = {t: read_warehouse_hour(dep, d.topic, t, hour) for t in dep.tables(d.topic)}
            wh_problems = [p for t, df in loaded.items() if df is not None
                           for p in warehouse_problems(dep, d.topic, t, hour, after.rows.get(t, {}))]
            slots = [x for x in slots_held(dep) if x[1] in run.run_ids]
            files = sorted(str(p) for p in (dep.landing / "tables" / dep.topics[d.topic]["dataset"]).rglob("*.avro"))
            cases[step] = Crash(step, d, run, (dep.landing / slice_manifest_path(d.topic, hour)).exists(),
                                after, loaded, wh_problems, slots, files)
    # One clean run re-runs, per topic, what its crash interrupted, then loads every table.
    select = []
    for step, d in data.items():
        select += ([] if step in WAREHOUSE_STEPS else dep.landing_assets(d.topic)) + dep.warehouse_assets(d.topic)
    dead = [run_id for case in cases.values() for run_id in case.run.run_ids]
    started = start(dep, select, hour, name="rerun")
    blocked = wait_freeing_dead_slots(started, dep, dead)
    rerun = finish(started, timeout=10)  # ended, or hung past RUN_TIMEOUT: then killed and reported
    return Crashes(dep, cases, rerun, blocked)


# What a consumer of done files may see right after the crash: whether the slice is
# frozen, how many of the topic's two tables have a done file, how many a warehouse hour.
VISIBLE_AFTER_CRASH = {
    "slices:before_manifest": (False, 0, 0),
    "landing:staged": (True, 0, 0),
    "landing:files_moved": (True, 0, 0),
    "landing:done_written": (True, 1, 0),
    "landing:published": (True, 2, 0),
    "warehouse:staged": (True, 2, 0),
    "warehouse:swapped": (True, 2, 1),
}


def test_every_crash_point_is_covered():
    assert set(VISIBLE_AFTER_CRASH) == set(STEPS), "a crash point without a fault test"


@pytest.mark.parametrize("step", STEPS)
def test_killed_at_step_then_rerun_lands_every_offset_once(crashes, step):
    case, dep = crashes.cases[step], crashes.dep
    topic, hour = case.data.topic, case.data.hour

    # The run's process died by SIGKILL at that step.
    assert killed_by_sigkill(case.run), (
        f"the run was expected to die by SIGKILL at {step}; exit code {case.run.returncode}\n{case.run.tail()}")

    # Right after the crash: nothing half-done is visible through done files.
    frozen, done_tables, loaded_tables = VISIBLE_AFTER_CRASH[step]
    assert case.slice_frozen == frozen
    assert not case.after.problems, "visible right after the crash:\n" + "\n".join(case.after.problems)
    assert len(case.after.done) == done_tables, f"done files right after the crash: {sorted(case.after.done)}"
    assert sum(df is not None for df in case.loaded_after.values()) == loaded_tables
    assert not case.warehouse_after, "\n".join(case.warehouse_after)
    if step in ("slices:before_manifest", "landing:staged"):
        assert not case.files_after, f"files published before the crash point: {case.files_after}"
    if step == "landing:files_moved":
        assert case.files_after, "killed after moving files into place, yet none are there"

    # The re-run: every produced offset once, in its table or as a dead letter; the tables exact.
    own = {step_key(a) for a in dep.landing_assets(topic) + dep.warehouse_assets(topic)}
    failed = {k: v for k, v in crashes.rerun.failures.items() if k in own}
    assert not failed, f"the re-run after a crash at {step} failed: {failed}\n{crashes.rerun.tail()}"
    on_disk = check_landed_exactly(dep, topic, hour, case.data.sent)
    check_loaded_exactly(dep, topic, hour, on_disk)


@pytest.mark.parametrize("step", WAREHOUSE_STEPS)
def test_the_rerun_is_not_blocked_by_the_killed_run(crashes, step):
    """A load killed with its whole run (OOM, lost machine) must not keep its table's pool
    slot: with `default_limit: 1` the re-run, and every later load of the table, waits for
    it forever ("Step blocked by limit for pool ...") until someone frees it by hand."""
    case = crashes.cases[step]
    pools = {f"warehouse_{crashes.dep.topics[case.data.topic]['dataset']}_{t}" for t in crashes.dep.tables(case.data.topic)}
    assert not pools & crashes.rerun_blocked, (
        f"after a SIGKILL at {step}, the re-run was blocked by pools {sorted(pools & crashes.rerun_blocked)}: "
        f"the killed run still held slots {case.slots_after}; the test freed them by hand to go on"
    )
