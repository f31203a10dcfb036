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
from kafka_landing.kafka_slices.plan import (
    LogView,
    PlanRules,
    SlicePlan,
    check_closed,
    frozen_for_planning,
    plan_slice,
)
from kafka_landing.naming import Hour, hour_folder_tag, plan_lock_path, slice_dir, slice_manifest_path
from kafka_landing.store.base import LandingStore


def load_frozen(store: LandingStore, topic: str) -> dict[Hour, SlicePlan]:
    plans = {}
    for rel in store.list(slice_dir(topic), "hour=*.json"):
        d = store.read_json(rel)
        if d is not None:
            plan = SlicePlan.from_dict(d)
            plans[plan.hour] = plan
    return plans


def frozen_hours(store: LandingStore, topic: str) -> list[Hour]:
    """The topic's frozen hours, oldest first, from the manifest names: one listing, no reads."""
    names = store.list(slice_dir(topic), "hour=*.json")
    return [h for rel in names if (h := hour_folder_tag(rel.rsplit("/", 1)[-1]))]


class _OnceLog:
    """The log as one planning sees it: its partitions and topic id asked once, so choosing which
    frozen hours to read and planning against them agree on both."""

    def __init__(self, log: LogView):
        self._log, self._asked = log, {}

    def _once(self, what: str, topic: str):
        if (what, topic) not in self._asked:
            self._asked[(what, topic)] = getattr(self._log, what)(topic)
        return self._asked[(what, topic)]

    def partitions(self, topic: str):
        return self._once("partitions", topic)

    def topic_id(self, topic: str):
        return self._once("topic_id", topic)

    def __getattr__(self, name: str):
        return getattr(self._log, name)


def first_frozen_hour(store: LandingStore, topic: str) -> Hour | None:
    """The earliest hour of the topic with a frozen slice (names sort as hours do)."""
    rel = store.first(slice_dir(topic), "hour=*.json")
    return hour_folder_tag(rel.rsplit("/", 1)[-1]) if rel else None


def settle_first_hours(store: LandingStore, config: LandingConfig) -> LandingConfig:
    """Every topic with the hour its partitions start at (config, $KAFKA_LANDING_FIRST_HOUR,
    earliest frozen slice; see `config.with_first_hours`): one listing page per topic."""
    earliest = {name: first_frozen_hour(store, name) for name in config.topics}
    return with_first_hours(config, {name: h.start if h else None for name, h in earliest.items()}, env_first_hour())


def settled_first_hour(store: LandingStore, config: LandingConfig, topic: str) -> Hour | None:
    """One topic's first hour as the code location settles it; None if nothing says."""
    try:
        first = settle_first_hours(store, LandingConfig(topics={topic: config.topic(topic)}, source=config.source)
                                   ).topic(topic).first_hour
    except TopicConfigError:
        return None
    return Hour(first) if first else None


def frozen_slice(store: LandingStore, topic: str, hour: Hour) -> SlicePlan | None:
    d = store.read_json(slice_manifest_path(topic, hour))
    return SlicePlan.from_dict(d) if d else None


def freeze_slice(
    store: LandingStore, log: LogView, cfg: TopicConfig, hour: Hour, now: datetime,
    skip_retention_gaps: bool = False,
) -> tuple[SlicePlan, bool]:
    """(the hour's slice, whether this call froze it). Re-running returns the frozen one."""
    existing = frozen_slice(store, cfg.topic, hour)
    if existing:
        return existing, False
    # One planner per topic: two neighbours planned at once must agree on their boundary.
    with store.lock(plan_lock_path(cfg.topic)) as held:
        existing = frozen_slice(store, cfg.topic, hour)
        if existing:
            return existing, False
        # Only the frozen hours planning uses (usually the nearest below and above), found by
        # name: the cost of freezing an hour does not grow with the topic's history.
        check_closed(hour, now, cfg.grace_minutes)  # as plan_slice does: an open hour asks Kafka nothing
        log = _OnceLog(log)
        partitions = log.partitions(cfg.topic)  # None: plan_slice says the topic is missing, reading nothing
        frozen = frozen_for_planning(
            frozen_hours(store, cfg.topic), hour, partitions or [], log.topic_id(cfg.topic) if partitions else None,
            lambda h: frozen_slice(store, cfg.topic, h),
        ) if partitions else {}
        plan = plan_slice(cfg.topic, hour, now, log, frozen, PlanRules.of(cfg, skip_retention_gaps))
        crash_point("slices:before_manifest")
        data = json.dumps(plan.to_dict(), indent=2, sort_keys=True).encode()
        # Planned against what was frozen when we read it: only if no other planner took the lock since.
        if not held.create_exclusive(slice_manifest_path(cfg.topic, hour), data):
            return frozen_slice(store, cfg.topic, hour), False  # type: ignore[return-value]
        return plan, True

