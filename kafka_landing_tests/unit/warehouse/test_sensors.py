"""The done-file sensor when history is large, driven as the daemon evaluates it (ephemeral
instance, local roots, no services): loads nobody will ask for again do not starve other
tables and are told once per table, not once per hour (review N4); the reconciliation does
not read again what it already checked, and a tick fits Dagster's 60 s sensor timeout on
a store that answers in 20 ms per call (review N5)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    HourlyPartitionsDefinition,
)
from dagster._core.utils import make_new_run_id

from kafka_landing.handoff.markers import (
    Marks,
    clear_pending,
    content_sha,
    list_pending,
    parse_done_path,
    refusal,
    refuse,
)
from kafka_landing.naming import ONE_HOUR, done_file_path, floor_hour, hour_tag
from kafka_landing.resources import LandingResource
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse import sensors
from kafka_landing.warehouse.assets import warehouse_key
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing.warehouse.queue import reconcile as queue_reconcile
from kafka_landing.warehouse.queue import tick as queue_tick
from kafka_landing.warehouse.queue.runs import ATTEMPT_TAG, member_tag
from kafka_landing.warehouse.sensors import build_done_file_sensor
from kafka_landing_tests.sensor_ticks import Warnings, empty_done_file, evaluate, local_resources, publish_empty

NOW = floor_hour(datetime.now(timezone.utc))


class Sensor:
    """The sensor over `tables` of dataset "d", partitions from `first` on, evaluated tick by tick
    with the cursor each tick returns."""

    def __init__(self, root: Path, first: datetime, tables=("a", "b")):
        parts = HourlyPartitionsDefinition(start_date=first.strftime("%Y-%m-%d-%H:%M"), timezone="UTC")
        keys = {("d", t): warehouse_key("d", t) for t in tables}
        self.sensor = build_done_file_sensor(keys, {k: parts for k in keys})
        self.resources = local_resources(root)
        self.cursor = None
        self.warnings = Warnings()

    def tick(self, instance):
        self.warnings.messages.clear()
        result = evaluate(self.sensor, instance, self.resources, self.cursor, self.warnings)
        self.cursor = result.cursor
        return result


class ReadsLogged(LocalStore):
    """The local store, remembering which done files were read."""

    def __init__(self, root):
        super().__init__(root)
        self.done_reads: list[str] = []

    def read_bytes(self, rel):
        if rel.endswith("_DONE.json"):
            self.done_reads.append(rel)
        return super().read_bytes(rel)


# --- N4: what the sensor will not ask for again leaves the examined set ----------------------

STUCK = 30  # MAX_EXAMINED_PER_TICK in these tests


def add_run(instance, members: list[tuple[datetime, str]], status: DagsterRunStatus, attempt: int) -> None:
    tags = {ATTEMPT_TAG: str(attempt), **{member_tag(hour_tag(h)): f"{hour_tag(h)}@{sha[:16]}" for h, sha in members}}
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=make_new_run_id(), status=status, tags=tags))


@pytest.mark.parametrize("kind", ["given_up", "refused", "invalid", "not_a_partition", "in_flight"])
def test_loads_of_one_table_that_cannot_go_on_do_not_starve_another_table(tmp_path, monkeypatch, kind):
    """STUCK older hours of d.a that fill the examined cap, and one ready hour of d.b: d.b is
    requested, d.a is told about in one warning (not one per hour), and what will not be asked
    for again is not read again on the next tick."""
    monkeypatch.setattr(queue_tick, "MAX_EXAMINED_PER_TICK", STUCK)
    store = ReadsLogged(tmp_path / "landing")
    monkeypatch.setattr(LandingResource, "store", lambda self: store)
    first = NOW - ONE_HOUR * 200
    stuck = [first + ONE_HOUR * (i + (-STUCK - 5 if kind == "not_a_partition" else 0)) for i in range(STUCK)]
    sensor = Sensor(tmp_path, first)
    with DagsterInstance.ephemeral() as instance:
        shas = {}
        for h in stuck:
            over = {"dataset": "elsewhere"} if kind == "invalid" else None
            rel, shas[h] = publish_empty(store, "d", "a", h, over=over)
            if kind == "refused":
                th, marks = parse_done_path(rel), Marks({hour_tag(h): shas[h]})
                refuse(store, th, marks, "BigQuery: Cannot add required fields")
                assert refusal(store, th, marks).why == "BigQuery: Cannot add required fields"
        if kind in ("given_up", "in_flight"):
            status = DagsterRunStatus.FAILURE if kind == "given_up" else DagsterRunStatus.STARTED
            add_run(instance, [(h, shas[h]) for h in stuck], status, attempt=3)
        ready, _ = publish_empty(store, "d", "b", NOW - ONE_HOUR * 5)

        def about_a() -> list[str]:
            return [m for m in sensor.warnings.messages if "d/a/" in m or "d.a" in m]

        aside: set[str] = set()
        for n in range(3):  # tables take turns: the cap leaves d.b its place, d.a the rest
            store.done_reads.clear()
            result = sensor.tick(instance)
            assert [r.tags["kafka_landing/done_file"] for r in result.run_requests or []] == [ready], f"tick {n}"
            assert len(about_a()) <= 1, f"tick {n}: {len(about_a())} warnings about d.a: {about_a()[:3]}"
            if kind == "in_flight":
                continue
            assert len(about_a()) == 1, f"tick {n}: d.a is told about on every tick"
            again = aside & set(store.done_reads)
            assert not again, f"tick {n} read again {len(again)} done file(s) it had given up on"
            aside = {th.done_file for th in list_pending(store, given_up=True)}
        if kind != "in_flight":
            assert f"{STUCK} hour(s)" in about_a()[0], about_a()
            assert not [r for r in store.done_reads if "/d/a/" in r]


def test_a_given_up_hour_comes_back_when_re_landed_or_loaded_by_hand(tmp_path):
    store = LocalStore(tmp_path / "landing")
    first = NOW - ONE_HOUR * 200
    hours = [first + ONE_HOUR * i for i in range(3)]
    sensor = Sensor(tmp_path, first)
    with DagsterInstance.ephemeral() as instance:
        shas = {h: publish_empty(store, "d", "a", h)[1] for h in hours}
        add_run(instance, list(shas.items()), DagsterRunStatus.FAILURE, attempt=3)
        result = sensor.tick(instance)
        assert not result.run_requests and "3 given up" in result.skip_reason.skip_message

        # Re-landed: new content, a new marker, asked for again.
        relanded, _ = publish_empty(store, "d", "a", hours[0], attempt="a2")
        result = sensor.tick(instance)
        assert [r.tags["kafka_landing/done_file"] for r in result.run_requests] == [relanded]
        about_a = [m for m in sensor.warnings.messages if "d.a" in m or "d/a/" in m]
        assert len(about_a) == 1 and "2 hour(s)" in about_a[0], about_a

        # Materialised by hand once the cause is fixed: the load clears what it loaded.
        assert clear_pending(store, done_file_path("d", "a", hours[1]), shas[hours[1]])
        result = sensor.tick(instance)
        about_a = [m for m in sensor.warnings.messages if "d.a" in m or "d/a/" in m]
        assert len(about_a) == 1 and "1 hour(s)" in about_a[0] and hour_tag(hours[2]) in about_a[0], about_a
        assert [th.hour for th in list_pending(store)] == [hour_tag(hours[0])]


# --- N5: reconciliation reads what can have changed, within the tick's time ------------------

DELAY = 0.02  # seconds per call, as a bucket answers


class Clock:
    def __init__(self):
        self.now = datetime.now(timezone.utc).timestamp()

    def __call__(self) -> float:
        return self.now


class SlowStore(LocalStore):
    """The local store answering each call in DELAY seconds of the fake clock, and counting."""

    def __init__(self, root, clock: Clock):
        super().__init__(root)
        self.clock, self.calls, self.done_reads = clock, 0, []

    def _call(self):
        self.calls += 1
        self.clock.now += DELAY

    def read_bytes(self, rel):
        self._call()
        if rel.endswith("_DONE.json"):
            self.done_reads.append(rel)
        return super().read_bytes(rel)


for _name in ("exists", "list", "subdirs", "walk", "write_atomic", "delete", "size", "glob", "first"):
    def _slow(self, *a, _name=_name, **k):
        self._call()
        return getattr(LocalStore, _name)(self, *a, **k)
    setattr(SlowStore, _name, _slow)


def write_history(landing: Path, warehouse: Path, table: str, hours: list[datetime], loaded: bool) -> None:
    """Done files of `table` (plain os calls: fast), recorded as loaded by the Iceberg warehouse if `loaded`."""
    loads = warehouse / "d" / table / "_loads"
    loads.mkdir(parents=True, exist_ok=True)
    for h in hours:
        rel = done_file_path("d", table, h)
        content = empty_done_file("d", table, h)
        (landing / rel).parent.mkdir(parents=True, exist_ok=True)
        (landing / rel).write_bytes(content)
        if loaded:
            (loads / f"hour={hour_tag(h)}.json").write_text(
                json.dumps({"done_file": rel, "sha256": content_sha(content), "rows": 0}))


def test_reconciliation_does_not_read_again_what_it_checked_and_each_tick_fits_the_timeout(tmp_path, monkeypatch):
    clock = Clock()
    store = SlowStore(tmp_path / "landing", clock)
    monkeypatch.setattr(LandingResource, "store", lambda self: store)
    monkeypatch.setattr(sensors, "_clock", clock, raising=False)
    ledger = {"reads": 0}
    real_loaded_sha = IcebergWarehouse.loaded_sha

    def slow_loaded_sha(self, dataset, table, hour):  # BigQuery: one ledger object per call
        ledger["reads"] += 1
        clock.now += DELAY
        return real_loaded_sha(self, dataset, table, hour)

    monkeypatch.setattr(IcebergWarehouse, "loaded_sha", slow_loaded_sha)
    first = NOW - ONE_HOUR * 4400
    hours = [first + ONE_HOUR * i for i in range(4380)]  # two tables: a year of done files
    gap = hours[100]  # an hour that lands later, copied in by another tool
    for t in ("a", "b"):
        write_history(tmp_path / "landing", tmp_path / "warehouse", t, [h for h in hours if h != gap], loaded=True)
    sensor = Sensor(tmp_path, first)

    with DagsterInstance.ephemeral() as instance:
        read_before: set[str] = set()
        for n in range(200):
            store.done_reads.clear()
            ledger["reads"] = 0
            started = clock.now
            result = sensor.tick(instance)
            spent = clock.now - started
            assert spent < 45, f"tick {n}: {spent:.0f} s of store and ledger calls at {DELAY * 1000:.0f} ms each"
            again = read_before & set(store.done_reads)
            assert not again, f"tick {n} read {len(again)} done file(s) already reconciled, e.g. {sorted(again)[0]}"
            read_before |= set(store.done_reads)
            clock.now += 30
            if len(read_before) == 2 * (len(hours) - 1):
                break
        assert not result.run_requests
        # Everything checked: a tick reads no done file and no ledger object.
        store.done_reads.clear()
        ledger["reads"] = 0
        sensor.tick(instance)
        assert store.done_reads == [] and ledger["reads"] == 0

        # A done file copied in later for an hour older than every other, with an old mtime and no
        # marker: found on the next tick, with nothing else read.
        old = datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp()
        rel = done_file_path("d", "a", gap)
        write_history(tmp_path / "landing", tmp_path / "warehouse", "a", [gap], loaded=False)
        os.utime(tmp_path / "landing" / rel, (old, old))
        store.done_reads.clear()
        result = sensor.tick(instance)
        assert [r.tags["kafka_landing/done_file"] for r in result.run_requests] == [rel]
        assert store.done_reads.count(rel) >= 1 and set(store.done_reads) == {rel}

        # It loads (the ledger says so, the load clears its marker).
        write_history(tmp_path / "landing", tmp_path / "warehouse", "a", [gap], loaded=True)
        assert clear_pending(store, rel, content_sha(empty_done_file("d", "a", gap)))

        # A done file rewritten in place by another tool (an old mtime, no marker): nothing says so
        # for less than a call per object, so it is found by the next round, a day on.
        rewritten = done_file_path("d", "b", hours[10])
        (tmp_path / "landing" / rewritten).write_bytes(empty_done_file("d", "b", hours[10], attempt="copied"))
        os.utime(tmp_path / "landing" / rewritten, (old, old))
        store.done_reads.clear()
        assert not sensor.tick(instance).run_requests and store.done_reads == []
        clock.now += queue_reconcile.RECONCILE_AGAIN_AFTER
        for n in range(200):
            store.done_reads.clear()
            started = clock.now
            result = sensor.tick(instance)
            assert clock.now - started < 50, f"tick {n} of the new round: {clock.now - started:.0f} s"
            others = [r for r in store.done_reads if r != rewritten]  # found: marked, then examined
            assert len(others) == len(set(others)), "a done file read twice in one tick"
            clock.now += 30
            if result.run_requests:
                break
        assert [r.tags["kafka_landing/done_file"] for r in result.run_requests] == [rewritten]
