"""The event sensor, driven as the daemon evaluates it (ephemeral instance, a local landing root,
no services): it requests each event partition a landing hour marked and adds the partitions
Dagster does not know yet; a partition with a load in flight waits; a failed load is asked for
again under a new run key at most three times; one that failed for good is not asked for again
until a landing hour marks it anew."""

from __future__ import annotations

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._core.utils import make_new_run_id

from kafka_landing.handoff import markers
from kafka_landing.handoff.units import event_unit
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.assets import event_key, event_partitions
from kafka_landing.warehouse.queue.runs import RUN_KEY_TAG
from kafka_landing.warehouse.queue.runs import EVENT_TAG
from kafka_landing.warehouse.sensors import build_event_sensor
from kafka_landing_tests.helpers import write_event_hour
from kafka_landing_tests.sensor_ticks import Warnings, evaluate, local_resources

SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}]}
DAY = "2026-01-31"


def tick(tmp_path, instance, warnings: Warnings | None = None):
    sensor = build_event_sensor({("d", "orders"): event_key("d", "orders")},
                                {("d", "orders"): event_partitions("d", "orders")})
    result = evaluate(sensor, instance, local_resources(tmp_path), log=warnings)
    for add in result.dynamic_partitions_requests or ():  # as the daemon does
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    return result


def land(tmp_path, hour: str, by_event: dict, first: int = 1000):
    write_event_hour(LocalStore(tmp_path / "landing"), "d", "orders", hour, by_event, SCHEMA, first=first)


def run_of(request, status: DagsterRunStatus) -> DagsterRun:
    return DagsterRun(job_name="__ASSET_JOB", run_id=make_new_run_id(), status=status,
                      tags={**request.tags, RUN_KEY_TAG: request.run_key})


def test_each_marked_partition_is_requested_and_new_partitions_are_added(tmp_path):
    land(tmp_path, "2026-01-31T13", {"2026-01-31T13": [{"order_id": "a"}], None: [{"order_id": "n"}]})
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("d__orders__by_event", [DAY])  # known already
        result = tick(tmp_path, instance)
        assert sorted(r.partition_key for r in result.run_requests) == [DAY, "__unknown__2026-01-31"]
        assert [(a.partitions_def_name, list(a.partition_keys)) for a in result.dynamic_partitions_requests] == [
            ("d__orders__by_event", ["__unknown__2026-01-31"])]
        assert instance.get_dynamic_partitions("d__orders__by_event") == [DAY, "__unknown__2026-01-31"]
        req = next(r for r in result.run_requests if r.partition_key == DAY)
        assert req.asset_selection == [event_key("d", "orders")] and req.tags[EVENT_TAG] == f"d.orders__by_event/{DAY}"
        assert req.tags["kafka_landing/spark"] == "true"  # Iceberg loads take a Spark slot


def test_a_partition_with_a_load_in_flight_waits_and_new_markers_get_a_new_run_key(tmp_path):
    land(tmp_path, "2026-01-31T13", {"2026-01-31T13": [{"order_id": "a"}]})
    with DagsterInstance.ephemeral() as instance:
        (first,) = tick(tmp_path, instance).run_requests
        running = instance.add_run(run_of(first, DagsterRunStatus.STARTED))
        assert tick(tmp_path, instance).run_requests == []
        # While it runs, a late hour marks the day again: it waits for the run in flight all the same.
        land(tmp_path, "2026-02-02T09", {"2026-01-31T23": [{"order_id": "late"}]}, first=2000)
        assert tick(tmp_path, instance).run_requests == []
        instance.delete_run(running.run_id)  # it ended:
        instance.add_run(run_of(first, DagsterRunStatus.SUCCESS))
        (again,) = [r for r in tick(tmp_path, instance).run_requests if r.partition_key == DAY]
        assert again.run_key != first.run_key


def test_a_failed_load_is_asked_for_again_three_times_then_given_up_with_a_warning(tmp_path):
    land(tmp_path, "2026-01-31T13", {"2026-01-31T13": [{"order_id": "a"}]})
    with DagsterInstance.ephemeral() as instance:
        keys = []
        for _ in range(3):
            (req,) = tick(tmp_path, instance).run_requests
            keys.append(req.run_key)
            instance.add_run(run_of(req, DagsterRunStatus.FAILURE))
        assert len(set(keys)) == 3
        warnings = Warnings()
        result = tick(tmp_path, instance, warnings)
        assert result.run_requests == [] and "1 given up after 3 attempts" in result.skip_reason.skip_message
        assert any(f"d.orders__by_event {DAY}" in m and "failed 3 times" in m for m in warnings.messages)


def test_a_load_that_failed_for_good_is_not_asked_for_again_until_a_landing_hour_marks_it_anew(tmp_path):
    store = LocalStore(tmp_path / "landing")
    land(tmp_path, "2026-01-31T13", {"2026-01-31T13": [{"order_id": "a"}]})
    with DagsterInstance.ephemeral() as instance:
        assert len(tick(tmp_path, instance).run_requests) == 1
        unit = event_unit("d", "orders", DAY)
        markers.refuse(store, unit, markers.marks_of(store, unit), "gone done file")
        warnings = Warnings()
        result = tick(tmp_path, instance, warnings)
        assert result.run_requests == [] and ", 1 refused," in result.skip_reason.skip_message
        assert any(f"d.orders__by_event {DAY}: gone done file" in m for m in warnings.messages)
        land(tmp_path, "2026-02-02T09", {"2026-01-31T23": [{"order_id": "late"}]}, first=2000)
        assert [r.partition_key for r in tick(tmp_path, instance).run_requests] == [DAY]


def test_the_asset_refuses_for_good_what_cannot_be_versioned_and_says_why(tmp_path):
    """An unreadable done file stops the versioning (terminal): the run fails naming it, and the
    partition's markers are refused, so the sensor does not ask again for the same markers."""
    from dagster import materialize

    from kafka_landing.config import TopicConfig
    from kafka_landing.naming import done_file_path
    from kafka_landing.resources import SparkResource
    from kafka_landing.warehouse.assets import build_event_asset

    store = LocalStore(tmp_path / "landing")
    land(tmp_path, "2026-01-31T13", {"2026-01-31T13": [{"order_id": "a"}]})
    store.write_atomic(done_file_path("d", "orders", "2026-01-31T13"), b"{not json")
    cfg = TopicConfig(topic="t", dataset="d", table="orders", event_time_field="created_at")
    with DagsterInstance.ephemeral() as instance:
        (req,) = tick(tmp_path, instance).run_requests
        instance.add_dynamic_partitions("d__orders__by_event", [DAY])
        result = materialize([build_event_asset(cfg, "orders")], partition_key=DAY, instance=instance,
                             raise_on_error=False, resources={
                                 **local_resources(tmp_path),
                                 "pyspark": SparkResource(remote="sc://127.0.0.1:1")})  # never opened
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        assert "done file of landing hour 2026-01-31T13" in failure.event_specific_data.error.message
        assert tick(tmp_path, instance).run_requests == []


def test_the_same_day_of_several_tables_is_one_run_naming_its_partition_by_tag(tmp_path):
    """Each event table has partitions of its own, so the run of several names its day by Dagster's
    partition tag; each table's partition is added as before."""
    from kafka_landing.warehouse.sensors import PARTITION_TAG

    tables = ("orders", "refunds")
    for table in tables:
        write_event_hour(LocalStore(tmp_path / "landing"), "d", table, "2026-01-31T13",
                         {"2026-01-31T13": [{"order_id": "a"}]}, SCHEMA)
    sensor = build_event_sensor({("d", t): event_key("d", t) for t in tables},
                                {("d", t): event_partitions("d", t) for t in tables})
    with DagsterInstance.ephemeral() as instance:
        result = evaluate(sensor, instance, local_resources(tmp_path))
        (req,) = result.run_requests
        assert req.partition_key is None and req.tags[PARTITION_TAG] == DAY
        assert sorted(req.asset_selection) == sorted(event_key("d", t) for t in tables)
        assert req.run_key.startswith(f"events/2/partition={DAY}@")
        assert sorted(a.partitions_def_name for a in result.dynamic_partitions_requests) == [
            "d__orders__by_event", "d__refunds__by_event"]
