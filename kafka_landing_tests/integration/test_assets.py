"""The slice and landing assets run through a real Dagster instance, as the UI runs them."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import fastavro
import pytest
from dagster import DagsterInstance, materialize

from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing.naming import ONE_HOUR, Hour, floor_hour, hour_key, to_millis
from kafka_landing_tests.conftest import utcnow


@pytest.fixture
def topic_config(code_location):
    return lambda topics: code_location(topics, grace_minutes=0)


def run_assets(partition: str, raise_on_error: bool = True):
    defs = build_definitions()
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    assets = [defs.get_assets_def(k) for k in sorted(keys) if k.path[0] in ("kafka_slices", "avro_landing")]
    return materialize(assets, partition_key=partition, resources=build_resources(),
                       instance=DagsterInstance.ephemeral(), raise_on_error=raise_on_error)


def test_slice_and_landing_metadata_in_dagster(topic_config, make_topic, send, spark):
    topic = make_topic(partitions=2)
    topic_config({topic: {"dataset": "d", "table": "t"}})
    hour = floor_hour(utcnow()) - ONE_HOUR * 2
    send([(topic, p, to_millis(hour + timedelta(minutes=m)), None, b"\x09not avro") for p in (0, 1) for m in range(3)])
    result = run_assets(hour_key(hour), raise_on_error=False)
    mats = {e.asset_key.path[0]: e.materialization.metadata for e in result.get_asset_materialization_events()}
    slice_md = mats["kafka_slices"]
    manifest = slice_md["manifest"].value
    assert "%" not in manifest and Path(manifest).is_file(), f"not a path a shell finds: {manifest}"
    assert slice_md["dagster/row_count"].value == 6 and slice_md["records"].value == 6
    rows = slice_md["partitions"].value.records
    assert [(r.data["partition"], r.data["start_offset"], r.data["end_offset"]) for r in rows] == [(0, 0, 3), (1, 0, 3)]
    # Every record is a dead letter: above the default 1% limit, so landing fails after keeping them.
    assert "avro_landing" not in mats
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "6 of 6 records are dead letters" in failure.event_specific_data.error.message


def test_unknown_topic_fails_with_a_clear_message(topic_config):
    topic_config({"topic_that_does_not_exist": {"dataset": "d", "table": "t"}})
    result = run_assets(hour_key(floor_hour(utcnow()) - ONE_HOUR * 2), raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "topic 'topic_that_does_not_exist' does not exist" in failure.event_specific_data.error.message


def test_registry_down_fails_before_spark_starts_naming_it(topic_config, make_topic, send, one_attempt_in_step):
    from dagster_pyspark import LazyPySparkResource

    from kafka_landing.resources import SchemaRegistryResource

    topic = make_topic(partitions=1)
    topic_config({topic: {"dataset": "d", "table": "t"}})
    hour = floor_hour(utcnow()) - ONE_HOUR * 2
    send([(topic, 0, to_millis(hour + timedelta(minutes=1)), None, b"\x00\x00\x00\x00\x01x")])
    url = "http://localhost:9/apis/ccompat/v7"  # the discard port: nothing listens
    spark = LazyPySparkResource(spark_config={})
    defs = build_definitions()
    assets = [defs.get_assets_def(k) for k in sorted(defs.resolve_asset_graph().get_all_asset_keys())
              if k.path[0] in ("kafka_slices", "avro_landing")]
    result = materialize(assets, partition_key=hour_key(hour), instance=DagsterInstance.ephemeral(),
                         resources={**build_resources(), "registry": SchemaRegistryResource(url=url), "pyspark": spark},
                         raise_on_error=False)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert f"schema registry {url} could not be reached" in message, message
    assert spark._spark_session is None, "Spark was started before the registry was checked"  # noqa: SLF001


def test_broker_down_fails_naming_the_bootstrap_servers(topic_config, one_attempt_in_step):
    from kafka_landing.kafka_slices.resources import KafkaResource

    topic_config({"any_topic": {"dataset": "d", "table": "t"}})
    defs = build_definitions()
    assets = [defs.get_assets_def(k) for k in sorted(defs.resolve_asset_graph().get_all_asset_keys())
              if k.path[0] == "kafka_slices"]
    result = materialize(assets, partition_key=hour_key(floor_hour(utcnow()) - ONE_HOUR * 2),
                         instance=DagsterInstance.ephemeral(), raise_on_error=False,
                         resources={**build_resources(), "kafka": KafkaResource(bootstrap_servers="localhost:9",
                                                                                timeout_seconds=2)})
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "Kafka brokers localhost:9" in message and "KAFKA_BOOTSTRAP_SERVERS" in message, message


def test_offsets_deleted_after_freezing_are_skipped_only_on_request_and_counted(
        topic_config, make_topic, send, admin, registry, spark):
    """#12: retention deleting part of a frozen hour fails landing, naming the range and the remedy; with
    `skip_retention_gaps` the rest lands, the done file records the range and conservation counts it."""
    from confluent_kafka import TopicPartition

    from kafka_landing.avro_landing.assets import landing_key
    from kafka_landing.avro_landing.conservation import check_landed_hour
    from kafka_landing.avro_landing.framing import frame
    from kafka_landing.config import TopicConfig
    from kafka_landing.kafka_slices.freeze import frozen_slice
    from kafka_landing.handoff.manifests import DoneFile
    from kafka_landing.naming import done_file_path
    from kafka_landing.store.local import LocalStore
    from kafka_landing_tests.integration.test_landing import SIMPLE, encode, register

    topic = make_topic(partitions=1)
    topic_config({topic: {"dataset": "d", "table": "t"}})
    sid = register(registry.client(), f"{topic}-value", SIMPLE)
    hour = floor_hour(utcnow()) - ONE_HOUR * 2
    send([(topic, 0, to_millis(hour + timedelta(minutes=m)), None, frame(sid, encode(SIMPLE, {"n": m})))
          for m in range(5)])
    defs = build_definitions()
    slices = [defs.get_assets_def(k) for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "kafka_slices"]
    materialize(slices, partition_key=hour_key(hour), resources=build_resources(), instance=DagsterInstance.ephemeral())
    admin.delete_records([TopicPartition(topic, 0, 3)])[TopicPartition(topic, 0, 3)].result(timeout=30)

    landing = defs.get_assets_def(landing_key(topic))

    def land(**config):
        return materialize([landing], partition_key=hour_key(hour), resources=build_resources(),
                           instance=DagsterInstance.ephemeral(), raise_on_error=False,
                           run_config={"ops": {landing.op.name: {"config": config}}} if config else None)

    refused = land()
    assert not refused.success
    message = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error.message
    assert "partition 0: offsets [0, 3)" in message and "skip_retention_gaps" in message

    landed = land(skip_retention_gaps=True)
    assert landed.success
    store = LocalStore(Path(os.environ["KAFKA_LANDING_ROOT"]))
    done = DoneFile.from_dict(store.read_json(done_file_path("d", "t", hour)))
    assert done.rows == 2 and done.skipped == ({"partition": 0, "start": 0, "end": 3,
                                                "reason": "deleted by retention after freezing"},)
    md = landed.get_asset_materialization_events()[0].materialization.metadata
    assert md["skipped_offsets"].value == 3 and md["offsets_without_record"].value == 0
    checks = {c.check_name: c.passed for c in landed.get_asset_check_evaluations()}
    assert checks["conservation"] is True
    cfg, plan = TopicConfig(topic=topic, dataset="d", table="t"), frozen_slice(store, topic, Hour(hour))
    assert plan.records == 5
    conserved = check_landed_hour(store, cfg, plan)
    assert (conserved.passed, conserved.skipped) == (True, 3)
    # The check counts the recorded range: without it the hour no longer adds up.
    store.write_json_atomic(done_file_path("d", "t", hour), {**done.to_dict(), "skipped": []})
    assert not check_landed_hour(store, cfg, plan).passed


def _offsets_in_kafka(bootstrap: str, topic: str, end: int) -> dict[int, bytes]:
    """{offset: value} of the records partition 0 still holds below `end` (read_committed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        # Asked once: a watermark asked of the broker between two polls makes each poll wait its
        # whole timeout (half a second a record).
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out, deadline = {}, time.monotonic() + 30
        while time.monotonic() < deadline:
            if consumer.position([TopicPartition(topic, 0)])[0].offset >= min(end, high) and out:
                break
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error() and msg.offset() < end:
                out[msg.offset()] = msg.value()
        return out
    finally:
        consumer.close()


def test_a_compacted_topic_cleaned_while_its_hour_lands_lands_every_surviving_offset_once(
        topic_config, make_topic, send, registry, spark, bootstrap, admin):
    """Review R2, for real: a compacted topic whose log cleaner removes superseded records of a
    closed hour after it was frozen. The run reads Kafka once (a snapshot, the run's log says so),
    lands every record that was still there exactly once, as produced, counts the removed offsets
    as offsets without a record, and the landing conservation check passes."""
    from kafka_landing.avro_landing.assets import landing_key
    from kafka_landing.avro_landing.framing import frame
    from kafka_landing.handoff.manifests import DoneFile
    from kafka_landing.naming import done_file_path
    from kafka_landing.store.local import LocalStore
    from kafka_landing_tests.integration.test_landing import SIMPLE, encode, register

    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    # Compacted only once its hour is frozen: the cleaner then removes records the slice holds.
    topic = make_topic(partitions=1, config={"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                                             "delete.retention.ms": "0"})
    topic_config({topic: {"dataset": "d", "table": "t"}})
    sid = register(registry.client(), f"{topic}-value", SIMPLE)
    hour = floor_hour(utcnow()) - ONE_HOUR * 2
    produced = {}
    for batch in range(4):  # ten versions of six keys, in segments that roll every 100 ms
        sent = send([(topic, 0, to_millis(hour + timedelta(minutes=batch, seconds=i)), f"k{i % 6}".encode(),
                      frame(sid, encode(SIMPLE, {"n": batch * 100 + i}))) for i in range(15)])
        produced.update({s.offset: s.value for s in sent})
        time.sleep(0.3)
    send([(topic, 0, to_millis(utcnow()), b"later", frame(sid, encode(SIMPLE, {"n": -1})))])  # rolls the segment
    defs = build_definitions()
    slices = [defs.get_assets_def(k) for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "kafka_slices"]
    instance = DagsterInstance.ephemeral()
    assert materialize(slices, partition_key=hour_key(hour), resources=build_resources(), instance=instance).success
    compact = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([compact])[compact].result(timeout=30)
    deadline = time.monotonic() + 120
    while len(_offsets_in_kafka(bootstrap, topic, 60)) == 60:  # the cleaner has not run yet
        assert time.monotonic() < deadline, "the log cleaner removed nothing of a compacted topic in 120 s"
        time.sleep(1)

    landed = materialize([defs.get_assets_def(landing_key(topic))], partition_key=hour_key(hour),
                         resources=build_resources(), instance=instance, raise_on_error=False)
    assert landed.success, [e.event_specific_data.error.message for e in landed.all_events
                            if e.event_type_value == "STEP_FAILURE"]
    logs = [e.user_message for e in instance.all_logs(landed.run_id)]
    assert any("once, into a snapshot (a compacted topic)" in m for m in logs), logs
    store = LocalStore(Path(os.environ["KAFKA_LANDING_ROOT"]))
    done = DoneFile.from_dict(store.read_json(done_file_path("d", "t", hour)))
    rows = {}
    for f in done.files:
        with open(store.location(f.path), "rb") as fh:
            for r in fastavro.reader(fh):
                assert r["_kafka_offset"] not in rows, f"offset {r['_kafka_offset']} landed twice"
                rows[r["_kafka_offset"]] = r["n"]
    survivors_now = _offsets_in_kafka(bootstrap, topic, 60)
    assert set(survivors_now) <= set(rows) <= set(produced)  # records only leave the log; none landed twice
    assert len(rows) < 60 and done.rows == len(rows) and done.offsets_without_record == 60 - len(rows)
    assert {o: n for o, n in rows.items()} == {o: (o // 15) * 100 + o % 15 for o in rows}  # each value as produced
    checks = {c.check_name: c.passed for c in landed.get_asset_check_evaluations()}
    assert checks["conservation"] is True
