"""The production instance (deploy/dagster.postgres.yaml) on a real PostgreSQL, with a real
daemon: an asset backfill of a range runs through the queued coordinator as one run, the
done-file sensor asks for the loads and the loads run with their checks, and run monitoring
fails a run whose worker was SIGKILLed. Every other test uses the embedded SQLite instance."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta
from pathlib import Path

import fastavro
import pytest
import yaml
from confluent_kafka.schema_registry import Schema
from dagster import DagsterInstance, DagsterRunStatus

from kafka_landing.avro_landing.framing import frame
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, to_millis
from kafka_landing.run_launcher import ProcessCheckingRunLauncher
from kafka_landing.warehouse.assets import warehouse_key
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.run_monitoring import a_sigkilled_run_worker_is_failed
from kafka_landing_tools.daemon import land_and_load
from kafka_landing_tools import devstack

REPO = Path(__file__).resolve().parents[2]
SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


@pytest.fixture(scope="module")
def postgres(stack) -> dict:
    return devstack.start_postgres()


@pytest.fixture
def home(postgres, tmp_path, monkeypatch) -> Path:
    """DAGSTER_HOME with the repo's production instance (run monitoring polled every second) on a
    database of the test's own."""
    db = f"t_{uuid.uuid4().hex[:12]}"
    devstack.create_database(db)
    for name, value in {**postgres, "DAGSTER_PG_DB": db}.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    home.mkdir()
    conf = yaml.safe_load((REPO / "deploy" / "dagster.postgres.yaml").read_text())
    conf["run_monitoring"]["poll_interval_seconds"] = 1
    (home / "dagster.yaml").write_text(yaml.safe_dump(conf))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_the_production_instance_keeps_everything_in_postgres(home):
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert isinstance(instance.run_launcher, ProcessCheckingRunLauncher)
        assert instance.run_monitoring_enabled


def _body(record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), record)
    return buf.getvalue()


def test_the_daemon_backfills_every_topics_range_in_one_run_and_the_sensor_loads_them(
        home, code_location, make_topic, send, registry, tmp_path):
    topics = [make_topic(partitions=2), make_topic(partitions=1)]
    code_location({t: {"dataset": "pg", "table": f"orders_{n}"} for n, t in enumerate(topics)})
    first = floor_hour(utcnow()) - ONE_HOUR * 4
    hours = [first, first + ONE_HOUR]
    sent = []
    for topic in topics:
        sid = registry.client().register_schema(f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO"))
        sent += send([(topic, i % 2 if topic == topics[0] else 0, to_millis(h + timedelta(minutes=i)), None,
                       frame(sid, _body({"id": i}))) for h in hours for i in range(30)])
    assert len(sent) == 120

    done = land_and_load(topics, [hour_key(h) for h in hours], tmp_path, timeout=300)
    assert done["rows"] == len(sent), done
    assert done["tables"] == sorted(warehouse_key("pg", f"orders_{n}") for n in range(2))
    with DagsterInstance.get() as instance:
        runs = instance.get_runs()
        assert len(done["backfills"]) == 1, "the topics share their hours: one backfill"
        landing = [r for r in runs if r.tags.get("dagster/backfill") == done["backfills"][0]]
        assert len(landing) == 1, "both topics' range in one run (single-run backfill policy)"
        loads = [r for r in runs if r.tags.get("dagster/sensor_name")]
        # Each table loaded by one run: both in one when a tick finds both tables' hours ready (the
        # landing run publishes one topic after the other, so a tick between them takes one).
        tables = [t for r in loads for t in r.tags["kafka_landing/table"].split(",")]
        assert sorted(tables) == ["pg.orders_0", "pg.orders_1"], tables
        statuses = [r.status for r in instance.get_runs()]
        assert set(statuses) == {DagsterRunStatus.SUCCESS}, statuses


def test_run_monitoring_fails_a_sigkilled_run_on_postgres(home, tmp_path):
    a_sigkilled_run_worker_is_failed(tmp_path)
