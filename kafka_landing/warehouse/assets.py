"""Layer 3, `warehouse/<dataset>/<table>`: each hour's partition of a table,
replaced atomically from the files its done file lists, by the configured
backend (Parquet or BigQuery, see `load.py`). The checks are in checks.py.

A run loads one hour or a range of them (the done-file sensor asks for a table's
consecutive ready hours in one run) through `run_hours`, with one
SparkResource: the Parquet backend asks it for the session at its first
hour and every later hour of the run gets the same one, so a run opens a Spark
session at most once; the BigQuery backend never asks, so its runs start no JVM (and the
sensor gives them no `kafka_landing/spark` tag, so they take no Spark slot).

The freshness policy stays time-based (warn 2 h, fail 3 h without a load):
Dagster 1.13's `FreshnessPolicy` can only be a time window or a cron deadline
on the last materialisation, not on a count of partitions, and it is the only
signal that needs no run: when loads stop altogether nothing re-runs
`hours_behind`, but the policy goes red by itself.
"""

from datetime import timedelta

from dagster import (
    AssetExecutionContext,
    AssetKey,
    FreshnessPolicy,
    MetadataValue,
    asset,
)

from kafka_landing.avro_landing.assets import landing_key
from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.errors import is_transient
from kafka_landing.hours import SPARK_TAG, failure, history, run_hours, single_run, topic_hours
from kafka_landing.naming import done_file_path, hour_from_key, hour_tag
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.warehouse.load import (
    DoneFileMismatch,
    IncompatibleSchemaError,
    LoadError,
    load_done_file,
)
from kafka_landing.warehouse.resources import WarehouseResource

GROUP = "warehouse"


def warehouse_key(dataset: str, table: str) -> AssetKey:
    return AssetKey([GROUP, dataset, table])


def build_warehouse_asset(cfg: TopicConfig, table: str, kind: str = "parquet"):
    key = warehouse_key(cfg.dataset, table)

    @asset(
        key=key,
        deps=[landing_key(cfg.topic)],
        partitions_def=topic_hours(cfg),  # the topic's hours: a table shares its topic's history
        backfill_policy=single_run,
        # No Dagster pool: a run killed while loading would keep its slot, and every later
        # load of the table would wait for it forever. The warehouse's own lock serialises
        # loads of a table instead, and dies with the process that holds it.
        group_name=GROUP,
        kinds={"parquet", "spark"} if kind == "parquet" else {kind},
        description=f"Table `{cfg.dataset}.{table}`, loaded by landing hour from `{cfg.topic}`; {history(cfg)}.",
        op_tags={SPARK_TAG: "true"} if kind == "parquet" else {},
        # Time-based (see the module docstring): warn after 2 hours without a load, fail at 3.
        freshness_policy=FreshnessPolicy.time_window(fail_window=timedelta(hours=3), warn_window=timedelta(hours=2)),
        metadata={"dataset": cfg.dataset, "table": table, "topic": cfg.topic},
    )
    def _table(context: AssetExecutionContext, landing: LandingResource, warehouse: WarehouseResource,
               pyspark: SparkResource):
        store = landing.store()
        backend = warehouse.backend(store)
        try:  # once per run, before any hour: a warehouse that cannot be written fails fast, naming it
            backend.check_writable()
        except Exception as exc:  # noqa: BLE001 - each backend names its own service and what to check
            raise failure(LoadError(f"{cfg.dataset}.{table}: the {backend.kind} warehouse cannot be written: {exc}. "
                                    "Nothing was loaded; the landing files are untouched.",
                                    transient=is_transient(exc))) from None

        def one_hour(partition_key: str):
            rel = done_file_path(cfg.dataset, table, hour_from_key(partition_key))
            if not store.exists(rel):
                raise failure(LoadError(f"no done file for {cfg.dataset}.{table} "
                                        f"{hour_tag(hour_from_key(partition_key))} ({rel}): land "
                                        f"{landing_key(cfg.topic).to_user_string()} for that hour first"))
            try:  # the factory, not a session: only a backend that needs Spark starts it, once per run
                result = load_done_file(backend, store, rel, lambda: pyspark.spark_session)
            except DoneFileMismatch as exc:
                raise failure(exc) from None
            except (LoadError, IncompatibleSchemaError) as exc:  # a load that fails changes nothing
                if "Nothing was loaded" in str(exc):  # the backend said so, with what to do next
                    raise failure(exc) from None
                raise failure(type(exc)(f"{exc}. Nothing was loaded; the landing files are untouched.",
                                        transient=exc.transient)) from None
            if result.added_columns:
                context.log.warning(f"{cfg.dataset}.{table}: added nullable column(s) {list(result.added_columns)}")
            for warning in result.warnings:
                context.log.warning(warning)
            metadata = {
                "dagster/row_count": result.rows,
                "files_loaded": result.files,
                "schema_ids": MetadataValue.json(list(result.schema_ids)),
                "added_columns": MetadataValue.json(list(result.added_columns)),
                "done_file": result.done_file,
                "done_sha256": result.done_sha256,
                "location": MetadataValue.path(result.location),
                **({"job_id": result.job_id} if result.job_id else {}),
                **({"warnings": MetadataValue.json(list(result.warnings))} if result.warnings else {}),
            }
            return metadata, []

        return run_hours(context, key, one_hour)

    return _table


def build_warehouse_assets(config: LandingConfig, kind: str = "parquet") -> list:
    """Each table's asset (its checks are in checks.py)."""
    return [build_warehouse_asset(cfg, table, kind) for cfg in config.topics.values() for table in cfg.tables]
