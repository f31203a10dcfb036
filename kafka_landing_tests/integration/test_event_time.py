"""Event-time tables on the real stack (broker, registry, Spark, a Dagster instance): records of one
event day arriving over several landing hours, one of them days later, landed as a range and hour
by hour; each amendment replaces the event day whole as a new version; records with no event time
or a sentinel one in the unknown partition of their landing day; every landed offset is in the
event-time table exactly once, checked by (topic, partition, offset); re-lands re-version exactly the
event partitions whose records changed."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pandas as pd
from dagster import AssetCheckKey, AssetCheckSeverity, materialize
from dagster._core.event_api import PartitionKeyFilter

from kafka_landing.avro_landing.framing import frame
from kafka_landing.config import load_config
from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing.warehouse.by_event.versions import latest_manifest, versions
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, hour_tag, to_millis, unknown_partition
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.by_event.measures import event_conservation
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing.warehouse.sensors import EVENT_SENSOR_NAME, SETTLED_SENSOR_NAME
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import table_rows
from kafka_landing_tests.sensor_ticks import tick
from kafka_landing_tools.demo.generate import encode, register
from kafka_landing_tools.demo.loads import run_event_requests

TS = {"type": "long", "logicalType": "timestamp-millis"}
SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "created_at", "type": ["null", TS], "default": None},
    {"name": "paid_at", "type": ["null", TS], "default": None}]}
DS = "evt"


def land(defs, instance, first: datetime, last: datetime | None = None):
    """Land one hour, or the hours first..last as one range (one run, as a backfill does)."""
    keys = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] in ("kafka_slices", "avro_landing")]
    tags = {} if last is None else {"dagster/asset_partition_range_start": hour_key(first),
                                    "dagster/asset_partition_range_end": hour_key(last)}
    result = materialize([defs.get_assets_def(k) for k in keys], instance=instance, resources=build_resources(),
                         partition_key=hour_key(first) if last is None else None, tags=tags)
    assert result.success


def load_events(defs, instance, landing) -> dict[str, dict]:
    """One sensor tick and its runs; {partition: the materialisation's metadata}. Each run's checks are
    evaluated (conservation may wait for a partition loaded later in the tick); once all ran, every
    partition's conservation holds."""
    result = tick(defs, instance, sensor=EVENT_SENSOR_NAME)
    out = {}
    for req, run in zip(result.run_requests, run_event_requests(defs, result, instance)):
        assert run.success
        (mat,) = run.get_asset_materialization_events()
        out[req.partition_key] = {k: v.value for k, v in mat.materialization.metadata.items()}
        # The run's own partition (a run also re-evaluates the partitions whose check waited for it).
        checks = {ev.check_name: ev for ev in run.get_asset_check_evaluations() if ev.partition == req.partition_key}
        conservation = checks["conservation_by_event"]
        assert conservation.passed or conservation.severity == AssetCheckSeverity.WARN, conservation.description
        settled = checks["settled"]  # just versioned: not final yet, yellow (it was never final: never red)
        assert (settled.passed, settled.severity, settled.metadata["settled"].value) == (
            False, AssetCheckSeverity.WARN, False), settled.description
    cfg = load_config().topics[next(iter(load_config().topics))]
    warehouse = build_resources()["warehouse"].backend(landing)
    for p in out:
        c = event_conservation(landing, warehouse, cfg, "orders", p)
        assert c.ok, c.why
    # What the UI shows: each check's latest evaluation per partition, none red once the data are exact:
    # conservation green, and each day just versioned not final yet (yellow, saying until when).
    key = next(k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[-1] == "orders__by_event")
    for name in ("conservation_by_event", "settled"):
        check_key = AssetCheckKey(key, name)
        for p in out:
            shown = instance.event_log_storage.get_latest_asset_check_execution_by_key(
                [check_key], partition_filter=PartitionKeyFilter(key=p))[check_key].evaluation
            assert shown.passed if name == "conservation_by_event" else (
                shown.severity == AssetCheckSeverity.WARN and "may still amend it until" in shown.description), (
                name, p, shown.description)
    return out


def table(root, partition: str) -> pd.DataFrame:
    return table_rows(root, DS, "orders__by_event", event_day=partition)


def keys(df: pd.DataFrame) -> list[tuple]:
    return sorted(zip(df["_kafka_topic"], df["_kafka_partition"], df["_kafka_offset"]))


def test_late_records_amend_their_event_day_and_relands_re_version_what_they_touch(
        code_location, instance, make_topic, send, registry, spark, tmp_path):
    topic = make_topic(partitions=2)
    sid = register(registry.client(), f"{topic}-value", SCHEMA)
    now = utcnow()
    day = (floor_hour(now) - timedelta(days=3)).replace(hour=20)  # the event day's evening, three days ago
    h0, h1, late = day + ONE_HOUR, day + 2 * ONE_HOUR, floor_hour(now) - 2 * ONE_HOUR
    d, late_day = hour_tag(day)[:10], hour_tag(late)[:10]
    unknown, late_unknown = unknown_partition(h1), unknown_partition(late)  # by landing day

    def rec(n: int, landing_hour: datetime, created: datetime | None, paid: datetime | None = None):
        value = {"id": n, "created_at": created, "paid_at": paid}
        return (topic, n % 2, to_millis(landing_hour + timedelta(minutes=10 + n % 40)), None,
                frame(sid, encode(SCHEMA, value)))

    sent = send([
        *(rec(n, h0, day + timedelta(minutes=5 * n)) for n in range(6)),  # event day d, landing hour h0
        *(rec(n, h1, h1 + timedelta(minutes=n), paid=h1 + timedelta(days=1)) for n in range(6, 10)),  # d, hour h1
        rec(10, h1, None),  # no event time: the unknown partition of h1's day
        rec(11, late, day + timedelta(hours=-8)),  # three days late, still day d
        rec(12, late, late + timedelta(minutes=1)),  # on time, in the late hour's own day
        rec(13, late, datetime(1900, 1, 1, tzinfo=timezone.utc)),  # a sentinel: the late hour's day's unknown
    ])
    by_id = {json_id: (s.topic, s.partition, s.offset) for json_id, s in zip(range(14), sent_in_id_order(sent))}
    code_location({topic: {"dataset": DS, "table": "orders", "event_time_field": "created_at"}},
                  first_hour=hour_key(h0))
    defs = build_definitions()
    landing = LocalStore(tmp_path / "landing")

    # The event day's two landing hours as one range: version 1 of day d, and h1's day's unknown partition.
    land(defs, instance, h0, h1)
    first = load_events(defs, instance, landing)
    assert set(first) == {d, unknown}
    assert (first[d]["version"], first[d]["dagster/row_count"], first[d]["settled"]) == (1, 10, False)
    assert (first[d]["new_version"], first[d]["amended"]) == (True, False)  # a new version, not an amendment
    assert first[d]["landing_hours"] == {hour_tag(h0): 6, hour_tag(h1): 4}
    assert keys(table(tmp_path / "warehouse", d)) == sorted(by_id[i] for i in range(10))
    assert keys(table(tmp_path / "warehouse", unknown)) == [by_id[10]]
    assert (first[unknown]["no_event_time_rows"], first[unknown]["sentinel_time_rows"]) == (1, 0)
    assert tick(defs, instance, sensor=EVENT_SENSOR_NAME).run_requests == []  # nothing changed since: nothing asked
    assert tick(defs, instance, sensor=SETTLED_SENSOR_NAME).run_requests == []  # and nothing is final yet

    # Three days later a landing hour brings one more record of day d: version 2 replaces it whole.
    land(defs, instance, late)
    second = load_events(defs, instance, landing)
    assert set(second) == {d, late_day, late_unknown}
    assert (second[d]["version"], second[d]["changed_hours"], second[d]["dagster/row_count"]) == \
        (2, [hour_tag(late)], 11)
    assert (second[d]["new_version"], second[d]["amended"]) == (True, True)
    got = keys(table(tmp_path / "warehouse", d))
    assert got == sorted([*(by_id[i] for i in range(10)), by_id[11]])  # each offset once
    assert keys(table(tmp_path / "warehouse", late_day)) == [by_id[12]]
    assert keys(table(tmp_path / "warehouse", late_unknown)) == [by_id[13]]  # as landed: its time is 1900-01-01
    assert (second[late_unknown]["sentinel_time_rows"], second[late_unknown]["sentinel_event_hours"]) == (
        1, {"1900-01-01T00": 1})
    manifest = latest_manifest(landing, DS, "orders", d)
    assert sorted(manifest.hours) == [hour_tag(h0), hour_tag(h1), hour_tag(late)]

    # Re-landing the late hour as it was changes no event partition's files: no new version.
    land(defs, instance, late)
    again = load_events(defs, instance, landing)
    assert {p: (m["version"], m["new_version"], m["amended"]) for p, m in again.items()} == {
        d: (2, False, True), late_day: (1, False, False), late_unknown: (1, False, False)}

    # The event time changes (another field): re-landing h1 moves its records from day d to the next
    # day. Day d and the next day get new versions; h1's day's unknown partition (h1's record with
    # neither time) is looked at and keeps its version; the late hour's day is not touched.
    code_location({topic: {"dataset": DS, "table": "orders", "event_time_field": "paid_at"}},
                  first_hour=hour_key(h0))
    defs = build_definitions()
    land(defs, instance, h1)
    next_day = hour_tag(h1 + timedelta(days=1))[:10]
    third = load_events(defs, instance, landing)
    assert set(third) == {d, next_day, unknown}
    assert (third[d]["version"], third[d]["dagster/row_count"]) == (3, 7)
    assert (third[next_day]["version"], third[unknown]["version"], third[unknown]["new_version"]) == (1, 1, False)
    assert keys(table(tmp_path / "warehouse", next_day)) == sorted(by_id[i] for i in range(6, 10))
    assert keys(table(tmp_path / "warehouse", d)) == sorted([*(by_id[i] for i in range(6)), by_id[11]])
    assert versions(landing, DS, "orders", late_day) == [1]
    # Every landed offset is in exactly one event partition.
    everything = every_row(tmp_path / "warehouse")
    assert len(everything) == len(set(keys(everything))) == 14


def sent_in_id_order(sent):
    """The produced records in the order of their ids (decoded from their values)."""
    import io

    import fastavro

    def rid(s):
        return fastavro.schemaless_reader(io.BytesIO(s.value[5:]), fastavro.parse_schema(SCHEMA))["id"]

    return sorted(sent, key=rid)


def every_row(root) -> pd.DataFrame:
    return table_rows(root, DS, "orders__by_event")


def test_a_manifest_names_every_file_and_its_landing_hour(code_location, instance, make_topic, send, registry,
                                                           spark, tmp_path):
    topic = make_topic(partitions=1)
    sid = register(registry.client(), f"{topic}-value", SCHEMA)
    hour = floor_hour(utcnow()) - 3 * ONE_HOUR
    send([(topic, 0, to_millis(hour + timedelta(minutes=m)), None,
           frame(sid, encode(SCHEMA, {"id": m, "created_at": hour + timedelta(minutes=m), "paid_at": None})))
          for m in range(3)])
    code_location({topic: {"dataset": DS, "table": "orders", "event_time_field": "created_at",
                           "event_time_partition": "hour"}}, first_hour=hour_key(hour))
    defs = build_definitions()
    landing = LocalStore(tmp_path / "landing")
    land(defs, instance, hour)
    got = load_events(defs, instance, landing)
    assert set(got) == {hour_tag(hour)}
    m = latest_manifest(LocalStore(tmp_path / "landing"), DS, "orders", hour_tag(hour))
    raw = json.loads((tmp_path / "landing" / m.path).read_text())
    assert [(f["hour"], f["rows"]) for f in raw["files"]] == [(hour_tag(hour), 3)]
    assert raw["granularity"] == "hour" and raw["version"] == 1
    # The Iceberg table is partitioned by event hour (then landing hour): the hour is a partition of its own.
    rows = table_rows(tmp_path / "warehouse", DS, "orders__by_event", event_hour=hour_tag(hour))
    assert sorted(rows["id"]) == [0, 1, 2] and set(rows["hour"]) == {hour_tag(hour)}
    t = IcebergWarehouse(str(tmp_path / "warehouse")).by_event("hour", "created_at").table(DS, "orders__by_event")
    assert [f.name for f in t.spec().fields] == ["event_hour"]  # the landing hour a column: an hour compacts to a file
