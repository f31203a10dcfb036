"""The event-time table's checks as the UI shows them: each check's latest evaluation per partition,
read from a real (ephemeral) Dagster instance after the runs the event sensor asks for, on the
BigQuery backend (the strict fake, no Spark). After a late landing hour, a topic whose every event
partition holds exactly its records shows no red check; a loss still fails with ERROR. `settled` is
green only for a final day: yellow until then, saying until when, and the settled sensor's check-only
run turns it green at that time; red only for a day amended after it was final, until it is final
again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from dagster import AssetCheckKey, AssetCheckSeverity, DagsterInstance, Definitions, build_sensor_context, materialize
from dagster._core.event_api import PartitionKeyFilter

from kafka_landing.naming import event_manifest_path, event_pending_dir
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.warehouse.assets import build_event_asset, event_key, event_partitions
from kafka_landing.warehouse.checks import CONSERVATION_BY_EVENT, SETTLED, build_event_checks
from kafka_landing.warehouse.resources import BigQueryWarehouseResource
from kafka_landing.warehouse.sensors import SETTLED_SENSOR_NAME, build_settled_sensor
from kafka_landing_tests.helpers import GsLikeStore
from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG, land_event_orders as land  # settle_hours 48
from kafka_landing_tools.demo.loads import run_check_requests

PROJECT = "kl-event-checks"
DS, T = CFG.dataset, CFG.table
KEY = event_key(DS, T)
DAY, LATE_DAY = "2026-01-31", "2026-02-03"


AFTER_WRITE: dict[str, object] = {}  # landing path -> what a test does right after it is written, once


class HookedStore(GsLikeStore):
    def write_atomic(self, rel: str, data: bytes) -> None:
        super().write_atomic(rel, data)
        if (then := AFTER_WRITE.pop(rel, None)) is not None:
            then()


class GsLikeLanding(LandingResource):
    """The landing root as a gs:// bucket, as the BigQuery backend loads from it (see GsLikeStore)."""

    def store(self) -> GsLikeStore:
        return HookedStore(self.landing_root)


@dataclass
class World:
    store: GsLikeStore
    fake: object  # the BigQuery fake
    instance: DagsterInstance
    root: str

    def __iter__(self):
        return iter((self.store, self.fake, self.instance))


@pytest.fixture
def world(fake_bigquery, instance, tmp_path, monkeypatch):
    store, fake = fake_bigquery
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", fake.url)
    yield World(store, fake, instance, str(tmp_path))
    AFTER_WRITE.clear()


def resources(world) -> dict:
    return {"landing": GsLikeLanding(landing_root=world.root),
            "warehouse": BigQueryWarehouseResource(project=PROJECT, location="US"),
            "pyspark": SparkResource(remote="sc://127.0.0.1:1")}  # never opened


def run(world, partition: str):
    """A run of the event partition with the table's checks, as the event sensor requests it."""
    store, _, instance = world
    instance.add_dynamic_partitions(f"{DS}__orders__by_event", [partition])
    assets = [build_event_asset(CFG, T, "bigquery"), *build_event_checks(CFG, T)]
    result = materialize(assets, partition_key=partition, instance=instance, resources=resources(world))
    assert result.success
    return result


def latest(instance, check: str) -> dict:
    """{partition: the check's latest evaluation}, as the UI reads them."""
    out = {}
    for partition in instance.get_dynamic_partitions(f"{DS}__orders__by_event"):
        key = AssetCheckKey(KEY, check)
        rec = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [key], partition_filter=PartitionKeyFilter(key=partition)).get(key)
        if rec is not None:
            out[partition] = rec.evaluation
    return out


def ids(fake, pid: str) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DS, "orders__by_event", pid))


def exact_after_a_late_hour(world) -> None:
    """Jan 31 loaded, then a landing hour three days later brings one more record of it: the event
    sensor asks for Jan 31 and Feb 3, in that order. Every record ends up in its day once."""
    store, fake, _ = world
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]}, first=1000)
    run(world, DAY)
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"], "2026-02-03T09": ["e"]}, first=2000)
    first = run(world, DAY)
    # Jan 31 was counted before Feb 3 had its version: it waited for Feb 3 (a warning, not a loss).
    waited = {e.check_name: e for e in first.get_asset_check_evaluations()}[CONSERVATION_BY_EVENT]
    assert (waited.passed, waited.severity) == (False, AssetCheckSeverity.WARN), waited.description
    run(world, LATE_DAY)
    assert (ids(fake, "20260131"), ids(fake, "20260203")) == (["a", "b", "late"], ["e"])


def test_after_a_late_hour_no_check_of_exact_data_stays_red(world):
    store, _, instance = world
    exact_after_a_late_hour(world)
    shown = latest(instance, CONSERVATION_BY_EVENT)
    assert {p: e.passed for p, e in shown.items()} == {DAY: True, LATE_DAY: True}, {
        p: e.description for p, e in shown.items()}
    # Just amended, neither day is final yet: yellow, never red.
    shown = latest(instance, SETTLED)
    assert {p: (e.passed, e.severity) for p, e in shown.items()} == {
        DAY: (False, AssetCheckSeverity.WARN), LATE_DAY: (False, AssetCheckSeverity.WARN)}
    again = latest(instance, CONSERVATION_BY_EVENT)[DAY]
    assert again.metadata["evaluated_again_after"].value == LATE_DAY
    # The result shown is on Jan 31's latest materialisation: current, as the UI judges it.
    infos = {i.partition_key: i for i in instance.event_log_storage.get_asset_check_partition_info(
        [AssetCheckKey(KEY, CONSERVATION_BY_EVENT)])}
    assert sorted(infos) == [DAY, LATE_DAY] and infos[DAY].is_current and infos[LATE_DAY].is_current
    settled = latest(instance, SETTLED)[DAY]
    assert settled.metadata["settled"].value is False and settled.metadata["settles_at"].value
    assert settled.metadata["amended_after_it_settled_at"].value == ""
    assert "not final yet" in settled.description and "may still amend it until" in settled.description


def test_rows_lost_in_the_warehouse_fail_conservation_with_error(world):
    store, fake, instance = world
    exact_after_a_late_hour(world)
    fake.tables[(PROJECT, DS, "orders__by_event")]["partitions"]["20260131"].pop()  # other hands
    run(world, DAY)  # materialised again: the warehouse holds this version already, so nothing is loaded
    shown = latest(instance, CONSERVATION_BY_EVENT)[DAY]
    assert (shown.passed, shown.severity) == (False, AssetCheckSeverity.ERROR)
    assert "holds 2 rows, version 2 lists 3" in shown.description


def test_a_late_hour_whose_other_day_was_never_marked_fails_with_error(world):
    """The late day's markers gone without a version (a lost load): nothing waits, Jan 31's count is a loss."""
    store, _, instance = world
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a"]}, first=1000)
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"], "2026-02-03T09": ["e"]}, first=2000)
    for rel in store.list(event_pending_dir(DS, T, LATE_DAY), "*.json"):
        store.delete(rel)
    run(world, DAY)
    shown = latest(instance, CONSERVATION_BY_EVENT)[DAY]
    assert (shown.passed, shown.severity) == (False, AssetCheckSeverity.ERROR), shown.description


def age(store, partition: str, version: int, hours: float, previous_hours: float | None = None) -> None:
    """Make version `version` of the partition as if it had been made `hours` ago (its previous one
    `previous_hours` ago): what the passing of time does to the `settled` verdict, without waiting."""
    rel = event_manifest_path(DS, T, partition, version)
    m = json.loads(store.read_bytes(rel))
    now = datetime.now(timezone.utc)
    m["amended_at"] = m["created_at"] = (now - timedelta(hours=hours)).isoformat(timespec="seconds")
    if previous_hours is not None:
        m["previous_amended_at"] = (now - timedelta(hours=previous_hours)).isoformat(timespec="seconds")
    store.write_atomic(rel, json.dumps(m).encode())


def settled_ticks(world, cursor: str | None = None):
    """One tick of the settled sensor as the daemon evaluates it, with the table's asset and checks as
    the code location defines them, and the check-only runs it asks for, in this process."""
    defs = Definitions(assets=[build_event_asset(CFG, T, "bigquery")], asset_checks=build_event_checks(CFG, T),
                       sensors=[build_settled_sensor({(DS, T): KEY}, {(DS, T): CFG.settle_hours},
                                                     {(DS, T): event_partitions(DS, T)})],
                       resources=resources(world))
    with build_sensor_context(instance=world.instance, definitions=defs, cursor=cursor,
                              resources={"landing": resources(world)["landing"]}) as ctx:
        result = defs.resolve_sensor_def(SETTLED_SENSOR_NAME).evaluate_tick(ctx)
    for run_ in run_check_requests(defs, result, world.instance):
        assert run_.success
    return result


def test_a_day_turns_green_when_it_is_final_red_when_amended_after_and_green_when_final_again(world):
    store, _, instance = world
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]}, first=1000)
    run(world, DAY)
    shown = latest(instance, SETTLED)[DAY]
    assert (shown.passed, shown.severity, shown.metadata["settled"].value) == (False, AssetCheckSeverity.WARN, False)
    assert "turns green by itself" in shown.description
    # 60 hours pass: version 1 has been final for 12. Nothing but the settled sensor runs the check then.
    age(store, DAY, 1, 60)
    tick = settled_ticks(world)
    (req,) = tick.run_requests
    assert (req.partition_key, req.asset_selection, req.asset_check_keys) == (DAY, [], [AssetCheckKey(KEY, SETTLED)])
    assert "kafka_landing/spark" not in req.tags and f"{DAY}@v1/" in req.run_key
    shown = latest(instance, SETTLED)[DAY]
    assert (shown.passed, shown.metadata["settled"].value) == (True, True), shown.description
    assert shown.description.startswith(f"{DS}.orders__by_event {DAY}: final since ")
    (info,) = instance.event_log_storage.get_asset_check_partition_info([AssetCheckKey(KEY, SETTLED)])
    assert info.partition_key == DAY and info.is_current  # on the day's latest materialisation, as the UI judges
    assert settled_ticks(world, tick.cursor).run_requests == []  # asked for once
    # A late record amends the final day: red, saying since when it was final.
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"], "2026-02-03T09": ["e"]}, first=2000)
    run(world, DAY)
    run(world, LATE_DAY)
    shown = latest(instance, SETTLED)
    assert (shown[DAY].passed, shown[DAY].severity) == (False, AssetCheckSeverity.ERROR)
    assert "changed after it was final" in shown[DAY].description
    assert "whoever read it as final should read it again" in shown[DAY].description
    assert shown[DAY].metadata["amended_after_it_settled_at"].value
    assert (shown[LATE_DAY].passed, shown[LATE_DAY].severity) == (False, AssetCheckSeverity.WARN)  # a new day
    conservation = latest(instance, CONSERVATION_BY_EVENT)  # and the data are exact
    assert {p: e.passed for p, e in conservation.items()} == {DAY: True, LATE_DAY: True}
    # Version 2 final in its turn (a daemon that looks back from now): green again, the amendment told.
    age(store, DAY, 2, 49, previous_hours=200)
    age(store, LATE_DAY, 1, 49)
    assert sorted(r.partition_key for r in settled_ticks(world).run_requests) == [DAY, LATE_DAY]
    shown = latest(instance, SETTLED)
    assert {p: (e.passed, e.metadata["amended_after_it_settled_at"].value) for p, e in shown.items()} == {
        DAY: (True, ""), LATE_DAY: (True, "")}
    assert "earlier, version 2" in shown[DAY].description


def test_a_count_made_while_the_late_day_was_being_loaded_does_not_stay_red(world, monkeypatch):
    """Two runs at once: Jan 31's check counts before Feb 3 has its version, and Feb 3's whole run
    (version, load, checks) ends before Jan 31's result is stored. Feb 3's check finds Jan 31's check
    still to report after its load and evaluates it again: that newer result is the one shown."""
    from kafka_landing.warehouse import checks

    store, _, instance = world
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]}, first=1000)
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"], "2026-02-03T09": ["e"]}, first=2000)
    count, raced = checks.event_conservation, []

    def racing(store_, backend, cfg, table, partition):
        c = count(store_, backend, cfg, table, partition)
        if partition == DAY and not raced:
            raced.append(LATE_DAY)
            run(world, LATE_DAY)  # the other run, start to end, between Jan 31's count and its store
        return c

    monkeypatch.setattr(checks, "event_conservation", racing)
    own = {e.check_name: e for e in run(world, DAY).get_asset_check_evaluations()}[CONSERVATION_BY_EVENT]
    assert len(raced) == 1 and (own.passed, own.severity) == (False, AssetCheckSeverity.WARN)  # counted early
    shown = latest(instance, CONSERVATION_BY_EVENT)
    assert {p: e.passed for p, e in shown.items()} == {DAY: True, LATE_DAY: True}, {
        p: e.description for p, e in shown.items()}


def test_a_partition_being_loaded_is_not_evaluated_again_by_another_s_run(world):
    """Feb 3's whole run happens while Jan 31's run has written its new version but not loaded it yet:
    counting Jan 31 then would find the warehouse one version behind and report a loss that the load
    under way is about to end. Its own check, after its load, reports it."""
    store, _, instance = world
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]}, first=1000)
    run(world, DAY)
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"], "2026-02-03T09": ["e"]}, first=2000)
    AFTER_WRITE[event_manifest_path(DS, T, DAY, 2)] = lambda: run(world, LATE_DAY)
    run(world, DAY)
    assert not AFTER_WRITE  # Feb 3's run did happen in between
    shown = latest(instance, CONSERVATION_BY_EVENT)
    assert {p: e.passed for p, e in shown.items()} == {DAY: True, LATE_DAY: True}, {
        p: e.description for p, e in shown.items()}


def test_a_landing_days_unknown_partition_shows_its_sentinels_and_fails_on_a_loss(world):
    """Records with no event time and with sentinel ones (0001-01-01, 9999-12-31) are loaded into the
    landing day's unknown partition, counted in its materialisation and its check; exact, the check
    passes; a row lost in BigQuery fails it with ERROR."""
    store, fake, instance = world
    unknown = "__unknown__2026-03-01"
    land(store, "2026-03-01T10", {None: ["n"], "0001-01-01T00": ["first"], "9999-12-31T23": ["last"]}, first=1000)
    result = run(world, unknown)
    (mat,) = result.get_asset_materialization_events()
    shown = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert (shown["dagster/row_count"], shown["no_event_time_rows"], shown["sentinel_time_rows"]) == (3, 1, 2)
    assert shown["sentinel_event_hours"] == {"0001-01-01T00": 1, "9999-12-31T23": 1}
    check = latest(instance, CONSERVATION_BY_EVENT)[unknown]
    assert check.passed and check.metadata["sentinel_time_rows"].value == 2, check.description
    fake.tables[(PROJECT, DS, "orders__by_event_unknown")]["partitions"]["20260301"].pop()  # other hands
    run(world, unknown)
    check = latest(instance, CONSERVATION_BY_EVENT)[unknown]
    assert (check.passed, check.severity) == (False, AssetCheckSeverity.ERROR)
    assert "holds 2 rows, version 1 lists 3" in check.description


def test_a_partitions_materialisation_says_whether_its_load_wrote_a_version_and_whether_the_day_was_amended(world):
    store, _, _ = world
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a"]}, first=1000)
    loads = [run(world, DAY)]
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"]}, first=2000)
    loads += [run(world, DAY), run(world, DAY)]  # the late hour's version, then nothing new
    shown = [{k: v.value for k, v in r.get_asset_materialization_events()[0].materialization.metadata.items()}
             for r in loads]
    assert [(md["version"], md["new_version"], md["amended"]) for md in shown] == [
        (1, True, False), (2, True, True), (2, False, True)]
