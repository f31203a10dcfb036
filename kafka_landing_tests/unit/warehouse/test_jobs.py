"""Retiring covers every table an hour fed: after a routing change re-lands an hour into another
table, the old table's landing hour AND its event-time table's partitions stop holding the hour's
records, so no record counts in two event-time tables (review 2026-11-26 R1). Driven as the daemon
drives it: the retired-hours sensor's requests run the `retire_hours` job, on the BigQuery backend
(the strict fake over HTTP, no Spark) and an ephemeral Dagster instance.

Before anything is loaded, `retire_hours` reads each done file it is given through the one reader
(`handoff.manifests.read_done_file`): a done file that is missing, not JSON, not a done file or
contradicting its path fails the run naming the job, the file and what to do (terminal: the same
bytes fail the same way), and one that is not retired is refused."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from dagster import Failure, build_op_context, build_sensor_context

from kafka_landing.avro_landing.publish import StagedHour, publish
from kafka_landing.avro_landing.write import Staged
from kafka_landing.config import TopicConfig
from kafka_landing.handoff import markers
from kafka_landing.handoff.manifests import DeadLetters, LandedFile
from kafka_landing.handoff.units import EVENT, event_unit, hour_unit
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan, SliceTask
from kafka_landing.naming import OffsetRange, dead_letter_manifest_path, hour_from_tag, landing_file_name, table_hour_dir
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.warehouse.bigquery import BigQueryWarehouse
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.jobs import RETIRE_JOB, RetireConfig, retire_hours, retire_hours_op
from kafka_landing.warehouse.load import load_unit
from kafka_landing.warehouse.queue.runs import RUN_KEY_TAG
from kafka_landing.warehouse.resources import BigQueryWarehouseResource, IcebergWarehouseResource
from kafka_landing.warehouse.sensors import RETIRED_SENSOR_NAME, build_retired_hours_sensor
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.helpers import GsLikeStore, avro_file, write_hour

PROJECT = "kl-retire"
DS, H, DAY = "shop", "2026-01-31T13", "2026-01-31"
V1 = TopicConfig(topic="orders", dataset=DS, table="orders", event_time_field="created_at")
V2 = TopicConfig(topic="orders", dataset=DS, table="orders_v2", event_time_field="created_at")  # the new routing
SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "created_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}]}
PLAN = SlicePlan("orders", H, "x", 0, 3, (PartitionSlice(0, 0, 3, 0, 3, "timestamp", "timestamp"),),
                 (SliceTask(0, 0, 3),))


class GsLikeLanding(LandingResource):
    def store(self) -> GsLikeStore:
        return GsLikeStore(self.landing_root)


@pytest.fixture
def world(fake_bigquery, instance, tmp_path, monkeypatch):
    store, fake = fake_bigquery
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", fake.url)
    return store, fake, instance, str(tmp_path)


def land(store, cfg: TopicConfig, attempt: str) -> None:
    """Hour H of topic `orders` as publish lands it: three records of event day DAY in `cfg.table`."""
    at = datetime(2026, 1, 31, 13, 7, tzinfo=timezone.utc)
    records = [{"order_id": i, "created_at": at + timedelta(minutes=n)} for n, i in enumerate("abc")]
    name = landing_file_name(OffsetRange("orders", 0, 0, 2), DS, cfg.table, 1, hour_from_tag(H))
    src, rel = f"staging/orders/{attempt}/{name}", f"{table_hour_dir(DS, cfg.table, hour_from_tag(H))}/{name}"
    data = avro_file(SCHEMA, records)
    store.write_atomic(src, data)
    staged = Staged(src, rel, LandedFile(rel, 3, len(data), 0, 0, 2, 1, H), H, cfg.table)
    publish(store, cfg, StagedHour(PLAN, [staged], [], DeadLetters(0, {}, ()), 3, attempt))


def rows(fake, table: str, pid: str) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DS, table, pid))


def retired_tick(world, configured_events):
    store, _, instance, root = world
    sensor = build_retired_hours_sensor([(DS, "orders_v2")], configured_events)
    resources = {"landing": GsLikeLanding(landing_root=root),
                 "warehouse": BigQueryWarehouseResource(project=PROJECT, location="US")}
    with build_sensor_context(instance=instance, resources=resources) as ctx:
        return sensor(ctx)


def run(world, request):
    """A retired-hours request run as the daemon would: its job, config, tags and run key."""
    _, _, instance, root = world
    return retire_hours.execute_in_process(
        run_config=request.run_config, instance=instance, raise_on_error=False,
        tags={**request.tags, RUN_KEY_TAG: request.run_key, "dagster/sensor_name": RETIRED_SENSOR_NAME},
        resources={"landing": GsLikeLanding(landing_root=root),
                   "warehouse": BigQueryWarehouseResource(project=PROJECT, location="US"),
                   "pyspark": SparkResource(remote="sc://127.0.0.1:1")})  # never opened


def loaded_as_v1(world) -> BigQueryWarehouse:
    """Hour H landed under the old routing, its landing hour and its event day loaded."""
    store, fake, _, _ = world
    wh = bigquery_warehouse(fake, store, PROJECT)
    land(store, V1, "a1")
    load_unit(wh, store, hour_unit(DS, "orders", H), NO_SPARK)
    load_unit(wh, store, event_unit(DS, "orders", DAY), NO_SPARK, V1)
    assert rows(fake, "orders__by_event", "20260131") == ["a", "b", "c"]
    return wh


def test_a_routing_change_empties_the_retired_tables_event_partitions_too(world):
    store, fake, _, _ = world
    wh = loaded_as_v1(world)
    land(store, V2, "a2")  # the routing changed: H now feeds orders_v2, and retires orders
    load_unit(wh, store, event_unit(DS, "orders_v2", DAY), NO_SPARK, V2)
    assert rows(fake, "orders_v2__by_event", "20260131") == ["a", "b", "c"]

    first = retired_tick(world, [(DS, "orders_v2")])
    asked = sorted(str(u) for r in first.run_requests for u in _units(r))
    assert asked == [f"{DS}.orders {H}", f"{DS}.orders__by_event {DAY}"]
    for request in first.run_requests:
        assert run(world, request).success
    # The three records are in one event-time table now, and the retired one says so: nothing is pending.
    assert rows(fake, "orders__by_event", "20260131") == []
    assert rows(fake, "orders_v2__by_event", "20260131") == ["a", "b", "c"]
    assert markers.list_units(store, EVENT, [(DS, "orders")]) == []
    assert not retired_tick(world, [(DS, "orders_v2")]).run_requests


def test_the_event_partitions_of_a_configured_event_table_are_left_to_its_own_sensor(world):
    """The retired-hours sensor loads event partitions only of tables no topic configures; the
    configured ones are the event sensor's (two sensors never ask for the same partition)."""
    store, fake, _, _ = world
    loaded_as_v1(world)
    land(store, V2, "a2")
    asked = [str(u) for r in retired_tick(world, [(DS, "orders"), (DS, "orders_v2")]).run_requests
             for u in _units(r)]
    assert asked == [f"{DS}.orders {H}"]


def test_an_hour_first_landed_before_the_manifest_listed_its_tables_is_retired_too(world):
    """Review N8, part B: an hour whose dead-letter manifest predates its "tables" list (as landings
    before that release wrote it) is still retired when a routing change re-lands it: the tables it
    fed are found from their done files of that hour that name its topic."""
    store, fake, _, _ = world
    loaded_as_v1(world)
    manifest = dead_letter_manifest_path("orders", hour_from_tag(H))
    store.write_json_atomic(manifest, {k: v for k, v in store.read_json(manifest).items()
                                       if k not in ("tables", "retired")})
    land(store, V2, "a2")
    assert store.read_json(manifest)["retired"] == [[DS, "orders"]]
    first = retired_tick(world, [(DS, "orders_v2")])
    for request in first.run_requests:
        assert run(world, request).success
    assert rows(fake, "orders__by_event", "20260131") == []
    assert fake.partition_rows(PROJECT, DS, "orders", "2026013113") == []


def _units(request):
    config = request.run_config["ops"]["retire_hours_op"]["config"]
    return [*(markers.parse_done_path(rel) for rel in config.get("done_files", ())),
            *(_event(name) for name in config.get("event_partitions", ()))]


def _event(name: str):
    table, partition = name.rsplit("/", 1)
    dataset, etable = table.split(".", 1)
    return event_unit(dataset, etable.removesuffix("__by_event"), partition)


@pytest.mark.parametrize("name", ["shop.orders/2026-01-31", "orders__by_event/2026-01-31",
                                  "shop.orders__by_event/31-01-2026", "shop.orders__by_event"])
def test_an_event_partition_named_wrong_by_hand_fails_saying_how_to_write_it(world, name):
    from dagster import RunRequest

    result = run(world, RunRequest(run_key="by-hand", run_config={"ops": {"retire_hours_op": {"config": {
        "event_partitions": [name]}}}}))
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert repr(name) in failure.event_specific_data.error.message


# --- what retire_hours is given by hand ------------------------------------------------------

T_R, H_R = "orders", "2026-11-20T13"
SCHEMA_R = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}


@pytest.fixture
def landed(tmp_path):
    """(store, the done file of a landed hour of two rows, that done file as a dict)."""
    store = LocalStore(str(tmp_path / "landing"))
    rel = write_hour(store, DS, T_R, H_R, [(0, 1, SCHEMA_R, [{"a": 1}, {"a": 2}])])
    return store, rel, json.loads(store.read_bytes(rel))


def retire(store: LocalStore, tmp_path, rel: str) -> Failure:
    """The Failure of `retire_hours_op` asked to retire `rel` (Dagster retries it only if `allow_retries`)."""
    resources = {"landing": LandingResource(landing_root=store.root),
                 "warehouse": IcebergWarehouseResource(root=str(tmp_path / "warehouse")),
                 "pyspark": SparkResource(remote="sc://127.0.0.1:1")}  # never opened: nothing gets that far
    with build_op_context(resources=resources) as context:
        with pytest.raises(Failure) as failed:
            retire_hours_op(context, RetireConfig(done_files=[rel]))
    return failed.value


def test_a_done_file_that_is_not_retired_is_refused_naming_its_rows(landed, tmp_path):
    store, rel, _ = landed
    failed = retire(store, tmp_path, rel)
    assert f"{RETIRE_JOB}: done file {store.location(rel)} is not retired (it lists 2 rows)" in failed.description
    assert "load it through its table's asset" in failed.description and not failed.allow_retries


def test_a_missing_done_file_says_nothing_to_retire(landed, tmp_path):
    store, _, _ = landed
    rel = f"tables/{DS}/{T_R}/hour=2026-11-20T14/_DONE.json"
    failed = retire(store, tmp_path, rel)
    assert f"{RETIRE_JOB}: done file {store.location(rel)} does not exist: nothing to retire" in failed.description
    assert "check the path in the run config" in failed.description and not failed.allow_retries


BROKEN = {
    "not JSON": (lambda raw: b"{not json", "is not JSON"),
    "not an object": (lambda raw: b"[1]", "is not a JSON object"),
    "not a done file": (lambda raw: json.dumps({"rows": 2}).encode(), "field 'dataset' is None"),
    "another table's, retired": (lambda raw: json.dumps({**raw, "table": "payments", "retired": "routing changed"})
                                 .encode(), "field 'table' is 'payments', its path says 'orders'"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_done_file_that_cannot_be_trusted_fails_the_run_naming_the_job_and_the_file(landed, tmp_path, broken):
    store, rel, raw = landed
    change, problem = BROKEN[broken]
    store.write_atomic(rel, change(raw))
    failed = retire(store, tmp_path, rel)
    message = failed.description
    assert message.startswith(f"{RETIRE_JOB}: done file ") and rel in message and problem in message, message
    assert "re-land the hour" in message and "is not retired" not in message, message
    assert not failed.allow_retries
