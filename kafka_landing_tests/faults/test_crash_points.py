"""SIGKILL at every step of landing and loading, then a re-run: checked offset by offset.

Each crash point gets a topic of its own (same demo data, same hour) in one
deployment, and a real `dagster asset materialize` process killed at that step
(`KAFKA_LANDING_CRASH_AT`). Every run executes its steps in its own process
(the in-process executor), so the whole run dies, as on a lost machine. Crash runs go two at a time,
in two lanes (the loads', the landings'), each starting as the one before it in its lane ends;
each lane ends with one clean run that re-runs what its crashes interrupted (one process start
instead of one per crash), while the other lane goes on.

The loads are killed on the Iceberg warehouse (Spark writes Parquet, one pyiceberg commit swaps the
hour) at each of its steps, inside its commit too: the catalog's database has it, the load no answer
yet. The load crash runs share a Dagster instance, which their clean run uses too. One more load is
killed after its commit and then re-landed before it is loaded again: a new done file whose load must
replace the hour the table holds while its load record still lags.

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
from kafka_landing.warehouse.iceberg import IcebergWarehouse
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


@dataclass(frozen=True)
class Point:
    """A crash point: each gets a topic of its own."""

    step: str
    reland: bool = False  # the re-run lands the hour again (a new done file) before it loads it

    @property
    def loads(self) -> bool:
        return self.step in WAREHOUSE_STEPS

    @property
    def id(self) -> str:
        return "-".join([self.step, *(["relanded"] if self.reland else [])])

    @property
    def slug(self) -> str:
        return self.id.replace(":", "_").replace("-", "_")


POINTS = (*(Point(s) for s in STEPS), Point("warehouse:swapped", reland=True))
LOADS = tuple(p for p in POINTS if p.loads)


@dataclass
class Crash:
    point: Point
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
    dep: Deployment  # the deployment of every run (the loads and their re-run in its own instance)
    cases: dict[Point, Crash]
    reruns: dict[Point, Run]  # the clean re-run of the point's lane
    rerun_blocked: set[str]  # pools a re-run found held by a killed run


BLOCKED = re.compile(r"Step blocked by limit for pool (\S+)")


def lanes(points) -> list[list[Point]]:
    """Crash runs in two lanes that go at once (each run on its own topic), never two loads
    together: the loads share one Dagster instance, so they are one lane, with the crash while
    planning (a short run: it starts no Spark) after them; the other landings are the other lane.
    Their re-runs then land two topics and four, and load ten tables and eight."""
    loads = [p for p in points if p.loads]
    planning = [p for p in points if p.step.startswith("slices:")]
    return [loads + planning, [p for p in points if p not in loads + planning]]


def start_crash(dep: Deployment, point: Point, d: WebHour) -> Started:
    """The run killed at the point's step: a load is killed in the deployment's own instance (the
    re-run must meet what it leaves there); a landing run gets an instance of its own, so that it
    can run beside a load."""
    where = dep if point.loads else dep.with_own_instance(f"dagster_home_{point.slug}")
    select = dep.landing_assets(d.topic) + (dep.warehouse_assets(d.topic) if point.loads else [])
    return start(where, select, d.hour, crash=point.step, name=point.slug)


def start_rerun(dep: Deployment, lane: list[Point], data: dict[Point, WebHour]) -> Started:
    """One clean run re-runs, per topic of the lane, what its crash interrupted, then loads every
    table: the loads' in the instance their killed runs left, the landings' in one of its own."""
    select: list[str] = []
    for point in lane:
        topic = data[point].topic
        select += dep.landing_assets(topic) if point.reland or not point.loads else []
        select += dep.warehouse_assets(topic)
    where = dep if any(p.loads for p in lane) else dep.with_own_instance("dagster_home_rerun")
    return start(where, select, data[lane[0]].hour, name=f"rerun_{lane[0].slug}")


def seen_after(dep: Deployment, point: Point, d: WebHour, run: Run) -> Crash:
    """What the crash left, read as soon as its run ended (the other lane's run has a topic of its own)."""
    after = read_hour(dep, d.topic, d.hour, d.sent)
    loaded = {t: read_warehouse_hour(dep, d.topic, t, d.hour) for t in dep.tables(d.topic)}
    wh_problems = [p for t, df in loaded.items() if df is not None
                   for p in warehouse_problems(dep, d.topic, t, d.hour, after.rows.get(t, {}))]
    slots = [x for x in slots_held(dep) if x[1] in run.run_ids]
    files = sorted(str(p) for p in (dep.landing / "tables" / dep.topics[d.topic]["dataset"]).rglob("*.avro"))
    return Crash(point, d, run, (dep.landing / slice_manifest_path(d.topic, d.hour)).exists(),
                 after, loaded, wh_problems, slots, files)


def free_dead_slots(rerun: Started, dead_runs: list[str], blocked: set[str]) -> None:
    """When the re-run blocks on a pool whose slot a killed run still holds, free that one slot as an
    operator would (Deployment > Concurrency), so that it can go on; `blocked` gathers those pools."""
    found = set(BLOCKED.findall(rerun.out_path.read_text(errors="replace"))) - blocked
    if found:
        blocked |= found
        for pool, run_id, step in slots_held(rerun.dep):
            if pool in found and run_id in dead_runs:
                free_slot(rerun.dep, run_id, step)


def crash_and_rerun(dep: Deployment, data: dict[Point, WebHour]) -> Crashes:
    """Each lane's crash runs one after another, each read as soon as it ends, then the lane's
    re-run; a run that hangs past RUN_TIMEOUT is killed and reported."""
    by_lane = lanes(list(data))
    todo: list[list[Point | None]] = [[*lane, None] for lane in by_lane]  # None: the lane's re-run
    running: dict[int, tuple[Point | None, Started, float]] = {}  # lane -> its run now, and its deadline
    cases: dict[Point, Crash] = {}
    reruns: dict[Point, Run] = {}
    blocked: set[str] = set()
    while any(todo) or running:
        for i, lane in enumerate(todo):
            if i not in running and lane:
                point = lane.pop(0)
                st = start_crash(dep, point, data[point]) if point else start_rerun(dep, by_lane[i], data)
                running[i] = (point, st, time.monotonic() + RUN_TIMEOUT)
        dead = [run_id for case in cases.values() for run_id in case.run.run_ids]
        for point, st, _ in running.values():
            if point is None:
                free_dead_slots(st, dead, blocked)
        ended = [i for i, (_, st, deadline) in running.items()
                 if st.proc.poll() is not None or time.monotonic() > deadline]
        for i in ended:
            point, st, _ = running.pop(i)
            run = finish(st, timeout=0)  # a run still going is past its deadline: killed, reported
            if point is None:
                reruns |= dict.fromkeys(by_lane[i], run)
            else:
                cases[point] = seen_after(dep, point, data[point], run)
        if not ended:
            time.sleep(0.2)
    return Crashes(dep, cases, reruns, blocked)


@pytest.fixture(scope="module")
def crashes(produce_web_hour, bootstrap, registry_url, tmp_path_factory) -> Crashes:
    now = utcnow()
    data = {point: produce_web_hour(point.slug, now=now) for point in POINTS}
    dep = deployment(tmp_path_factory.mktemp("crash_points"),
                     {d.topic: web_topic(f"c_{point.slug}") for point, d in data.items()}, bootstrap, registry_url)
    return crash_and_rerun(dep, data)


# What a consumer of done files may see right after the crash: whether the slice is
# frozen, how many of the topic's two tables have a done file, how many a warehouse hour.
VISIBLE_AFTER_CRASH = {
    "slices:before_manifest": (False, 0, 0),
    "landing:staged": (True, 0, 0),
    "landing:files_moved": (True, 0, 0),
    "landing:done_written": (True, 1, 0),
    "landing:published": (True, 2, 0),
    "warehouse:staged": (True, 2, 0),
    "warehouse:committing": (True, 2, 1),
    "warehouse:swapped": (True, 2, 1),
}


def test_every_crash_point_is_covered():
    assert set(VISIBLE_AFTER_CRASH) == set(STEPS), "a crash point without a fault test"
    assert {p.step for p in POINTS} == set(STEPS)
    assert {p.step for p in LOADS} == set(WAREHOUSE_STEPS) and any(p.reland for p in LOADS)


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.id)
def test_killed_at_step_then_rerun_lands_every_offset_once(crashes, point):
    case, dep, step = crashes.cases[point], crashes.dep, point.step
    topic, hour = case.data.topic, case.data.hour
    rerun = crashes.reruns[point]

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
    failed = {k: v for k, v in rerun.failures.items() if k in own}
    assert not failed, f"the re-run after a crash at {step} failed: {failed}\n{rerun.tail()}"
    if point.reland:  # a new done file, not the one the killed load committed
        assert case.after.done != read_hour(dep, topic, hour, case.data.sent).done, "the re-run did not re-land"
    on_disk = check_landed_exactly(dep, topic, hour, case.data.sent)
    check_loaded_exactly(dep, topic, hour, on_disk)


@pytest.mark.parametrize("point", LOADS, ids=lambda p: p.id)
def test_the_rerun_is_not_blocked_by_the_killed_run(crashes, point):
    """A load killed with its whole run (OOM, lost machine) must not keep its table's pool
    slot: with `default_limit: 1` the re-run, and every later load of the table, waits for
    it forever ("Step blocked by limit for pool ...") until someone frees it by hand."""
    case, dep = crashes.cases[point], crashes.dep
    blocked = crashes.rerun_blocked
    pools = {f"warehouse_{dep.topics[case.data.topic]['dataset']}_{t}" for t in dep.tables(case.data.topic)}
    assert not pools & blocked, (
        f"after a SIGKILL at {point.id}, the re-run was blocked by pools {sorted(pools & blocked)}: "
        f"the killed run still held slots {case.slots_after}; the test freed them by hand to go on"
    )


def test_killed_inside_a_rest_catalogs_commit_then_rerun_loads_the_hour_once(produce_web_hour, bootstrap,
                                                                              registry_url, iceberg_rest_url,
                                                                              tmp_path_factory):
    """The same SIGKILL inside the commit (`warehouse:committing`: the REST catalog has it, the load
    no answer yet) on a REST catalog: the hour is visible once right after, and the re-run records
    it without loading it twice."""
    d = produce_web_hour("rest_commit")
    dataset = f"c_rest_{d.topic[-8:]}"  # the session's REST catalog outlives each test: a dataset of its own
    dep = deployment(tmp_path_factory.mktemp("rest_commit"), {d.topic: web_topic(dataset)}, bootstrap,
                     registry_url, catalog=iceberg_rest_url)
    select = dep.landing_assets(d.topic) + dep.warehouse_assets(d.topic)

    crashed = finish(start(dep, select, d.hour, crash="warehouse:committing", name="crash"))

    assert killed_by_sigkill(crashed), f"exit code {crashed.returncode}\n{crashed.tail()}"
    visible = [t for t in dep.tables(d.topic) if read_warehouse_hour(dep, d.topic, t, d.hour) is not None]
    assert len(visible) == VISIBLE_AFTER_CRASH["warehouse:committing"][2]
    landed = read_hour(dep, d.topic, d.hour, d.sent)
    assert warehouse_problems(dep, d.topic, visible[0], d.hour, landed.rows[visible[0]]) == []
    tables = IcebergWarehouse(str(dep.warehouse), iceberg_rest_url)
    snapshots = len(tables.table(dataset, visible[0]).metadata.snapshots)

    rerun = finish(start(dep, dep.warehouse_assets(d.topic), d.hour, name="rerun"))

    assert not rerun.failures, f"{rerun.failures}\n{rerun.tail()}"
    check_loaded_exactly(dep, d.topic, d.hour, check_landed_exactly(dep, d.topic, d.hour, d.sent))
    assert len(tables.table(dataset, visible[0]).metadata.snapshots) == snapshots, "the hour was committed twice"
    assert not (dep.warehouse / "_catalog.db").exists(), "the runs used the SQL catalog, not the REST one"
