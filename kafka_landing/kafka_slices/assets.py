"""Layer 1, `kafka_slices/<topic>`: each hour's frozen offset ranges.

Materialising hour H plans the slice once and stores its manifest under the
landing root; every later materialisation returns the same manifest, so a
re-landed hour reads the same offsets forever.
"""


from datetime import datetime, timezone

from dagster import (
    AssetExecutionContext,
    AssetKey,
    Config,
    Failure,
    MetadataValue,
    RetryPolicy,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.hours import failure, history, run_hours, single_run, topic_hours
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.kafka_slices.kafka_log import KafkaUnavailable
from kafka_landing.kafka_slices.plan import PlanningError, SlicePlan
from kafka_landing.kafka_slices.resources import KafkaResource
from kafka_landing.naming import Hour, asset_safe, slice_manifest_path
from kafka_landing.resources import LandingResource

GROUP = "kafka_slices"

_SLICE_TABLE = TableSchema(
    columns=[
        TableColumn("partition", "int"),
        TableColumn("start_offset", "int"),
        TableColumn("end_offset", "int", description="exclusive"),
        TableColumn("records", "int"),
        TableColumn("log_end_at_planning", "int"),
        TableColumn("start_from", "string"),
        TableColumn("end_from", "string"),
    ]
)


def slice_key(topic: str) -> AssetKey:
    return AssetKey([GROUP, asset_safe(topic)])


class SliceConfig(Config):
    skip_retention_gaps: bool = False
    """Land what is left of an hour whose first offsets retention deleted, recording the loss."""


def slice_metadata(plan: SlicePlan, manifest_location: str, frozen_now: bool) -> dict:
    rows = [
        TableRecord(
            {"partition": p.partition, "start_offset": p.start, "end_offset": p.end, "records": p.records,
             "log_end_at_planning": p.log_end, "start_from": p.start_from, "end_from": p.end_from}
        )
        for p in plan.partitions
    ]
    meta = {
        "partitions": MetadataValue.table(rows, schema=_SLICE_TABLE),
        "records": plan.records,
        "dagster/row_count": plan.records,
        "spark_tasks": len(plan.tasks),
        "planned_at": plan.planned_at,
        "frozen_by_this_run": frozen_now,
        "manifest": MetadataValue.path(manifest_location),
    }
    if plan.skipped:
        meta["skipped_offsets"] = MetadataValue.json(list(plan.skipped))
    if plan.future_records:  # landed where they sit, by the topic's on_future_timestamp policy
        meta["future_records"] = MetadataValue.json(list(plan.future_records))
    return meta


def build_slice_asset(cfg: TopicConfig, retry_policy: RetryPolicy | None = None):
    @asset(
        key=slice_key(cfg.topic),
        retry_policy=retry_policy,  # with one, only Failures with allow_retries (brokers briefly away) retry
        partitions_def=topic_hours(cfg),
        backfill_policy=single_run,
        group_name=GROUP,
        kinds={"kafka"},
        description=f"Frozen hourly offset ranges of Kafka topic `{cfg.topic}`, {history(cfg)}.",
        tags={"kafka_landing/topic": asset_safe(cfg.topic)},
        metadata={"topic": cfg.topic, "first_hour": history(cfg),
                  "grace_minutes": cfg.grace_minutes, "rows_per_task": cfg.rows_per_task},
    )
    def _slice(context: AssetExecutionContext, config: SliceConfig, kafka: KafkaResource, landing: LandingResource):
        store = landing.store()

        def all_hours(keys: list[str]) -> dict:
            out: dict = {}
            with kafka.log_view() as log:  # one consumer for every hour of the run
                for key in keys:
                    away = next((f for f in out.values() if isinstance(f, Failure) and f.allow_retries), None)
                    if away is not None:  # brokers away: the other hours would wait just as long for nothing
                        out[key] = away
                        continue
                    try:
                        plan, frozen_now = freeze_slice(store, log, cfg, Hour.from_key(key), datetime.now(timezone.utc),
                                                        skip_retention_gaps=config.skip_retention_gaps)
                    except (PlanningError, KafkaUnavailable) as exc:
                        # Brokers briefly away: retriable; a planning error stays wrong (errors.is_transient).
                        out[key] = failure(exc)
                        continue
                    context.log.info(
                        f"{cfg.topic} {plan.hour}: {plan.records} records in {len(plan.partitions)} partitions "
                        f"({'frozen now' if frozen_now else 'already frozen'})"
                    )
                    out[key] = (slice_metadata(plan, store.location(slice_manifest_path(cfg.topic, plan.hour)),
                                               frozen_now), [])
            return out

        return run_hours(context, slice_key(cfg.topic), all_hours=all_hours)

    return _slice


def build_slice_assets(config: LandingConfig) -> list:
    return [build_slice_asset(cfg) for cfg in config.topics.values()]
