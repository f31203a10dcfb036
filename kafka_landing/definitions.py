"""The code location: every layer's assets, sensors, checks and schedules, and
the resources they share, assembled from the topic config."""

from __future__ import annotations

import os
import warnings
from datetime import datetime, timezone

# Dagster flags the parts of its API this project relies on as beta (single-run
# backfill policies) or preview (partitioned asset checks), once per asset, on
# every CLI command and in every run log. A user can do nothing about them; they
# would bury warnings that matter. Only those two categories are silenced, and
# before the asset modules below are imported.
# Matched by message, whichever module the warning is attributed to (Dagster points some at the
# caller's line, e.g. a partitioned AssetCheckSpec in avro_landing/checks.py).
warnings.filterwarnings("ignore", message=r".* is currently in (beta|preview)")

from dagster import (  # noqa: E402 - after the filter above
    AssetSelection,
    Definitions,
    EnvVar,
    RunRequest,
    ScheduleEvaluationContext,
    define_asset_job,
    schedule,
)
from dagster_gcp import BigQueryResource
from dagster_pyspark import LazyPySparkResource

from kafka_landing import devstack, hourly_schedule
from kafka_landing.avro_landing.assets import build_landing_assets
from kafka_landing.config import LandingConfig, load_config
from kafka_landing.kafka_slices.assets import build_slice_assets
from kafka_landing.kafka_slices.jobs import plan_backfill
from kafka_landing.naming import hour_key
from kafka_landing.resources import (
    KafkaResource,
    LandingResource,
    SchemaRegistryResource,
)
from kafka_landing.spark_setup import spark_config
from kafka_landing.warehouse.assets import build_warehouse_assets, warehouse_key
from kafka_landing.warehouse.checks import build_warehouse_checks
from kafka_landing.warehouse.resources import (
    BigQueryWarehouseResource,
    ParquetWarehouseResource,
    WarehouseResource,
)
from kafka_landing.warehouse.sensors import build_done_file_sensor

LOCAL = devstack.ROOT / ".local"


def _secret(name: str):
    """An EnvVar when the variable is set, else None: secrets never sit in code or config."""
    return EnvVar(name) if os.environ.get(name) else None


WAREHOUSES = ("parquet", "bigquery")


def warehouse_kind() -> str:
    kind = os.environ.get("KAFKA_LANDING_WAREHOUSE", "parquet")
    if kind not in WAREHOUSES:
        raise ValueError(f"KAFKA_LANDING_WAREHOUSE={kind!r}: choose one of {', '.join(WAREHOUSES)}")
    return kind


def build_warehouse() -> WarehouseResource:
    """Parquet by default; BigQuery with KAFKA_LANDING_WAREHOUSE=bigquery (and a gs:// landing root)."""
    if warehouse_kind() == "parquet":
        return ParquetWarehouseResource(root=os.environ.get("KAFKA_LANDING_WAREHOUSE_ROOT", str(LOCAL / "warehouse")))
    project = os.environ.get("KAFKA_LANDING_BIGQUERY_PROJECT")
    if not project:
        raise ValueError("KAFKA_LANDING_WAREHOUSE=bigquery needs KAFKA_LANDING_BIGQUERY_PROJECT, the project that "
                         "runs the load jobs and holds the datasets")
    return BigQueryWarehouseResource(bigquery=BigQueryResource(
        project=project,
        location=os.environ.get("KAFKA_LANDING_BIGQUERY_LOCATION"),
        gcp_credentials=_secret("KAFKA_LANDING_GCP_CREDENTIALS"),
    ))


def build_resources() -> dict:
    return {
        "kafka": KafkaResource(
            bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", devstack.BOOTSTRAP),
            security_protocol=os.environ.get("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_mechanism=os.environ.get("KAFKA_SASL_MECHANISM"),
            sasl_username=_secret("KAFKA_SASL_USERNAME"),
            sasl_password=_secret("KAFKA_SASL_PASSWORD"),
            ssl_ca_location=os.environ.get("KAFKA_SSL_CA_LOCATION"),
        ),
        "registry": SchemaRegistryResource(
            url=os.environ.get("SCHEMA_REGISTRY_URL", devstack.REGISTRY_URL),
            basic_auth_user_info=_secret("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"),
        ),
        "landing": LandingResource(
            landing_root=os.environ.get("KAFKA_LANDING_ROOT", str(LOCAL / "landing")),
            topics_config=os.environ.get("KAFKA_LANDING_TOPICS_CONFIG"),
            gcp_credentials=_secret("KAFKA_LANDING_GCP_CREDENTIALS"),
        ),
        "warehouse": build_warehouse(),
        # Created on first use and shared by every hour of a run.
        "pyspark": LazyPySparkResource(spark_config=spark_config()),
    }


land_hourly = define_asset_job(
    "land_hourly",
    selection=AssetSelection.groups("kafka_slices", "avro_landing"),
    tags={"kafka_landing/spark": "true"},
    description="Freeze and land one hour (or, from a backfill, a range of hours in one run).",
)


def build_schedule(config: LandingConfig):
    """Every hour, a few minutes after the slowest topic's hour closes, land the latest
    hour closed for every topic (any grace, even hours long; see `hourly_schedule`)."""
    graces = [t.grace_minutes for t in config.topics.values()]

    @schedule(job=land_hourly, cron_schedule=hourly_schedule.cron(graces), execution_timezone="UTC")
    def land_last_closed_hour(context: ScheduleEvaluationContext):
        tick = context.scheduled_execution_time or datetime.now(timezone.utc)
        hour = hourly_schedule.hour_to_land(tick, graces)
        return RunRequest(partition_key=hour_key(hour), run_key=hour_key(hour))

    return land_last_closed_hour


def build_definitions() -> Definitions:
    config = load_config()
    tables = {(ds, t): warehouse_key(ds, t) for ds, t, _ in config.destinations()}
    return Definitions(
        assets=[*build_slice_assets(config), *build_landing_assets(config), *build_warehouse_assets(config, warehouse_kind()),
                *build_warehouse_checks(config)],
        jobs=[land_hourly, plan_backfill],
        schedules=[build_schedule(config)],
        sensors=[build_done_file_sensor(tables)],
        resources=build_resources(),
    )


defs = build_definitions()
