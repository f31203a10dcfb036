"""The `land_last_closed_hour` schedule as Dagster evaluates it: for any grace
period, every tick lands the latest hour closed for every topic, one hour per
tick. No service needed; the timing itself is unit tested in unit/test_schedule.py."""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import islice

import pytest
from dagster import build_schedule_context
from dagster._utils.schedules import cron_string_iterator

from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.definitions import build_schedule
from kafka_landing.kafka_slices.plan import HourNotClosedError, check_closed
from kafka_landing.naming import ONE_HOUR, hour_from_key


def _config(graces) -> LandingConfig:
    return LandingConfig(topics={f"t{i}": TopicConfig(topic=f"t{i}", dataset="d", table=f"t{i}", grace_minutes=g)
                                 for i, g in enumerate(graces)})


@pytest.mark.parametrize("graces", [(0,), (10,), (54,), (55,), (59,), (60,), (65,), (90,), (5, 120), (179,), (180,)])
def test_each_tick_lands_the_latest_hour_closed_for_every_topic(graces):
    schedule = build_schedule(_config(graces))
    start = datetime(2026, 3, 28, 22, 17, tzinfo=timezone.utc)
    landed = []
    for tick in islice(cron_string_iterator(start.timestamp(), schedule.cron_schedule, "UTC"), 30):
        with build_schedule_context(scheduled_execution_time=tick) as ctx:
            request = schedule(ctx)
        hour = hour_from_key(request.partition_key)
        for g in graces:
            check_closed(hour, tick, g)  # raises HourNotClosedError if the run would find it open
        with pytest.raises(HourNotClosedError):
            check_closed(hour + ONE_HOUR, tick, max(graces))
        assert request.run_key == request.partition_key
        landed.append(hour)
    assert landed == [landed[0] + ONE_HOUR * i for i in range(len(landed))], "one hour per tick, none skipped"
