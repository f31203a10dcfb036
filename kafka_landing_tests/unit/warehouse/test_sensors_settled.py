"""The settled sensor in the code location, driven as the daemon evaluates it (a temporary Dagster
instance, a local landing root, no services): registered beside the event sensor when a topic has an
event-time table; at a partition's settle time it asks for a check-only run of its `settled` check,
which, run in process as the daemon would launch it, turns the check green; a partition Dagster does
not know is not asked for."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from dagster import AssetCheckKey, build_sensor_context, instance_for_test
from dagster._core.event_api import PartitionKeyFilter

from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing.handoff import markers
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import event_lock_path
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.assets import event_key
from kafka_landing.warehouse.by_event.versions import next_manifest
from kafka_landing.warehouse.checks import SETTLED
from kafka_landing.warehouse.sensors import EVENT_SENSOR_NAME, SETTLED_SENSOR_NAME
from kafka_landing_tests.landed_hours import land_event_orders
from kafka_landing_tests.sensor_ticks import Warnings

DS, T, DAY = "shop", "orders", "2026-01-31"
ORDERS = {"orders": {"dataset": DS, "table": T, "event_time_field": "created_at"}}
CHECK = AssetCheckKey(event_key(DS, T), SETTLED)


def versioned(store: LocalStore, partition: str, made: datetime) -> None:
    """The partition's next version, made at `made`, its markers cleared (as a load leaves them)."""
    unit = event_unit(DS, T, partition)
    with store.lock(event_lock_path(DS, T, partition)) as held:
        seen = markers.marks_of(store, unit)
        next_manifest(store, held, unit, "day", now=made)
    markers.clear(store, unit, seen)


def settled_tick(defs, instance, cursor: str | None = None, log: Warnings | None = None):
    with build_sensor_context(instance=instance, definitions=defs, cursor=cursor,
                              resources={"landing": build_resources()["landing"]}) as ctx:
        if log is not None:
            ctx.log.addHandler(log)
        return defs.resolve_sensor_def(SETTLED_SENSOR_NAME).evaluate_tick(ctx)


def latest_settled(instance, partition: str):
    return instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [CHECK], partition_filter=PartitionKeyFilter(key=partition)).get(CHECK)


def test_it_is_registered_beside_the_event_sensor_only_for_topics_with_an_event_time_table(code_location):
    code_location({"web": {"dataset": "web", "table": "hits"}})
    assert SETTLED_SENSOR_NAME not in {s.name for s in build_definitions().sensors}
    code_location({**ORDERS, "web": {"dataset": "web", "table": "hits"}})
    names = [s.name for s in build_definitions().sensors]
    assert names.index(SETTLED_SENSOR_NAME) == names.index(EVENT_SENSOR_NAME) + 1


def test_its_check_only_run_turns_the_settled_check_green_once_the_day_is_final(code_location):
    from kafka_landing_tools.demo.loads import run_check_requests

    landing, _ = code_location(ORDERS)
    store = LocalStore(landing)
    land_event_orders(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]})
    now = datetime.now(timezone.utc)
    versioned(store, DAY, now - timedelta(hours=50))  # final two hours ago
    land_event_orders(store, "2026-02-01T09", {"2026-02-01T09": ["c"]}, first=2000)
    versioned(store, "2026-02-01", now - timedelta(hours=1))  # final in 47 hours
    defs = build_definitions()
    with instance_for_test() as instance:
        instance.add_dynamic_partitions(f"{DS}__{T}__by_event", [DAY, "2026-02-01"])
        result = settled_tick(defs, instance)
        (req,) = result.run_requests
        assert (req.partition_key, req.asset_selection, req.asset_check_keys) == (DAY, [], [CHECK])
        assert "kafka_landing/spark" not in req.tags  # a check-only run needs no Spark slot
        (run,) = run_check_requests(defs, result, instance)
        assert run.success and run.get_asset_materialization_events() == []  # the check alone
        shown = latest_settled(instance, DAY).evaluation
        assert shown.passed and shown.metadata["settled"].value is True, shown.description
        assert latest_settled(instance, "2026-02-01") is None  # not final yet: not asked for
        again = settled_tick(defs, instance, result.cursor)
        assert again.run_requests == [] and "no event partition became final since" in again.skip_message


def test_a_partition_dagster_does_not_know_is_not_asked_for(code_location):
    landing, _ = code_location(ORDERS)
    store = LocalStore(landing)
    land_event_orders(store, "2026-01-31T13", {"2026-01-31T13": ["a"]})
    versioned(store, DAY, datetime.now(timezone.utc) - timedelta(hours=50))
    infos = Warnings()
    infos.setLevel("INFO")
    with instance_for_test() as instance:
        result = settled_tick(build_definitions(), instance, log=infos)
    assert result.run_requests == []
    assert any("does not know" in m and f"{DS}/{T}__by_event {DAY}" in m for m in infos.messages), infos.messages
