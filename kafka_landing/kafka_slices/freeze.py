"""Freezing a slice: plan it once, store it, and return the stored one ever after."""

from __future__ import annotations

import json
from datetime import datetime

from kafka_landing.config import (
    LandingConfig,
    TopicConfig,
    TopicConfigError,
    env_first_hour,
    with_first_hours,
)
from kafka_landing.crash_points import crash_point
from kafka_landing.kafka_slices.plan import LogView, SlicePlan, plan_slice
from kafka_landing.naming import hour_from_tag, slice_dir, slice_manifest_path
from kafka_landing.store.base import LandingStore


def load_frozen(store: LandingStore, topic: str) -> dict[datetime, SlicePlan]:
    plans = {}
    for rel in store.list(slice_dir(topic), "hour=*.json"):
        d = store.read_json(rel)
        if d is not None:
            plans[hour_from_tag(d["hour"])] = SlicePlan.from_dict(d)
    return plans


def first_frozen_hour(store: LandingStore, topic: str) -> datetime | None:
    """The earliest hour of the topic with a frozen slice (names sort as hours do)."""
    rel = store.first(slice_dir(topic), "hour=*.json")
    return hour_from_tag(rel.rsplit("hour=", 1)[1][: -len(".json")]) if rel else None


def settle_first_hours(store: LandingStore, config: LandingConfig) -> LandingConfig:
    """Every topic with the hour its partitions start at (config, $KAFKA_LANDING_FIRST_HOUR,
    earliest frozen slice; see `config.with_first_hours`): one listing page per topic."""
    return with_first_hours(config, {name: first_frozen_hour(store, name) for name in config.topics}, env_first_hour())


def settled_first_hour(store: LandingStore, config: LandingConfig, topic: str) -> datetime | None:
    """One topic's first hour as the code location settles it; None if nothing says."""
    try:
        return settle_first_hours(store, LandingConfig(topics={topic: config.topic(topic)}, source=config.source)
                                  ).topic(topic).first_hour
    except TopicConfigError:
        return None


def frozen_slice(store: LandingStore, topic: str, hour: datetime) -> SlicePlan | None:
    d = store.read_json(slice_manifest_path(topic, hour))
    return SlicePlan.from_dict(d) if d else None


def freeze_slice(
    store: LandingStore, log: LogView, cfg: TopicConfig, hour: datetime, now: datetime,
    skip_retention_gaps: bool = False,
) -> tuple[SlicePlan, bool]:
    """(the hour's slice, whether this call froze it). Re-running returns the frozen one."""
    existing = frozen_slice(store, cfg.topic, hour)
    if existing:
        return existing, False
    # One planner per topic: two neighbours planned at once must agree on their boundary.
    with store.lock(f"{slice_dir(cfg.topic)}/.plan.lock") as held:
        existing = frozen_slice(store, cfg.topic, hour)
        if existing:
            return existing, False
        plan = plan_slice(
            cfg.topic, hour, now, log, load_frozen(store, cfg.topic),
            grace_minutes=cfg.grace_minutes, rows_per_task=cfg.rows_per_task,
            skip_retention_gaps=skip_retention_gaps, max_future_minutes=cfg.max_future_minutes,
            on_future_timestamp=cfg.on_future_timestamp,
        )
        crash_point("slices:before_manifest")
        data = json.dumps(plan.to_dict(), indent=2, sort_keys=True).encode()
        held.fence()  # planned against what was frozen when we read it: only if no other planner ran since
        if not store.create_exclusive(slice_manifest_path(cfg.topic, hour), data):
            return frozen_slice(store, cfg.topic, hour), False  # type: ignore[return-value]
        return plan, True

