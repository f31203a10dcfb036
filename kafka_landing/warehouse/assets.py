"""Layer 3, `warehouse/<dataset>/<table>`: each hour's partition of a table,
replaced atomically from the files its done file lists."""

from datetime import timedelta

from dagster import (
    AssetCheckResult,
    FreshnessPolicy,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    Failure,
    MetadataValue,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_landing.avro_landing.assets import landing_key
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import done_file_path, hour_from_key, hour_tag
from kafka_landing.parquet_warehouse import IncompatibleSchemaError, LoadError, ParquetWarehouse
from kafka_landing.partitions import hourly, run_hours, single_run
from kafka_landing.resources import LandingResource
from kafka_landing.topic_config import LandingConfig, TopicConfig

GROUP = "warehouse"


def warehouse_key(dataset: str, table: str) -> AssetKey:
    return AssetKey([GROUP, dataset, table])


def build_warehouse_asset(cfg: TopicConfig, table: str):
    key = warehouse_key(cfg.dataset, table)

    @asset(
        key=key,
        deps=[landing_key(cfg.topic)],
        partitions_def=hourly,
        backfill_policy=single_run,
        # One load of a table at a time (a pool with limit 1, see dagster.yaml);
        # a second one would give the same result, only later.
        pool=f"warehouse_{cfg.dataset}_{table}",
        group_name=GROUP,
        kinds={"parquet", "spark"},
        description=f"Table `{cfg.dataset}.{table}`, one partition per landing hour, loaded from `{cfg.topic}`.",
        check_specs=[AssetCheckSpec("conservation", asset=key, description="Warehouse rows = landed rows of the hour.")],
        op_tags={"kafka_landing/spark": "true"},
        # Hours behind: warn when the table has not been loaded for 2 hours, fail at 3.
        freshness_policy=FreshnessPolicy.time_window(fail_window=timedelta(hours=3), warn_window=timedelta(hours=2)),
        metadata={"dataset": cfg.dataset, "table": table, "topic": cfg.topic},
    )
    def _table(context: AssetExecutionContext, landing: LandingResource, warehouse: ParquetWarehouse,
               pyspark: LazyPySparkResource):
        store = landing.store()

        def one_hour(partition_key: str):
            hour = hour_from_key(partition_key)
            raw = store.read_json(done_file_path(cfg.dataset, table, hour))
            if raw is None:
                raise Failure(description=f"no done file for {cfg.dataset}.{table} {hour_tag(hour)}: "
                                          f"land {landing_key(cfg.topic).to_user_string()} for that hour first")
            done = DoneFile.from_dict(raw)
            spark = pyspark.spark_session
            try:
                result = warehouse.load_hour(spark, store, done)
            except (LoadError, IncompatibleSchemaError) as exc:
                raise Failure(description=f"{exc}. Nothing was loaded; the landing files are untouched.") from None
            if result.added_columns:
                context.log.warning(f"{cfg.dataset}.{table}: added nullable column(s) {list(result.added_columns)}")
            rows_now = warehouse.rows(spark, cfg.dataset, table, done.hour) or 0
            metadata = {
                "dagster/row_count": result.rows,
                "landed_rows": done.rows,
                "files_loaded": result.files,
                "schema_ids": MetadataValue.json(list(result.schema_ids)),
                "added_columns": MetadataValue.json(list(result.added_columns)),
                "done_file_attempt": done.attempt,
                "path": MetadataValue.path(result.path),
            }
            check = AssetCheckResult(
                check_name="conservation", passed=rows_now == done.rows,
                metadata={"warehouse_rows": rows_now, "landed_rows": done.rows},
            )
            return metadata, [check]

        return run_hours(context, key, one_hour)

    return _table


def build_warehouse_assets(config: LandingConfig) -> list:
    return [build_warehouse_asset(cfg, table) for cfg in config.topics.values() for table in cfg.tables]
