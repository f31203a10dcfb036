"""The `plan_backfill` job: the dry-run plan of a range of hours, launched from the UI.

Why an op and not an asset: it freezes nothing and materializes nothing; it records what a
backfill would read as an observation of the topic's kafka_slices asset, so the plan sits
next to the slices it previews.
"""

# No `from __future__ import annotations`: Dagster reads the op's annotations at decoration time.

from datetime import datetime, timezone

from dagster import (
    AssetObservation,
    Config,
    MetadataValue,
    OpExecutionContext,
    job,
    op,
)

from kafka_landing.config import TopicConfigError
from kafka_landing.hours import failure
from kafka_landing.kafka_slices.assets import slice_key
from kafka_landing.kafka_slices.dry_run import (
    FROZEN,
    PLANNED,
    TopicHistory,
    dry_run,
    format_markdown,
    format_table,
    hours_between,
)
from kafka_landing.kafka_slices.resources import KafkaResource
from kafka_landing.naming import Hour
from kafka_landing.resources import LandingResource


class PlanConfig(Config):
    topic: str
    from_hour: str  # an hourly partition key, 2026-11-20-10:00 (UTC)
    to_hour: str  # included
    skip_retention_gaps: bool = False


# Resources by key, not by type: the plan also shows which hours the warehouse loaded, but the
# slices layer does not import the warehouse's layer (the flow runs the other way), and Dagster
# takes an op's resources either all by key or all by type.
@op(description="Dry-run plan of a backfill: per hour and partition, the offsets landing would read. Writes nothing.",
    required_resource_keys={"kafka", "landing", "warehouse"})
def plan_backfill_op(context: OpExecutionContext, config: PlanConfig) -> None:
    kafka: KafkaResource = context.resources.kafka
    landing: LandingResource = context.resources.landing
    try:
        first, last = Hour.from_key(config.from_hour), Hour.from_key(config.to_hour)
        hours_between(first, last)
        topics = landing.config()
        cfg = topics.topic(config.topic)
    except (ValueError, TopicConfigError) as exc:
        raise failure(f"plan_backfill: {exc}. Fix the run config (topic, from_hour, to_hour) and launch again.") from exc
    store = landing.store()
    with kafka.log_view() as log:
        history = TopicHistory.read(store, topics, cfg.topic, context.resources.warehouse.backend(store).loaded)
        rows = dry_run(cfg, first, last, datetime.now(timezone.utc), log, history, config.skip_retention_gaps)
    context.log.info("Dry-run plan of %s, %s .. %s:\n%s", cfg.topic, config.from_hour, config.to_hour, format_table(rows))
    context.log_event(AssetObservation(
        asset_key=slice_key(cfg.topic),
        description=f"dry-run plan {config.from_hour} .. {config.to_hour} (nothing frozen)",
        metadata={
            "plan": MetadataValue.md(format_markdown(rows)),
            "hours": len(rows),
            "would_freeze": sum(r.state == PLANNED for r in rows),
            "already_frozen": sum(r.state == FROZEN for r in rows),
            "records_to_read": sum(r.records or 0 for r in rows if r.state == PLANNED),
            "errors": MetadataValue.json({r.hour: r.error for r in rows if r.state == "error"}),
            "before_first_hour": sum(r.before_first_hour for r in rows),
            "frozen_not_in_kafka": sum(bool(r.gone) for r in rows),
            # Of those, the hours a replay (source auto or archive) reads from their landed files and dead letters.
            "from_archive": sum(bool(r.gone) and r.archived for r in rows),
            # Landed under another routing or event time than the config's: the hours to replay.
            "stale_against_config": MetadataValue.json([r.hour for r in rows if r.stale]),
        },
    ))


@job(description="Dry-run plan of a backfill for one topic and a range of hours; freezes and writes nothing.")
def plan_backfill():
    plan_backfill_op()
