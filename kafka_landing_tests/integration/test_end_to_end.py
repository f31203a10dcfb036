"""The whole flow on a real Dagster instance: produce, land, the done-file sensor,
warehouse loads; reloads, duplicate ticks, schema evolution and backfills."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pandas as pd
import pytest
from dagster import materialize

from kafka_landing.avro_landing.framing import frame
from kafka_landing.definitions import (
    build_definitions,
    build_resources,
    landing_job_name,
)
from kafka_landing_tools.demo.generate import (
    ORDERS,
    WEB,
    demo_hours,
    encode,
    generate,
    register,
)
from kafka_landing_tools.demo.loads import run_load_request
from kafka_landing.warehouse.queue.runs import table_slot
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, hour_tag, to_millis
from kafka_landing_tests.conftest import defs_hours, utcnow
from kafka_landing_tests.helpers import table_rows
from kafka_landing_tests.sensor_ticks import tick

HOURS = 3


@pytest.fixture
def env(code_location):
    """A topic config, landing root and (Iceberg) warehouse root of the test's own."""
    return lambda topics: code_location(topics, dead_letter_limit=0.5)


def land(defs, instance, partition: str):
    keys = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] in ("kafka_slices", "avro_landing")]
    return materialize([defs.get_assets_def(k) for k in keys], partition_key=partition,
                       resources=build_resources(), instance=instance)


def covered_hours(req) -> list[str]:
    """The hours (partition keys) a load request covers: its partition, or its range tags."""
    if req.partition_key:
        return [req.partition_key]
    assert req.partition_key_range, f"run request {req.run_key} names neither a partition nor a range"
    return defs_hours(req)


def run_requests(defs, instance, requests):
    """Run each request as the daemon would launch it (its tags carry a range); every hour it
    covers must have its conservation check evaluated, and every evaluation must pass."""
    for req in requests:
        result = run_load_request(defs, req, instance)
        assert result.success
        checked = set()
        for ev in result.get_asset_check_evaluations():
            assert ev.passed, ev
            checked.add((ev.check_name, ev.partition or req.partition_key))
        assert {h for c, h in checked if c == "conservation"} == set(covered_hours(req)), req.run_key


def test_whole_flow_through_the_sensor(env, instance, bootstrap, registry_url, spark, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    topics = {ORDERS: f"orders_{suffix}", WEB: f"web_{suffix}"}
    now = utcnow()
    sent = generate(bootstrap, registry_url, hours=HOURS, per_hour=90, now=now, topics=topics)
    env({
        topics[ORDERS]: {"dataset": f"shop_{suffix}", "table": "orders", "event_time_field": "created_at"},
        topics[WEB]: {"dataset": f"web_{suffix}", "route": {"field": "type", "tables": {"page_view": "page_views"},
                                                             "default": "other_events"}},
    })
    defs = build_definitions()
    hours = demo_hours(now, HOURS)
    for hour in hours:
        assert land(defs, instance, hour_key(hour)).success

    first = tick(defs, instance)
    # Every table's consecutive landed hours in one run, and the three tables (their topics share
    # their hours) in one run as far as their slots allow.
    tables = [(f"shop_{suffix}", "orders"), (f"web_{suffix}", "other_events"), (f"web_{suffix}", "page_views")]
    runs_needed = max(Counter(table_slot(d, t) for d, t in tables).values())
    assert len(first.run_requests) == runs_needed
    assert sorted(k.path[-1] for r in first.run_requests for k in r.asset_selection) == [t for _, t in tables]
    for r in first.run_requests:
        assert covered_hours(r) == [hour_key(h) for h in hours], r.run_key
    run_requests(defs, instance, first.run_requests)

    # Record by record: every good record produced is in its table once, with its fields.
    rows = pd.concat([
        table_rows(tmp_path / "warehouse", f"shop_{suffix}", "orders").assign(_t="orders"),
        table_rows(tmp_path / "warehouse", f"web_{suffix}", "page_views").assign(_t="page_views"),
        table_rows(tmp_path / "warehouse", f"web_{suffix}", "other_events").assign(_t="other_events"),
    ])
    by_key = {(r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]): r for _, r in rows.iterrows()}
    assert len(by_key) == len(rows), "a record is in the warehouse twice"
    good = [s for s in sent.records if not s.bad]
    assert set(by_key) == {(s.topic, s.partition, s.offset) for s in good}
    for s in good:
        row = by_key[(s.topic, s.partition, s.offset)]
        if s.topic == topics[WEB]:
            assert row["event_id"] == s.record["event_id"] and row["user_id"] == s.record["user_id"]
            assert row["_t"] == ("page_views" if s.record["type"] == "page_view" else "other_events")
        else:
            assert row["order_id"] == s.record["order_id"]
            assert Decimal(str(row["total"])) == s.record["total"]
            assert (row["coupon"] if pd.notna(row["coupon"]) else None) == s.record.get("coupon")
        assert row["hour"] in {hour_tag(h) for h in hours}

    # Once loaded, neither a duplicate tick (same cursor) nor a restarted sensor (no cursor) asks again.
    assert not tick(defs, instance).run_requests
    assert not tick(defs, instance, cursor=first.cursor).run_requests

    # Re-land and reload an hour: a new done file, one new load, an unchanged table.
    before = table_rows(tmp_path / "warehouse", f"shop_{suffix}", "orders").sort_values(["_kafka_partition", "_kafka_offset"])
    assert land(defs, instance, hour_key(hours[1])).success
    relanded = tick(defs, instance, cursor=first.cursor)
    assert sorted((covered_hours(r), k.path[-1]) for r in relanded.run_requests for k in r.asset_selection) == [
        ([hour_key(hours[1])], t) for t in ("orders", "other_events", "page_views")
    ]
    assert len(relanded.run_requests) == runs_needed
    assert not {r.run_key for r in relanded.run_requests} & {r.run_key for r in first.run_requests}
    run_requests(defs, instance, relanded.run_requests)
    after = table_rows(tmp_path / "warehouse", f"shop_{suffix}", "orders").sort_values(["_kafka_partition", "_kafka_offset"])
    pd.testing.assert_frame_equal(before.reset_index(drop=True), after.reset_index(drop=True))
    assert not tick(defs, instance, cursor=relanded.cursor).run_requests


def _schema(name: str, fields: list) -> dict:
    return {"type": "record", "name": name, "fields": [{"name": "id", "type": "long"}, *fields]}


def failure_message(result) -> str:
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.event_specific_data.error.message


def test_schema_evolution_across_hours(env, instance, make_topic, send, registry, spark, tmp_path):
    topic = make_topic(partitions=1)
    env({topic: {"dataset": "evo", "table": "things"}})
    client = registry.client()
    v1 = _schema("Thing", [{"name": "name", "type": "string"}])
    v2 = _schema("Thing", [{"name": "name", "type": "string"}, {"name": "colour", "type": ["null", "string"], "default": None}])
    bad = _schema("Thing", [{"name": "name", "type": "long"}])
    id1, id2 = register(client, f"{topic}-value", v1), register(client, f"{topic}-value", v2)
    id_bad = register(client, f"{topic}-other-value", bad)  # another subject: the registry accepts it
    h = floor_hour(utcnow()) - ONE_HOUR * 5
    send([(topic, 0, to_millis(h + timedelta(minutes=1)), None, frame(id1, encode(v1, {"id": 1, "name": "a"}))),
          (topic, 0, to_millis(h + ONE_HOUR + timedelta(minutes=1)), None,
           frame(id2, encode(v2, {"id": 2, "name": "b", "colour": "red"}))),
          (topic, 0, to_millis(h + 2 * ONE_HOUR + timedelta(minutes=1)), None, frame(id_bad, encode(bad, {"id": 3, "name": 7})))])
    defs = build_definitions()
    for i in range(3):
        assert land(defs, instance, hour_key(h + ONE_HOUR * i)).success
    (req,) = tick(defs, instance).run_requests  # the three consecutive hours in one run
    assert covered_hours(req) == [hour_key(h + ONE_HOUR * i) for i in range(3)]
    # The run loads the two compatible hours and fails on the third, naming why.
    result = run_load_request(defs, req, instance, raise_on_error=False)
    assert not result.success
    message = failure_message(result)
    assert "field 'name' changed type from string to long" in message and str(id_bad) in message
    assert hour_key(h + 2 * ONE_HOUR) in message and hour_key(h) not in message, message
    loaded = {e.partition for e in result.get_asset_materialization_events()}
    assert loaded == {hour_key(h), hour_key(h + ONE_HOUR)}, "the compatible hours keep their load"
    table = table_rows(tmp_path / "warehouse", "evo", "things").sort_values("id")
    assert list(table["id"]) == [1, 2]
    assert table["colour"].isna().tolist() == [True, False], "the older hour reads the new column as null"

    # Materialised by hand, the incompatible hour alone fails the same way.
    result = materialize([defs.get_assets_def(req.asset_selection[0])], partition_key=hour_key(h + 2 * ONE_HOUR),
                         resources=build_resources(), instance=instance, raise_on_error=False)
    assert not result.success
    message = failure_message(result)
    assert "field 'name' changed type from string to long" in message and str(id_bad) in message
    # Nothing lost: the table is unchanged and the hour's landing files are still there.
    assert sorted(table_rows(tmp_path / "warehouse", "evo", "things")["id"]) == [1, 2]
    done = json.loads((tmp_path / "landing" / "tables" / "evo" / "things" / f"hour={hour_tag(h + 2 * ONE_HOUR)}" / "_DONE.json").read_text())
    assert done["rows"] == 1 and (tmp_path / "landing" / done["files"][0]["path"]).exists()


def test_backfill_of_a_range_runs_as_one_run(env, instance, make_topic, send, spark, tmp_path):
    topic = make_topic(partitions=2)
    env({topic: {"dataset": "bf", "table": "raw", "dead_letter_limit": 1.0}})
    h = floor_hour(utcnow()) - ONE_HOUR * 6
    send([(topic, p, to_millis(h + ONE_HOUR * i + timedelta(minutes=7)), None, b"\x01bad magic") for i in range(4) for p in (0, 1)])
    defs = build_definitions()
    job = defs.resolve_job_def(landing_job_name(topic))
    result = job.execute_in_process(
        instance=instance, resources=build_resources(),
        tags={"dagster/asset_partition_range_start": hour_key(h), "dagster/asset_partition_range_end": hour_key(h + ONE_HOUR * 3)},
    )
    assert result.success
    mats = {(e.asset_key.path[0], e.partition) for e in result.get_asset_materialization_events()}
    assert mats == {(layer, hour_key(h + ONE_HOUR * i)) for layer in ("kafka_slices", "avro_landing") for i in range(4)}
    assert len(instance.get_runs()) == 1
    # Each hour's own figures are on its own partition's materialisation (not the range total).
    rows = {(e.asset_key.path[0], e.partition): e.materialization.metadata["dagster/row_count"].value
            for e in result.get_asset_materialization_events()}
    assert rows == {(layer, hour_key(h + ONE_HOUR * i)): 2 if layer == "kafka_slices" else 0
                    for layer in ("kafka_slices", "avro_landing") for i in range(4)}
    for i in range(4):
        manifest = json.loads((tmp_path / "landing" / "dead_letters" / topic / f"hour={hour_tag(h + ONE_HOUR * i)}" / "_MANIFEST.json").read_text())
        assert manifest["rows"] == 2 and manifest["by_reason"] == {"bad magic byte": 2}


def test_every_change_the_registry_accepts_lands_loads_and_reads_back_whole(env, instance, make_topic, send, registry,
                                                                           spark, tmp_path):
    """v1 -> v2 -> v3 registered under BACKWARD (the registry's own check accepts each), an hour of
    each and one hour mixing v1 and v2 in one partition, landed and loaded through Dagster as the
    sensor asks; every reader the docs show gets every row with the widened types."""
    import duckdb
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from kafka_landing.warehouse.iceberg import IcebergWarehouse
    from kafka_landing_tests import evolving_schemas as evo

    topic = make_topic(partitions=1)
    env({topic: {"dataset": "evo", "table": "pays"}})
    client, subject = registry.client(), f"{topic}-value"
    client.set_compatibility(subject_name=subject, level="BACKWARD")
    ids = {id(v): client.register_schema(subject, Schema(json.dumps(v), "AVRO")) for v in (evo.V1, evo.V2, evo.V3)}
    bad = json.loads(json.dumps(evo.V3))
    bad["fields"][4] = {"name": "note", "type": "long"}
    with pytest.raises(SchemaRegistryError):  # the registry's check is on: a real narrowing is refused
        client.register_schema(subject, Schema(json.dumps(bad), "AVRO"))

    h = floor_hour(utcnow()) - ONE_HOUR * 6
    records = []
    for i, (tag, rids) in enumerate(sorted(evo.HOURS.items())):
        for j, rid in enumerate(rids):
            schema, rec = evo.ROWS[rid]
            records.append((topic, 0, to_millis(h + ONE_HOUR * i + timedelta(minutes=1 + j)), None,
                            frame(ids[id(schema)], encode(schema, rec))))
    send(records)
    defs = build_definitions()
    for i in range(len(evo.HOURS)):
        assert land(defs, instance, hour_key(h + ONE_HOUR * i)).success
    run_requests(defs, instance, tick(defs, instance).run_requests)

    wh = IcebergWarehouse(str(tmp_path / "warehouse"))
    arrow = wh.table("evo", "pays").scan().to_arrow()
    evo.check_rows(arrow.to_pylist())
    df = table_rows(tmp_path / "warehouse", "evo", "pays")
    assert sorted(df["id"]) == [1, 2, 3, 4, 5] and df["amount"].dtype == "float64"
    assert sorted(df.columns.intersection(["region", "legacy", "qty", "hour"])) == ["hour", "legacy", "qty", "region"]
    assert df.set_index("id").loc[2, "amount"] == float(2**40)
    got = wh.spark_table(spark, "evo", "pays")
    assert got.count() == 5 and dict(got.dtypes)["price"] == "decimal(12,3)"
    assert duckdb.sql("select count(*) from arrow").fetchall() == [(5,)]
