"""The slice and landing assets run through a real Dagster instance, as the UI runs them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, materialize

from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, to_millis
from kafka_landing_tests.conftest import utcnow


@pytest.fixture
def topic_config(tmp_path, monkeypatch):
    def _write(topics: dict) -> None:
        path = tmp_path / "topics.yaml"
        path.write_text(yaml.safe_dump({"defaults": {"grace_minutes": 0}, "topics": topics}))
        monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(path))
        monkeypatch.setenv("KAFKA_LANDING_ROOT", str(tmp_path / "landing"))

    return _write


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


def test_registry_down_fails_before_spark_starts_naming_it(topic_config, make_topic, send, monkeypatch):
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


def test_broker_down_fails_naming_the_bootstrap_servers(topic_config):
    from kafka_landing.resources import KafkaResource

    topic_config({"any_topic": {"dataset": "d", "table": "t"}})
    defs = build_definitions()
    assets = [defs.get_assets_def(k) for k in sorted(defs.resolve_asset_graph().get_all_asset_keys())
              if k.path[0] == "kafka_slices"]
    result = materialize(assets, partition_key=hour_key(floor_hour(utcnow()) - ONE_HOUR * 2),
                         instance=DagsterInstance.ephemeral(), raise_on_error=False,
                         resources={**build_resources(), "kafka": KafkaResource(bootstrap_servers="localhost:9",
                                                                                timeout_seconds=5)})
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.message
    assert "Kafka brokers localhost:9" in message and "KAFKA_BOOTSTRAP_SERVERS" in message, message
