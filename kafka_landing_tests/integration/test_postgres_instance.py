"""The production instance (deploy/dagster.postgres.yaml) on a real PostgreSQL, with a real
daemon: an asset backfill of a range runs through the queued coordinator as one run, the
done-file sensor asks for the loads and the loads run with their checks, and run monitoring
fails a run whose worker was SIGKILLed. Every other test uses the embedded SQLite instance."""

from __future__ import annotations

import io
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path

import fastavro
import pytest
import yaml
from confluent_kafka.schema_registry import Schema
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from kafka_landing.avro_landing.assets import landing_key
from kafka_landing.avro_landing.framing import frame
from kafka_landing.definitions import build_definitions
from kafka_landing.kafka_slices.assets import slice_key
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, to_millis
from kafka_landing.run_launcher import ProcessCheckingRunLauncher
from kafka_landing.warehouse.assets import warehouse_key
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.daemon import a_sigkilled_run_worker_is_failed, start_daemon, stop_daemon, wait_for
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


def test_the_daemon_backfills_a_range_in_one_run_and_the_sensor_loads_it(
        home, code_location, make_topic, send, registry, tmp_path):
    topic = make_topic(partitions=2)
    dataset, table = "pg", "orders"
    code_location({topic: {"dataset": dataset, "table": table}})
    sid = registry.client().register_schema(f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO"))
    first = floor_hour(utcnow()) - ONE_HOUR * 4
    hours = [first, first + ONE_HOUR]
    sent = send([(topic, i % 2, to_millis(h + timedelta(minutes=i)), None, frame(sid, _body({"id": i})))
                 for h in hours for i in range(30)])
    assert len(sent) == 60

    defs = build_definitions()
    daemon = start_daemon(tmp_path, "load_from:\n  - python_module: kafka_landing.definitions\n")
    try:
        with DagsterInstance.get() as instance:
            # What the UI's "Materialize" of a range does: an asset backfill, which the daemon runs.
            backfill = PartitionBackfill.from_asset_partitions(
                backfill_id=make_new_backfill_id(), asset_graph=defs.resolve_asset_graph(),
                partition_names=[hour_key(h) for h in hours], asset_selection=[slice_key(topic), landing_key(topic)],
                backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance, all_partitions=False,
                title=None, description=None, run_config=None)
            instance.add_backfill(backfill)
            log = tmp_path / "daemon.log"
            done = wait_for("the backfill to finish", lambda: (
                b := instance.get_backfill(backfill.backfill_id)).status not in (BulkActionStatus.REQUESTED,) and b,
                300, log)
            assert done.status == BulkActionStatus.COMPLETED_SUCCESS, done.error
            table_key = warehouse_key(dataset, table)
            loaded = wait_for("the sensor's load of both hours", lambda: instance.get_materialized_partitions(
                table_key) >= {hour_key(h) for h in hours}, 300, log)
            assert loaded
            runs = instance.get_runs()
            backfill_runs = [r for r in runs if r.tags.get("dagster/backfill") == backfill.backfill_id]
            assert len(backfill_runs) == 1, "a range is one run (single-run backfill policy)"
            wait_for("every run to finish", lambda: all(r.is_finished for r in instance.get_runs()), 120, log)
            statuses = [r.status for r in instance.get_runs()]
            assert len(statuses) >= 2 and set(statuses) == {DagsterRunStatus.SUCCESS}, statuses
            counts = [e.asset_materialization.metadata["dagster/row_count"].value
                      for e in instance.fetch_materializations(table_key, limit=10).records]
            assert sum(counts) == len(sent), counts
    finally:
        stop_daemon(daemon)


def test_run_monitoring_fails_a_sigkilled_run_on_postgres(home, tmp_path):
    a_sigkilled_run_worker_is_failed(tmp_path)
