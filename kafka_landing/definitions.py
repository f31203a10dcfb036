"""The code location: every layer's assets, sensors, checks and schedules, and
the resources they share, assembled from the topic config."""

from __future__ import annotations

import os
import warnings
from datetime import datetime, timezone
from urllib.parse import urlsplit

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
    DagsterInstance,
    Definitions,
    EnvVar,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    define_asset_job,
    in_process_executor,
    schedule,
)

from kafka_landing import defaults, hourly_schedule
from kafka_landing.avro_landing.assets import LandingSource, build_landing_assets, landing_key
from kafka_landing.config import (
    LandingConfig,
    TopicConfig,
    TopicConfigError,
    env_first_hour,
    load_config,
    with_first_hours,
)
from kafka_landing.hours import REDO_DONE_HOURS_TAG, SPARK_TAG, topic_hours
from kafka_landing.kafka_slices.assets import build_slice_assets, slice_key
from kafka_landing.kafka_slices.freeze import settle_first_hours
from kafka_landing.kafka_slices.jobs import plan_backfill
from kafka_landing.kafka_slices.resources import KafkaResource
from kafka_landing.naming import Hour, asset_safe
from kafka_landing.resources import (
    LandingResource,
    SchemaRegistryResource,
    SparkResource,
)
from kafka_landing.spark_setup import spark_config
from kafka_landing.warehouse.assets import build_warehouse_assets, event_key, event_partitions, warehouse_key
from kafka_landing.warehouse.checks import build_warehouse_checks
from kafka_landing.warehouse.jobs import iceberg_upkeep, iceberg_upkeep_daily, retire_hours
from kafka_landing.warehouse.resources import (
    BigQueryWarehouseResource,
    IcebergWarehouseResource,
    WarehouseResource,
    parse_properties,
)
from kafka_landing.warehouse.sensors import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    build_done_file_sensor,
    build_event_sensor,
    build_retired_hours_sensor,
    build_settled_sensor,
)

LOCAL = defaults.LOCAL


def _secret(name: str):
    """An EnvVar when the variable is set, else None: secrets never sit in code or config."""
    return EnvVar(name) if os.environ.get(name) else None


SPARK_MODES = ("connect", "classic")


def _spark_remote():
    """Where runs get their Spark: $SPARK_REMOTE's Connect server (as an EnvVar: its URL may carry a
    token), else the local stack's warm server; None under KAFKA_LANDING_SPARK=classic, for a
    classic session each run starts."""
    mode = os.environ.get("KAFKA_LANDING_SPARK", "connect")
    if mode not in SPARK_MODES:
        raise ValueError(f"KAFKA_LANDING_SPARK={mode!r}: say connect (a Spark Connect server: $SPARK_REMOTE, "
                         f"else the local stack's at {defaults.SPARK_CONNECT_URL}) or classic (Spark inside each run)")
    if mode == "classic":
        return None
    return EnvVar("SPARK_REMOTE") if os.environ.get("SPARK_REMOTE") else defaults.SPARK_CONNECT_URL


def _registry_url():
    """A URL carrying `user:password@` is a secret: the UI then shows only the variable's name
    (better still, put the credentials in SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO)."""
    url = os.environ.get("SCHEMA_REGISTRY_URL", defaults.REGISTRY_URL)
    return EnvVar("SCHEMA_REGISTRY_URL") if urlsplit(url).password is not None else url


WAREHOUSES = ("iceberg", "bigquery")
# The Parquet folders of earlier releases: gone, with the way out named.
PARQUET_GONE = ("KAFKA_LANDING_WAREHOUSE=parquet: the Parquet warehouse is gone; Iceberg is the embedded warehouse. "
                "Unset KAFKA_LANDING_WAREHOUSE (or set it to iceberg), point KAFKA_LANDING_WAREHOUSE_ROOT at a new "
                "folder (the Parquet tables' folder holds load records Iceberg would take for its own), and run "
                "`python -m kafka_landing reload` once: it loads every landed hour into Iceberg from the landing "
                "files. The Parquet folders are not read; remove them after")


def warehouse_kind() -> str:
    kind = os.environ.get("KAFKA_LANDING_WAREHOUSE", "iceberg")
    if kind == "parquet":
        raise ValueError(PARQUET_GONE)
    if kind not in WAREHOUSES:
        raise ValueError(f"KAFKA_LANDING_WAREHOUSE={kind!r}: choose one of {', '.join(WAREHOUSES)}")
    return kind


def build_warehouse() -> WarehouseResource:
    """Iceberg by default; BigQuery with KAFKA_LANDING_WAREHOUSE=bigquery (and a gs:// landing root)."""
    root = os.environ.get("KAFKA_LANDING_WAREHOUSE_ROOT", str(LOCAL / "warehouse"))
    if warehouse_kind() == "iceberg":
        if root.startswith("gs://") and not os.environ.get("KAFKA_LANDING_ICEBERG_CATALOG_URI"):
            raise ValueError(f"KAFKA_LANDING_WAREHOUSE_ROOT={root} is a bucket, which cannot hold the Iceberg "
                             "catalog's SQLite file: set KAFKA_LANDING_ICEBERG_CATALOG_URI to its database "
                             "(PostgreSQL in production, e.g. postgresql+psycopg2://user:password@host/db; or a local "
                             "sqlite:////path/catalog.db), or to a REST catalog's https:// URL")
        return IcebergWarehouseResource(
            root=root, catalog_uri=_secret("KAFKA_LANDING_ICEBERG_CATALOG_URI"),
            catalog_warehouse=os.environ.get("KAFKA_LANDING_ICEBERG_WAREHOUSE") or None,
            catalog_credential=_secret("KAFKA_LANDING_ICEBERG_CREDENTIAL"),
            catalog_token=_secret("KAFKA_LANDING_ICEBERG_TOKEN"),
            catalog_auth=os.environ.get("KAFKA_LANDING_ICEBERG_AUTH") or None,
            catalog_properties=parse_properties(os.environ.get("KAFKA_LANDING_ICEBERG_PROPERTIES")))
    project = os.environ.get("KAFKA_LANDING_BIGQUERY_PROJECT")
    if not project:
        raise ValueError("KAFKA_LANDING_WAREHOUSE=bigquery needs KAFKA_LANDING_BIGQUERY_PROJECT, the project that "
                         "runs the load jobs and holds the datasets")
    return BigQueryWarehouseResource(
        project=project,
        location=os.environ.get("KAFKA_LANDING_BIGQUERY_LOCATION"),
        gcp_credentials=_secret("KAFKA_LANDING_GCP_CREDENTIALS"),
    )


def build_resources() -> dict:
    return {
        "kafka": KafkaResource(
            bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", defaults.BOOTSTRAP),
            security_protocol=os.environ.get("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_mechanism=os.environ.get("KAFKA_SASL_MECHANISM"),
            sasl_username=_secret("KAFKA_SASL_USERNAME"),
            sasl_password=_secret("KAFKA_SASL_PASSWORD"),
            ssl_ca_location=os.environ.get("KAFKA_SSL_CA_LOCATION"),
        ),
        "registry": SchemaRegistryResource(
            url=_registry_url(),
            basic_auth_user_info=_secret("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"),
        ),
        "landing": LandingResource(
            landing_root=os.environ.get("KAFKA_LANDING_ROOT", str(LOCAL / "landing")),
            topics_config=os.environ.get("KAFKA_LANDING_TOPICS_CONFIG"),
            gcp_credentials=_secret("KAFKA_LANDING_GCP_CREDENTIALS"),
        ),
        "warehouse": build_warehouse(),
        # Opened on first use and shared by every hour of a run.
        "pyspark": SparkResource(remote=_spark_remote(), spark_config=spark_config()),
    }


def ready_resources(*names: str, resources: dict | None = None) -> tuple:
    """Resources for use outside a run (the CLI, the code location itself), as a run sees them:
    their EnvVar fields (SASL, GCP keys) hold the values, not the variables' names. Not through
    Dagster's build_resources: it opens an in-memory Dagster instance (SQLite and its migrations,
    about half a second), and every process that loads the code location, each run's included,
    would pay it for one listing of the landing root."""
    resources = resources if resources is not None else build_resources()
    return tuple(_with_values(resources[n]) for n in names)


def _with_values(resource):
    """A copy of the resource whose EnvVar fields hold their variables' values; a variable unset
    since the resource was built is an error that names it."""
    values = {}
    for name in type(resource).model_fields:
        value = getattr(resource, name)
        if isinstance(value, EnvVar):
            if os.environ.get(value.env_var_name) is None:
                raise ValueError(f"{type(resource).__name__}.{name} comes from ${value.env_var_name}, which is not "
                                 "set in this process: set it (as for the runs), or unset what asked for it")
            value = value.get_value()
        values[name] = value
    return type(resource)(**values)


def first_hours_from(landing: LandingResource, config: LandingConfig) -> LandingConfig:
    """`freeze.settle_first_hours` on the landing root. If the root cannot be listed, configured
    first hours are used as they are; a topic that has none fails the code location, naming
    the landing root and why."""
    try:
        (ready,) = ready_resources("landing", resources={"landing": landing})
        return settle_first_hours(ready.store(), config)
    except TopicConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any store failure; reported in the message below
        fallback = env_first_hour()
        unsettled = sorted(n for n, t in config.topics.items() if t.first_hour is None and fallback is None)
        if unsettled:
            raise TopicConfigError(
                f"{config.source}: topics {unsettled} have no first_hour and the landing root {landing.landing_root} "
                f"cannot be listed for their earliest frozen slice ({type(exc).__name__}: {exc}). Set first_hour for "
                "them, or check that the landing root is reachable.") from exc
        return with_first_hours(config, {}, fallback)


def landing_job_name(topic: str) -> str:
    return f"land_{asset_safe(topic)}"


def build_landing_job(cfg: TopicConfig):
    """A job per topic, to land one topic's hours on their own (the hourly schedules run a group's
    job, `build_hourly_job`)."""
    return define_asset_job(
        landing_job_name(cfg.topic),
        selection=AssetSelection.assets(slice_key(cfg.topic), landing_key(cfg.topic)),
        partitions_def=topic_hours(cfg),
        tags={SPARK_TAG: "true"},
        description=f"Freeze and land `{cfg.topic}`: one hour, or from a backfill a range of hours in one run.",
    )


def replay_job_name(topic: str) -> str:
    return f"replay_{asset_safe(topic)}"


def build_replay_job(cfg: TopicConfig):
    """A job per topic to land hours again with today's config, from Kafka where it still holds their
    offsets and from their archive (landing files and dead letters) where it does not: after a
    routing or event-time change, or to re-drive dead letters whose schema is registered now. The
    launchpad's `source: archive` reads only the archive. Its slices are never frozen again."""
    key = landing_key(cfg.topic)
    return define_asset_job(
        replay_job_name(cfg.topic),
        selection=AssetSelection.assets(key),
        partitions_def=topic_hours(cfg),
        config={"ops": {key.to_python_identifier(): {"config": {"source": LandingSource.auto.name}}}},
        tags={SPARK_TAG: "true", REDO_DONE_HOURS_TAG: "true"},  # a replay lands landed hours again
        description=(f"Land `{cfg.topic}`'s hours again under today's config: from Kafka where it still holds them, "
                     "else from their archive (landed files and dead letters). Backfill a range to replay it."),
    )


def replay_hours(topic: str, first: Hour, last: Hour, source: str, instance: DagsterInstance | None = None):
    """The topic's replay job over [first, last] in this process, on `instance` (by default that of
    $DAGSTER_HOME: the UI shows its run as a backfill's), as the command line's `replay` and the
    benchmark run it. Its result, failed or not."""
    op = landing_key(topic).to_python_identifier()
    return build_definitions().resolve_job_def(replay_job_name(topic)).execute_in_process(
        instance=instance or DagsterInstance.get(), raise_on_error=False,
        tags={RANGE_START_TAG: first.key, RANGE_END_TAG: last.key, REDO_DONE_HOURS_TAG: "true"},
        run_config={"ops": {op: {"config": {"source": LandingSource(source).name}}}})


def hourly_job_name(first_hour: datetime, grace_minutes: int) -> str:
    return f"land_topics_from_{first_hour:%Y%m%dT%H}_grace_{grace_minutes}m"


def hourly_groups(config: LandingConfig) -> dict[str, list[TopicConfig]]:
    """{job name: topics} of the topics that land together, one run per hour for all of them: the
    same hours (one run covers one partitions definition, and a topic's starts at its first hour)
    and the same grace (the same tick lands the same hour). Topics that start together share both."""
    groups: dict[str, list[TopicConfig]] = {}
    for cfg in sorted(config.topics.values(), key=lambda c: c.topic):
        groups.setdefault(hourly_job_name(topic_hours(cfg).start, cfg.grace_minutes), []).append(cfg)
    return groups


def build_hourly_job(name: str, cfgs: list[TopicConfig]):
    """One run for every topic of a group: each topic's freeze -> land steps, one Spark session.
    A topic whose step fails fails alone: the other topics' steps still run (the run then ends
    failed, naming the failed steps; re-executing it from failure runs only those)."""
    topics = [c.topic for c in cfgs]
    return define_asset_job(
        name,
        selection=AssetSelection.assets(*[k for t in topics for k in (slice_key(t), landing_key(t))]),
        partitions_def=topic_hours(cfgs[0]),
        tags={SPARK_TAG: "true"},
        description=(f"Freeze and land {len(topics)} topic(s) in one run, an hour or a backfill's range: "
                     f"{', '.join(f'`{t}`' for t in topics)} (hours from {Hour(topic_hours(cfgs[0]).start).key}, "
                     f"grace {cfgs[0].grace_minutes} min). A topic that fails fails alone."),
    )


def build_schedule(cfgs: list[TopicConfig], job):
    """Every hour, a few minutes after the group's hour closes, land that hour of every topic of the
    group in one run (any grace, even hours long; see `hourly_schedule`)."""
    first, grace = Hour(topic_hours(cfgs[0]).start), cfgs[0].grace_minutes
    topics = ", ".join(c.topic for c in cfgs)

    @schedule(name=f"{job.name}_hourly", job=job, cron_schedule=hourly_schedule.cron(grace),
              execution_timezone="UTC", description=f"Lands the last closed hour of {topics} every hour, in one run.")
    def land_last_closed_hour(context: ScheduleEvaluationContext):
        tick = context.scheduled_execution_time or datetime.now(timezone.utc)
        hour = hourly_schedule.hour_to_land(tick, grace)
        if hour < first:
            return SkipReason(f"{topics}: hour {hour.key} is before the topics' first hour {first.key}")
        return RunRequest(partition_key=hour.key, run_key=hour.key)

    return land_last_closed_hour


def build_definitions(config: LandingConfig | None = None, resources: dict | None = None) -> Definitions:
    """The code location of a topic config with these resources; by default both come from the
    environment, as `dagster dev` loads it (tests and tools pass their own)."""
    resources = resources if resources is not None else build_resources()
    config = first_hours_from(resources["landing"], config if config is not None else load_config())
    kind = resources["warehouse"].backend_kind
    tables = {(ds, t): warehouse_key(ds, t) for ds, t, _ in config.destinations()}
    hours = {(ds, t): topic_hours(config.topic(topic)) for ds, t, topic in config.destinations()}
    events = {(ds, t): event_key(ds, t) for ds, t, topic in config.destinations() if config.topic(topic).event_granularity}
    settle_hours = {(ds, t): config.topic(topic).settle_hours for ds, t, topic in config.destinations()
                    if (ds, t) in events}
    event_parts = {k: event_partitions(*k) for k in events}
    jobs = {name: build_landing_job(cfg) for name, cfg in config.topics.items()}
    replays = [build_replay_job(cfg) for cfg in config.topics.values()]
    groups = hourly_groups(config)
    hourly = {name: build_hourly_job(name, cfgs) for name, cfgs in groups.items()}
    return Definitions(
        assets=[*build_slice_assets(config), *build_landing_assets(config), *build_warehouse_assets(config, kind),
                *build_warehouse_checks(config)],
        jobs=[*jobs.values(), *replays, *hourly.values(), plan_backfill, retire_hours, *([iceberg_upkeep] if kind == "iceberg" else [])],
        schedules=[*(build_schedule(cfgs, hourly[name]) for name, cfgs in groups.items()),
                   *([iceberg_upkeep_daily] if kind == "iceberg" else [])],
        sensors=[build_done_file_sensor(tables, hours), build_retired_hours_sensor(tables, events),
                 *([build_event_sensor(events, event_parts), build_settled_sensor(events, settle_hours, event_parts)]
                   if events else [])],
        resources=resources,
        # A run's steps (freeze -> land -> checks, or load -> checks) follow one another: in the run's
        # own process they share one import of this code location and one Spark session, instead
        # of a fresh Python process per step (about 4 s each) that each open a session.
        executor=in_process_executor,
    )


defs = build_definitions()
