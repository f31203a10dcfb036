"""Grouping ready loads into runs (`queue.runs.plan_loads`): one run per table and run of
consecutive ready hours, run keys that a duplicate tick repeats and a retry never reuses,
member tags that find every run that covered a load, and bounded, per-member retries,
checked by example and against a model of Dagster's run-key rule."""

from __future__ import annotations

import random
import re
from datetime import datetime, timezone
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.handoff.markers import TableHour, content_sha
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import ONE_HOUR, hour_from_tag, hour_tag
from kafka_landing.warehouse.queue.runs import (
    FINISHED,
    MAX_ATTEMPTS,
    MAX_HOURS_PER_RUN,
    MEMBER_TAG_PREFIX,
    RUN_KEY_TAG,
    RUN_QUERY_VALUES,
    PendingLoad,
    SeenRun,
    TABLE_SLOTS,
    covering_runs,
    member_tag,
    plan_loads,
    retire_config,
    run_key,
    run_key_of,
    run_queries,
    table_slot,
    tables_together,
    tags_of,
)

BASE = datetime(2026, 11, 16, tzinfo=timezone.utc)  # a Monday, 00:00


def load(i: int, table: str = "orders", dataset: str = "shop", content: str = "a") -> PendingLoad:
    """The load of hour BASE + i of a table, for content `content`."""
    return PendingLoad(TableHour(hour_tag(BASE + ONE_HOUR * i), dataset, table),
                       content_sha(f"{dataset}.{table}.{i}.{content}".encode()))


def event_load(day: int, table: str = "orders", dataset: str = "shop", content: str = "a") -> PendingLoad:
    """The load of event day BASE + `day` days of a table's event-time table, for marker set `content`."""
    partition = (BASE + ONE_HOUR * 24 * day).strftime("%Y-%m-%d")
    return PendingLoad(event_unit(dataset, table, partition), content_sha(f"{dataset}.{table}.{day}.{content}".encode()))


def ran(run_id: str, status: str, tags: dict) -> SeenRun:
    return SeenRun(run_id, status, tags)


def as_run(group, run_id: str, status: str) -> SeenRun:
    """The run Dagster launches for a requested group, as the instance later returns it."""
    return SeenRun(run_id, status, {**group.tags(), RUN_KEY_TAG: group.run_key})


def consecutive(hours: list[str]) -> bool:
    return all(hour_from_tag(b) - hour_from_tag(a) == ONE_HOUR for a, b in pairwise(hours))


# --- by example ------------------------------------------------------------------------

def test_a_day_of_ready_hours_of_a_table_is_one_run_naming_each_hour():
    day = [load(i) for i in range(24)]
    plan = plan_loads(day, {})
    assert len(plan.groups) == 1
    g = plan.groups[0]
    assert g.loads == tuple(day) and g.attempt == 1
    assert g.run_key == f"tables/shop/orders/hours=2026-11-16T00..2026-11-16T23@{g.run_key[-16:]}"
    members = {k: v for k, v in g.tags().items() if k.startswith(MEMBER_TAG_PREFIX)}
    assert len(members) == 24, "one member tag per hour, none overwriting another"
    assert members["kafka_landing/load.Mon13"] == f"2026-11-16T13@{day[13].sha[:16]}"
    assert g.tags()["kafka_landing/table"] == "shop.orders" and g.tags()["kafka_landing/load_attempt"] == "1"
    assert "kafka_landing/done_file" not in g.tags(), "a group has no single done file"


def test_one_ready_hour_keeps_the_key_and_tags_of_a_single_load():
    ld = load(5)
    g = plan_loads([ld], {}).groups[0]
    assert g.run_key == run_key(ld.th.done_file, ld.sha) == f"{ld.th.done_file}@{ld.sha[:16]}"
    assert g.tags()["kafka_landing/done_file"] == ld.th.done_file
    assert g.tags()["kafka_landing/done_sha256"] == ld.sha


def test_gaps_tables_and_the_cap_cut_runs():
    loads = [load(i) for i in (0, 1, 2, 5, 6)] + [load(i, "refunds") for i in (0, 1)]
    plan = plan_loads(loads, {})
    assert sorted((g.name, tuple(g.hours)) for g in plan.groups) == [
        ("shop.orders", tuple(hour_tag(BASE + ONE_HOUR * i) for i in (0, 1, 2))),
        ("shop.orders", tuple(hour_tag(BASE + ONE_HOUR * i) for i in (5, 6))),
        ("shop.refunds", tuple(hour_tag(BASE + ONE_HOUR * i) for i in (0, 1))),
    ]
    # Where one table's hours end, the next table's hours may go on: still another run.
    handover = plan_loads([load(0, "orders"), load(1, "orders"), load(2, "refunds")], {})
    assert [(g.name, len(g.loads)) for g in handover.groups] == [("shop.orders", 2), ("shop.refunds", 1)]
    long = [load(i) for i in range(200)]
    assert [len(g.loads) for g in plan_loads(long, {}).groups] == [MAX_HOURS_PER_RUN, 200 - MAX_HOURS_PER_RUN]
    assert [len(g.loads) for g in plan_loads(long, {}, max_hours=24).groups] == [24] * 8 + [8]


def test_member_tag_keys_are_distinct_over_any_week_and_valid_dagster_tag_keys():
    keys = [member_tag(hour_tag(BASE + ONE_HOUR * (i + 37))) for i in range(MAX_HOURS_PER_RUN)]
    assert len(set(keys)) == MAX_HOURS_PER_RUN
    assert member_tag(hour_tag(BASE + ONE_HOUR * (37 + MAX_HOURS_PER_RUN))) == keys[0]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]{1,63}/[A-Za-z0-9_.-]{1,63}", k) for k in keys)


def test_covering_runs_are_found_by_member_tag_and_by_an_earlier_versions_run_key():
    a, b, other_table = load(0), load(1), load(1, "refunds")
    group = plan_loads([a, b], {}).groups[0]
    legacy = ran("r-legacy", "FAILURE", {RUN_KEY_TAG: f"{run_key(a.th.done_file, a.sha)}#attempt2",
                                         "kafka_landing/load_attempt": "2"})
    relanded = load(1, content="re-landed")  # same hour, new content: a different load
    found = covering_runs([a, b, other_table, relanded],
                          [as_run(group, "r-group", "FAILURE"), legacy, ran("r-manual", "SUCCESS", {})])
    assert [r.run_id for r in found[a]] == ["r-group", "r-legacy"]
    assert [r.run_id for r in found[b]] == ["r-group"]
    assert found[other_table] == () and found[relanded] == ()


def test_the_runs_of_any_number_of_loads_are_found_by_a_few_bounded_queries_that_find_every_covering_run():
    loads = [load(i, table) for table in ("orders", "refunds") for i in range(400)]
    queries = run_queries(loads)
    assert queries and all(len(values) <= RUN_QUERY_VALUES for _, values in queries)
    asked = {(tag, v) for tag, values in queries for v in values}
    assert sum(len(values) for _, values in queries) == len(asked), "no value asked twice"
    assert {v for tag, v in asked if tag == RUN_KEY_TAG} == {k for ld in loads for k in ld.attempt_keys()}, \
        "runs of earlier versions, by run key"
    assert {tv for ld in loads for tv in ld.found_by} == {(tag, v) for tag, v in asked if tag != RUN_KEY_TAG}
    assert run_queries([]) == []


def test_a_retire_run_names_landing_hours_by_done_file_and_event_partitions_by_name():
    hour, event = load(0).unit, event_unit("shop", "orders", "2026-11-16")
    assert retire_config(hour, event) == {"done_files": [hour.done_file],
                                          "event_partitions": ["shop.orders__by_event/2026-11-16"]}


def test_a_failed_group_is_retried_as_a_group_then_its_last_attempt_alone_then_given_up():
    loads = [load(i) for i in range(4)]
    runs: list[SeenRun] = []
    keys = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        plan = plan_loads(loads, covering_runs(loads, runs))
        assert not plan.waiting and not plan.given_up
        expected = [4] if attempt < MAX_ATTEMPTS else [1, 1, 1, 1]
        assert [len(g.loads) for g in plan.groups] == expected
        assert {g.attempt for g in plan.groups} == {attempt}
        keys += [g.run_key for g in plan.groups]
        runs += [as_run(g, f"run-{attempt}-{i}", "FAILURE") for i, g in enumerate(plan.groups)]
    assert len(set(keys)) == len(keys), "every retry is a new run key"
    assert keys[1].endswith("#attempt2") and keys[2] == f"{loads[0].key}#attempt3"
    plan = plan_loads(loads, covering_runs(loads, runs))
    assert plan.groups == () and [ld for ld, _ in plan.given_up] == loads
    assert [r.run_id for r in dict(plan.given_up)[loads[2]]] == ["run-1-0", "run-2-0", "run-3-2"]


def test_a_run_in_flight_holds_its_hours_and_splits_the_range_around_them():
    loads = [load(i) for i in range(6)]
    in_flight = plan_loads(loads[2:4], {}).groups[0]
    plan = plan_loads(loads, covering_runs(loads, [as_run(in_flight, "r1", "STARTED")]))
    assert plan.waiting == tuple(loads[2:4])
    assert [tuple(g.loads) for g in plan.groups] == [tuple(loads[:2]), tuple(loads[4:])]


def test_hours_at_different_attempts_are_not_grouped():
    loads = [load(i) for i in range(3)]
    failed = plan_loads(loads[1:2], {}).groups[0]
    plan = plan_loads(loads, covering_runs(loads, [as_run(failed, "r1", "FAILURE")]))
    assert [(len(g.loads), g.attempt) for g in plan.groups] == [(1, 1), (1, 2), (1, 1)]


def test_a_run_covers_at_most_a_week():
    import pytest

    with pytest.raises(ValueError, match="1 to 168 hours"):
        plan_loads([load(0)], {}, max_hours=MAX_HOURS_PER_RUN + 1)


# --- properties ------------------------------------------------------------------------

STATUSES = sorted(FINISHED) + ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]


@st.composite
def states(draw):
    """Pending loads of up to three tables, and runs that covered some of them, as earlier
    ticks of this planner would have requested them."""
    loads = [load(i, t) for t in ("a", "b", "c")[:draw(st.integers(1, 3))]
             for i in sorted(draw(st.sets(st.integers(0, 60), max_size=30)))]
    runs: list[SeenRun] = []
    for n in range(draw(st.integers(0, 4))):  # a few earlier ticks, each run ending one way or another
        plan = plan_loads(loads, covering_runs(loads, runs), max_hours=draw(st.integers(1, 12)))
        runs += [as_run(g, f"r{n}-{i}", draw(st.sampled_from(STATUSES))) for i, g in enumerate(plan.groups)]
    return loads, runs


@settings(max_examples=200, deadline=None)
@given(states(), st.integers(1, 24), st.randoms())
def test_every_ready_load_is_in_exactly_one_run_of_consecutive_hours_of_one_table(state, max_hours, rnd):
    loads, runs = state
    plan = plan_loads(loads, covering_runs(loads, runs), max_hours=max_hours)
    placed = [ld for g in plan.groups for ld in g.loads] + list(plan.waiting) + [ld for ld, _ in plan.given_up]
    assert sorted(placed) == sorted(loads), "each load is requested, waiting or given up: exactly one of them"
    for g in plan.groups:
        assert 1 <= len(g.loads) <= max_hours
        assert len({ld.th.name for ld in g.loads}) == 1
        assert consecutive(g.hours)
        tags = [k for k in g.tags() if k.startswith(MEMBER_TAG_PREFIX)]
        assert len(tags) == len(g.loads)
    assert len({g.run_key for g in plan.groups}) == len(plan.groups)
    # A duplicate tick (same state, in any order) asks for the same runs.
    shuffled_loads, shuffled_runs = loads[:], runs[:]
    rnd.shuffle(shuffled_loads)
    rnd.shuffle(shuffled_runs)
    again = plan_loads(shuffled_loads, covering_runs(shuffled_loads, shuffled_runs), max_hours=max_hours)
    assert [(g.run_key, g.tags()) for g in again.groups] == [(g.run_key, g.tags()) for g in plan.groups]
    # Never a load with a run in flight, never one whose attempts are used up, never a key Dagster has.
    covering = covering_runs(loads, runs)
    existing = {r.tags[RUN_KEY_TAG] for r in runs}
    for g in plan.groups:
        assert g.run_key not in existing
        for ld in g.loads:
            earlier = covering[ld]  # a first attempt has no earlier run
            assert {r.status for r in earlier} <= FINISHED
            assert max((r.attempt for r in earlier), default=0) < g.attempt, "a run's attempt is each member's next one"


# --- against a model of Dagster --------------------------------------------------------

def simulate(loads: list[PendingLoad], behaviour: dict[PendingLoad, str], rnd: random.Random, max_hours: int,
             together: bool = False) -> tuple[dict[PendingLoad, int], list[SeenRun], set[PendingLoad], tuple]:
    """Tick and run until nothing is requested. Dagster launches a run key once; a run loads
    its hours oldest first: an "ok" hour loads, a "fails" hour fails alone, a "kills" hour
    kills the run (later hours are not tried), a "flaky" hour fails on its first try only.
    Some runs stay in flight for a tick or two. `together`: the tables of the same hours share a
    run (`tables_together`), a table after another in its run. Returns loads per member, runs,
    loaded, last plan."""
    runs: dict[str, SeenRun] = {}
    by_key: dict[str, str] = {}
    pending = set(loads)
    loaded_times = {ld: 0 for ld in loads}
    tried = {ld: 0 for ld in loads}
    in_flight: list[tuple[str, object, int]] = []
    for tick in range(100):
        plan = plan_loads(sorted(pending), covering_runs(sorted(pending), runs.values()), max_hours=max_hours)
        if not plan.groups and not in_flight:
            assert plan.waiting == ()
            return loaded_times, list(runs.values()), set(loads) - pending, plan
        duplicate = plan_loads(sorted(pending), covering_runs(sorted(pending), runs.values()), max_hours=max_hours)
        assert [g.run_key for g in duplicate.groups] == [g.run_key for g in plan.groups]
        requested = tables_together(plan.groups, lambda g: 0) if together else [(g,) for g in plan.groups]
        for i, run in enumerate(requested):
            key = run_key_of(run)
            assert key not in by_key, f"tick {tick}: {key} was launched before: Dagster would drop it"
            run_id = f"t{tick}-{i}"
            by_key[key] = run_id
            runs[run_id] = SeenRun(run_id, "STARTED", {**tags_of(run), RUN_KEY_TAG: key})
            in_flight.append((run_id, run, tick))
        still = []
        for run_id, run, started in in_flight:
            if tick - started < 2 and rnd.random() < 0.3:  # not finished by the next tick
                still.append((run_id, run, started))
                continue
            failed = False
            for ld in (ld for g in run for ld in g.loads):
                tried[ld] += 1
                kind = behaviour[ld]
                if kind == "kills":
                    failed = True
                    break
                if kind == "fails" or (kind == "flaky" and tried[ld] == 1):
                    failed = True
                    continue
                loaded_times[ld] += 1
                pending.discard(ld)
            runs[run_id] = SeenRun(run_id, "FAILURE" if failed else "SUCCESS", runs[run_id].tags)
        in_flight = still
    raise AssertionError("the sensor never settled")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["a", "b", "c"]),
                          st.sampled_from(["ok", "ok", "ok", "fails", "kills", "flaky"])),
                unique_by=lambda t: (t[0], t[1]), max_size=40),
       st.integers(1, 30), st.randoms(use_true_random=False), st.booleans(), st.booleans())
def test_against_dagster_every_good_hour_loads_once_and_every_bad_one_is_given_up_after_its_attempts(
        hours, max_hours, rnd, together, events):
    """Landing hours, or event partitions (`events`: day i of each table, whose runs of several
    tables name their members by slot and content)."""
    behaviour = {(event_load if events else load)(i, t): kind for i, t, kind in hours}
    loads = sorted(behaviour)
    loaded_times, runs, loaded, last = simulate(loads, behaviour, rnd, max_hours, together)
    bad = {ld for ld, kind in behaviour.items() if kind in ("fails", "kills")}
    killers = {ld.th.table for ld in bad if behaviour[ld] == "kills"}
    # A flaky hour behind one that kills every run it is in gets one real try (its last, alone);
    # with tables together, a killer of any table may be in its runs.
    killed = bool(killers) if together else False
    good = {ld for ld, kind in behaviour.items()
            if kind == "ok" or (kind == "flaky" and ld.th.table not in killers and not killed)}
    assert loaded >= good, "an hour that loads whenever a run reaches it is never given up"
    assert not loaded & bad
    assert all(loaded_times[ld] == 1 for ld in loaded), "each content is loaded once"
    assert {ld for ld, _ in last.given_up} == set(loads) - loaded
    covering = covering_runs(loads, runs)
    for ld in set(loads) - loaded:
        assert len(covering[ld]) == MAX_ATTEMPTS, "an hour given up was requested exactly MAX_ATTEMPTS times"
    assert all(len(covering[ld]) <= MAX_ATTEMPTS for ld in loads)


# --- tables that share their hours share a run -----------------------------------------

def _tables_with_distinct_slots(n: int) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        t = f"t{i}"
        if table_slot("shop", t) not in {table_slot("shop", x) for x in out}:
            out.append(t)
        i += 1
    return out


def test_tables_of_the_same_hours_share_a_run_whose_tags_name_every_member_apart():
    a, b = _tables_with_distinct_slots(2)
    plan = plan_loads([load(i, t) for t in (a, b) for i in range(3)], {})
    assert len(plan.groups) == 2
    (run,) = tables_together(plan.groups, lambda g: "hours")
    tags = tags_of(run)
    members = {k: v for k, v in tags.items() if k.startswith(MEMBER_TAG_PREFIX)}
    assert len(members) == 6, "each table's hour under a key of its own"
    assert tags["kafka_landing/table"] == f"shop.{a},shop.{b}"
    assert run_key_of(run).startswith(f"tables/2/hours={hour_tag(BASE)}..{hour_tag(BASE + 2 * ONE_HOUR)}@")
    seen = SeenRun("r1", "FAILURE", {**tags, RUN_KEY_TAG: run_key_of(run)})
    covered = covering_runs([ld for g in plan.groups for ld in g.loads], [seen])
    assert len(covered) == 6
    assert all(runs == (seen,) for runs in covered.values())
    again = plan_loads([ld for g in plan.groups for ld in g.loads], covered)
    assert {g.attempt for g in again.groups} == {2}, "the failed run was each member's first attempt"


def test_event_partitions_of_the_same_day_share_a_run_whose_failure_is_each_members_attempt():
    a, b, c = _tables_with_distinct_slots(3)
    loads = [event_load(0, a), event_load(0, b), event_load(1, c)]
    runs = tables_together(plan_loads(loads, {}).groups, lambda g: None)
    assert sorted(sorted(g.table for g in r) for r in runs) == [sorted([a, b]), [c]], "one run per day"
    run = next(r for r in runs if len(r) == 2)
    tags, key = tags_of(run), run_key_of(run)
    assert key.startswith("events/2/partition=2026-11-16@")
    assert tags["kafka_landing/table"] == f"shop.{a}__by_event,shop.{b}__by_event"
    named = {k: v for k, v in tags.items() if k.startswith("kafka_landing/event_")}
    assert len(named) == 4, "each member's partition and marker set under its slot's keys"
    failed = SeenRun("r1", "FAILURE", {**tags, RUN_KEY_TAG: key})
    covered = covering_runs(loads[:2], [failed])
    assert covered == {ld: (failed,) for ld in loads[:2]}
    again = plan_loads(loads[:2], covered)
    assert {g.attempt for g in again.groups} == {2}, "the failed run was each member's first attempt"
    # A run that loaded an earlier marker set of the day makes a new one wait while in flight,
    # and is no attempt at it once it ended.
    newer = [event_load(0, a, content="b"), event_load(0, b, content="b")]
    assert plan_loads(newer, covering_runs(newer, [SeenRun("r1", "STARTED", failed.tags)])).waiting == tuple(newer)
    after = plan_loads(newer, covering_runs(newer, [failed]))
    assert {g.attempt for g in after.groups} == {1}


def test_only_the_same_hours_attempt_and_partitions_share_a_run_and_one_table_per_slot():
    a, b = _tables_with_distinct_slots(2)
    same_slot = next(f"u{i}" for i in range(1000) if table_slot("shop", f"u{i}") == table_slot("shop", a))
    groups = plan_loads([load(0, a), load(0, b), load(0, same_slot), load(0, "v"), load(1, "v")], {}).groups
    runs = tables_together(groups, lambda g: "hours")
    assert sorted(sorted(g.table for g in r) for r in runs) == [sorted([a, b]), [same_slot], ["v"]], \
        "a table whose slot is taken waits for another run; other hours are another run"
    apart = tables_together(plan_loads([load(0, a), load(0, b)], {}).groups, lambda g: g.table)
    assert len(apart) == 2, "tables of different partitions never share a run"
    last = plan_loads([load(0, a), load(0, b)], {}).groups
    last = [type(g)(g.loads, MAX_ATTEMPTS) for g in last]
    assert len(tables_together(last, lambda g: 0)) == 2, "a last attempt runs alone"
    many = _tables_with_distinct_slots(TABLE_SLOTS)
    (full,) = tables_together(plan_loads([load(0, t) for t in many], {}).groups, lambda g: 0)
    assert len(full) == TABLE_SLOTS
