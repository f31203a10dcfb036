"""Layer 2, `avro_landing/<topic>`: each hour's records as Avro files per table,
dead letters beside them, and one done file per (table, hour) written last."""

import uuid

from dagster import (
    AssetExecutionContext,
    AssetKey,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_landing.landing import LandingError, LandingResult, land_hour
from kafka_landing.kafka_slices.assets import slice_key
from kafka_landing.naming import asset_safe, dead_letter_dir, hour_from_key, hour_from_tag, table_hour_dir
from kafka_landing.partitions import hourly
from kafka_landing.planning import SlicePlan
from kafka_landing.resources import KafkaResource, LandingResource, SchemaRegistryResource
from kafka_landing.slices import read_slice as read_frozen_slice
from kafka_landing.topic_config import LandingConfig, TopicConfig

GROUP = "avro_landing"


def landing_key(topic: str) -> AssetKey:
    return AssetKey([GROUP, asset_safe(topic)])


def check_still_in_kafka(kafka: KafkaResource, plan: SlicePlan) -> None:
    """Offsets retention deleted since the slice was frozen are a clear error, not a short read."""
    with kafka.log_view() as log:
        for p in plan.partitions:
            if p.records == 0:
                continue
            log_start, _ = log.watermarks(plan.topic, p.partition)
            if p.start < log_start:
                raise Failure(
                    description=(
                        f"topic {plan.topic!r} partition {p.partition}: offsets [{p.start}, {min(log_start, p.end)}) "
                        f"of hour {plan.hour} were deleted by retention after the slice was frozen "
                        f"(the log now starts at {log_start}). The hour cannot be re-landed from Kafka."
                    )
                )


def schema_fetcher(registry: SchemaRegistryResource):
    """Writer schemas by id, each fetched once per run; None for an id the registry does not know."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client, cache = registry.client(), {}

    def fetch(schema_id: int):
        if schema_id not in cache:
            try:
                schema = client.get_schema(schema_id)
                cache[schema_id] = schema.schema_str if (schema.schema_type or "AVRO") == "AVRO" else None
            except SchemaRegistryError as exc:
                if exc.http_status_code != 404:
                    raise
                cache[schema_id] = None
        return cache[schema_id]

    return fetch


def landing_metadata(result: LandingResult, store, cfg: TopicConfig, plan: SlicePlan) -> dict:
    hour = hour_from_tag(plan.hour)
    schema_ids = sorted({s for d in result.done.values() for s in d.schema_ids})
    meta = {
        "dagster/row_count": result.rows,
        "records_read": result.records_read,
        "rows_by_table": MetadataValue.json({t: d.rows for t, d in sorted(result.done.items())}),
        "dead_letters": result.dead_letters.rows,
        "dead_letters_by_reason": MetadataValue.json(result.dead_letters.by_reason),
        "schema_ids": MetadataValue.json(schema_ids),
        "files_written": sum(len(d.files) for d in result.done.values()) + len(result.dead_letters.files),
        "bytes_written": result.bytes_written,
        "seconds": round(result.seconds, 2),
        "landing_paths": MetadataValue.json(
            {t: store.uri(table_hour_dir(cfg.dataset, t, hour)) for t in sorted(result.done)}
        ),
        "dead_letter_path": MetadataValue.path(store.uri(dead_letter_dir(plan.topic, hour))),
    }
    if result.warnings:
        meta["warnings"] = MetadataValue.json(result.warnings)
    return meta


def build_landing_asset(cfg: TopicConfig):
    @asset(
        key=landing_key(cfg.topic),
        deps=[slice_key(cfg.topic)],
        partitions_def=hourly,
        group_name=GROUP,
        kinds={"spark", "avro"},
        description=(
            f"Hourly Avro landing files of `{cfg.topic}` for {', '.join(f'{cfg.dataset}.{t}' for t in cfg.tables)}, "
            "with dead letters and a done file per table."
        ),
        tags={"kafka_landing/topic": asset_safe(cfg.topic)},
        op_tags={"kafka_landing/spark": "true"},
        metadata={"topic": cfg.topic, "dataset": cfg.dataset, "tables": ", ".join(cfg.tables)},
    )
    def _landing(
        context: AssetExecutionContext,
        kafka: KafkaResource,
        registry: SchemaRegistryResource,
        landing: LandingResource,
        pyspark: LazyPySparkResource,
    ):
        hour = hour_from_key(context.partition_key)
        store = landing.store()
        plan = read_frozen_slice(store, cfg.topic, hour)
        if plan is None:
            raise Failure(description=f"the slice of {cfg.topic} for {context.partition_key} is not frozen yet: "
                                      f"materialise {slice_key(cfg.topic).to_user_string()} for that hour first")
        check_still_in_kafka(kafka, plan)
        attempt = f"{context.run_id[:8]}-{uuid.uuid4().hex[:8]}"
        try:
            result = land_hour(lambda: pyspark.spark_session, store, schema_fetcher(registry),
                               kafka.spark_options(), cfg, plan, attempt)
        except LandingError as exc:
            raise Failure(description=str(exc)) from None
        for w in result.warnings:
            context.log.warning(w)
        context.log.info(
            f"{cfg.topic} {plan.hour}: read {result.records_read}, landed {result.rows}, "
            f"dead letters {result.dead_letters.rows} in {result.seconds:.1f}s"
        )
        return MaterializeResult(metadata=landing_metadata(result, store, cfg, plan))

    return _landing


def build_landing_assets(config: LandingConfig) -> list:
    return [build_landing_asset(cfg) for cfg in config.topics.values()]
