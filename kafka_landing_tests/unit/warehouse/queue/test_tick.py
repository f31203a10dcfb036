"""The one queue tick, without Dagster: its cost after a year's backfill stays within its budget,
listings included; a tick that runs out of time goes on where it stopped; a load refused until a
quota refills is asked for again after that, under a new run key; refused for good, never."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from kafka_landing.handoff import markers
from kafka_landing.handoff.markers import Marks
from kafka_landing.handoff.units import event_unit, hour_unit
from kafka_landing.naming import event_pending_path
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.queue import tick as queue
from kafka_landing.warehouse.queue.runs import SeenRun
from kafka_landing_tests.helpers import write_hour

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]}
PER_CALL = 0.02  # seconds a bucket takes per call


class CountingStore(LocalStore):
    """A landing root whose every call advances a fake clock by what a bucket call costs."""

    def __init__(self, root):
        super().__init__(root)
        self.calls = 0
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def _count(self):
        self.calls += 1
        self.now += PER_CALL

    def read_bytes(self, rel):
        self._count()
        return super().read_bytes(rel)

    def list(self, rel_dir, pattern="*"):
        self._count()
        return super().list(rel_dir, pattern)

    def walk(self, rel_dir, suffix=""):
        self._count()
        return super().walk(rel_dir, suffix)

    def subdirs(self, rel_dir):
        self._count()
        return super().subdirs(rel_dir)

    def exists(self, rel):
        self._count()
        return super().exists(rel)


def a_year_of_event_markers(store, days=365, per_day=25):
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    for d in range(days):
        day = (start + timedelta(days=d)).strftime("%Y-%m-%d")
        for k in range(per_day):
            hour = start + timedelta(days=d, hours=k - 1)
            store.write_atomic(event_pending_path("shop", "orders", day, hour),
                               json.dumps({"sha256": f"{d}-{k}"}).encode())


def no_runs(loads):
    return []


def test_a_tick_over_a_year_of_pending_event_markers_ends_within_its_budget(tmp_path):
    store = CountingStore(tmp_path)
    a_year_of_event_markers(store)
    store.calls, store.now = 0, 0.0
    plan = queue.tick(store, queue.EventPartitions({("shop", "orders")}), no_runs, clock=store.clock)
    # The budget counts from the tick's start, listings included: no tick outlives Dagster's 60 s.
    assert store.now <= queue.TICK_SECONDS + 1, (store.calls, store.now)
    assert plan.stopped_early and 0 < plan.examined < 365
    assert len(plan.groups) == plan.examined  # each examined partition is requested
    assert len({u.partition for u in plan.listed}) == 365  # every partition known from the listing alone


def test_ticks_that_run_out_of_time_go_on_where_they_stopped_until_every_partition_is_requested(tmp_path):
    store = CountingStore(tmp_path)
    a_year_of_event_markers(store, days=120)
    requested, cursor = set(), queue.Cursor()
    for _ in range(20):
        store.now = 0.0
        plan = queue.tick(store, queue.EventPartitions({("shop", "orders")}), no_runs, cursor, clock=store.clock)
        requested |= {g.loads[0].unit.partition for g in plan.groups}
        cursor = plan.cursor
        if len(requested) == 120:
            break
    assert len(requested) == 120


def land(store, hour="2026-01-31T13"):
    return write_hour(store, "shop", "t", hour, [(0, 1, SCHEMA, [{"id": "a"}])])


def landing_hours(loaded=None):
    return queue.LandingHours({("shop", "t")}, lambda u: True, lambda d, t, h: (loaded or {}).get(h))


def test_a_load_refused_until_the_quota_refills_is_asked_for_again_after_it_under_a_new_run_key(tmp_path):
    store = LocalStore(tmp_path)
    rel = land(store)
    unit = markers.parse_done_path(rel)
    markers.mark_pending(store, rel, store.read_bytes(rel))
    first = queue.tick(store, landing_hours(), no_runs)
    (group,) = first.groups
    sha = markers.content_sha(store.read_bytes(rel))
    failed = [SeenRun("r1", "FAILURE", {**group.tags(), "dagster/run_key": group.run_key})]
    now = datetime.now(timezone.utc)
    markers.refuse(store, unit, Marks({unit.partition: sha}), "Quota exceeded (reason quotaExceeded)",
                   heals_at=now + timedelta(hours=1))

    during = queue.tick(store, landing_hours(), lambda loads: failed, now=now + timedelta(minutes=30))
    assert during.groups == [] and [u for u, _ in during.refused] == [unit]
    assert markers.read_marker(store, unit) is not None  # not moved aside: it heals

    after = queue.tick(store, landing_hours(), lambda loads: failed, now=now + timedelta(hours=2))
    (again,) = after.groups
    assert again.run_key != group.run_key and again.attempt == 1  # a new round of attempts


def test_a_load_refused_for_good_is_moved_aside_and_not_asked_for_again(tmp_path):
    store = LocalStore(tmp_path)
    rel = land(store)
    unit = markers.parse_done_path(rel)
    markers.mark_pending(store, rel, store.read_bytes(rel))
    sha = markers.content_sha(store.read_bytes(rel))
    markers.refuse(store, unit, Marks({unit.partition: sha}), "the table refuses the schema")
    plan = queue.tick(store, landing_hours(), no_runs)
    assert plan.groups == [] and [(u, r) for u, r, _ in plan.moved] == [(unit, "refused")]
    assert markers.list_pending(store) == [] and markers.list_pending(store, given_up=True) == [unit]
    assert queue.tick(store, landing_hours(), no_runs).groups == []


def test_given_up_units_of_a_day_now_loaded_are_not_warned_about_once_the_load_clears_them(tmp_path):
    store = LocalStore(tmp_path)
    rel = land(store)
    unit = markers.parse_done_path(rel)
    content = store.read_bytes(rel)
    markers.mark_pending(store, rel, content)
    sha = markers.content_sha(content)
    assert markers.give_up(store, unit, Marks({unit.partition: sha}), sha, "another hour's fault")
    assert queue.tick(store, landing_hours(), no_runs).given_up == {"shop.t": [unit]}
    markers.clear(store, unit, {unit.partition: sha})  # what the load step does for every hour a day load holds
    assert queue.tick(store, landing_hours(), no_runs).given_up == {}


def test_an_event_partition_with_a_run_of_earlier_markers_in_flight_waits(tmp_path):
    store = LocalStore(tmp_path)
    unit = event_unit("shop", "orders", "2026-01-31")
    store.write_atomic(event_pending_path("shop", "orders", "2026-01-31", "2026-01-31T13"),
                       json.dumps({"sha256": "x"}).encode())
    running = SeenRun("r0", "STARTED", {"kafka_landing/event_partition": f"{unit.name}/{unit.partition}",
                                        "dagster/run_key": "pending_event_loads/shop/orders/2026-01-31@old"})
    plan = queue.tick(store, queue.EventPartitions({("shop", "orders")}), lambda loads: [running])
    assert plan.groups == [] and plan.waiting == 1


def test_units_of_tables_the_kind_does_not_take_are_left_alone(tmp_path):
    store = LocalStore(tmp_path)
    rel = land(store)
    markers.mark_pending(store, rel, store.read_bytes(rel))
    other = queue.LandingHours({("shop", "other")}, lambda u: True, lambda d, t, h: None)
    assert queue.tick(store, other, no_runs).listed == []
    not_a_partition = queue.LandingHours({("shop", "t")}, lambda u: False, lambda d, t, h: None)
    plan = queue.tick(store, not_a_partition, no_runs)
    assert plan.groups == [] and list(plan.not_taken) == ["shop.t"]
    assert hour_unit("shop", "t", "2026-01-31T13") in plan.listed


def test_the_retired_tables_tick_lists_no_configured_tables_markers(tmp_path):
    """A year of a configured event table's markers costs the retired-table tick nothing: it walks
    only the folders of tables in no topic config (one listing of the tables first)."""
    store = CountingStore(tmp_path)
    a_year_of_event_markers(store)
    hour = datetime(2026, 2, 1, 10, tzinfo=timezone.utc)
    store.write_atomic(event_pending_path("shop", "clicks", "2026-02-01", hour), json.dumps({"sha256": "s"}).encode())
    walked = []
    walk = store.walk
    store.walk = lambda rel_dir, suffix="": walked.append(rel_dir) or walk(rel_dir, suffix)
    plan = queue.tick(store, queue.EventPartitions({("shop", "orders")}, retired=True), no_runs, clock=store.clock)
    assert [str(u) for u in plan.listed] == ["shop.clicks__by_event 2026-02-01"]
    assert walked == ["pending_event_loads/shop/clicks"], walked
    assert [g.loads[0].unit for g in plan.groups] == [event_unit("shop", "clicks", "2026-02-01")]
