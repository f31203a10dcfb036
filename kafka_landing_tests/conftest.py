"""One real stack per test session: the local Kafka broker and schema registry
(started if they are not running), and one Spark session, created lazily."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic
from dagster import DagsterInstance

# Transient failures are retried with a backoff from 20 s in production; the tests that
# provoke them (registry and brokers away) should not wait minutes for it. Set before
# anything builds the definitions, and inherited by the `dagster` processes tests start.
os.environ.setdefault("KAFKA_LANDING_RETRY_DELAY_SECONDS", "0.1")
# Each attempt against a broker that is down waits for the Kafka client's timeouts: the tests
# that provoke it try twice in the step (the bound itself is tested in unit/test_hours.py).
os.environ.setdefault("KAFKA_LANDING_IN_STEP_ATTEMPTS", "2")
# The test configs name no first hour: every topic's partitions start here unless a test says
# otherwise (the first-hour tests set their own, or unset it).
os.environ.setdefault("KAFKA_LANDING_FIRST_HOUR", "2026-01-01-00:00")

from kafka_landing_tools import devstack  # noqa: E402
from kafka_landing_tools.demo.generate import produce
from kafka_landing.kafka_slices.resources import KafkaResource
from kafka_landing.resources import (
    LandingResource,
    SchemaRegistryResource,
)
from kafka_landing.store.local import LocalStore

# Fixtures shared by every test module: the GCS emulator's (gcs_emulator, gcs_bucket, ...), the BigQuery
# fake serving a local folder (fake_bigquery), and a code location of one table for the sensors' tests.
pytest_plugins = ["kafka_landing_tests.gcs_support", "kafka_landing_tests.bigquery_support",
                  "kafka_landing_tests.sensor_ticks"]


@pytest.fixture(scope="session")
def stack():
    devstack.up()
    return devstack.status()


@pytest.fixture(scope="session")
def bootstrap(stack) -> str:
    return stack["kafka"]["bootstrap"]


@pytest.fixture(scope="session")
def registry_url(stack) -> str:
    return stack["registry"]["url"]


@pytest.fixture(scope="session")
def iceberg_rest_url(stack) -> str:
    """The stack's Iceberg REST catalog: one for the session, each test in namespaces of its own."""
    return stack["iceberg_rest"]["url"]


@pytest.fixture(scope="session")
def kafka(bootstrap) -> KafkaResource:
    return KafkaResource(bootstrap_servers=bootstrap)


@pytest.fixture(scope="session")
def registry(registry_url) -> SchemaRegistryResource:
    return SchemaRegistryResource(url=registry_url)


@pytest.fixture(scope="session")
def admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def make_topic(admin):
    """Create a fresh topic with a unique name; retention off so old timestamps stay."""

    def _make(partitions: int = 1, prefix: str = "t", config: dict | None = None) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        fut = admin.create_topics([NewTopic(name, partitions, 1, config={"retention.ms": "-1", **(config or {})})])[name]
        fut.result(timeout=30)
        return name

    return _make


def topics_yaml(topics: dict, **defaults) -> str:
    """A topic config file's text: `topics` as the YAML's `topics:` (topic -> its fields), and
    `defaults` over a 5-minute grace."""
    return yaml.safe_dump({"defaults": {"grace_minutes": 5, **defaults}, "topics": topics})


@pytest.fixture
def code_location(tmp_path, monkeypatch):
    """A code location of the test's own, as `dagster dev` would load it from the environment:
    `code_location(topics, **defaults)` (re)writes the topic config and points the landing and
    warehouse roots into the test's folder; `build_definitions()` then reads them. Returns the
    landing and warehouse roots. The warehouse is Iceberg, the default; the tests read its tables
    with `helpers.table_rows`."""

    def _configure(topics: dict, warehouse: str = "iceberg", **defaults) -> tuple[Path, Path]:
        monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", warehouse)
        path = tmp_path / "topics.yaml"
        path.write_text(topics_yaml(topics, **defaults))
        monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(path))
        monkeypatch.setenv("KAFKA_LANDING_ROOT", str(tmp_path / "landing"))
        monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(tmp_path / "warehouse"))
        return tmp_path / "landing", tmp_path / "warehouse"

    return _configure


@pytest.fixture
def one_attempt_in_step(monkeypatch):
    """Steps of this process try their hours once, not the suite's twice: for the tests of a service
    that is away, where each attempt waits for it. The bounded tries in the step have tests of their
    own (unit/test_hours.py)."""
    from kafka_landing import hours

    monkeypatch.setattr(hours, "IN_STEP_ATTEMPTS", 1)


@pytest.fixture
def instance():
    """An ephemeral Dagster instance of the test's own."""
    with DagsterInstance.ephemeral() as inst:
        yield inst


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "landing")


@pytest.fixture
def landing(tmp_path, store) -> LandingResource:
    return LandingResource(landing_root=str(store.root))


@pytest.fixture
def send(bootstrap):
    """Produce raw records: [(topic, partition, ts_ms, key, value)] -> Sent list (with offsets)."""

    def _send(records):
        return produce(bootstrap, [(t, p, ts, k, v, None, None, None, None) for t, p, ts, k, v in records])

    return _send


def defs_hours(req) -> list[str]:
    """The hours of a run request's partition range (any hourly definition lists the same keys)."""
    from dagster import HourlyPartitionsDefinition

    return HourlyPartitionsDefinition(start_date="2000-01-01-00:00", timezone="UTC").get_partition_keys_in_range(
        req.partition_key_range)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture(scope="session")
def pyspark_resource(stack):
    """One Spark session for the whole test session, as one run shares one: on the stack's warm
    Spark Connect server, the engine runs get by default. A process is either on Connect or
    classic (pyspark marks it), so the classic engine is tested in processes of its own
    (integration/test_spark_engines.py)."""
    from kafka_landing.resources import SparkResource
    from kafka_landing.spark_setup import spark_config

    res = SparkResource(remote=stack["spark"]["url"],
                        spark_config={**spark_config(), "spark.sql.shuffle.partitions": "4"})
    yield res
    if res._spark_session is not None:  # noqa: SLF001 - stop only what the tests started
        res._spark_session.stop()


@pytest.fixture(scope="session")
def spark(pyspark_resource):
    return pyspark_resource.spark_session
