"""Each group's hourly schedule as Dagster evaluates it: for any grace period, every
tick lands the topic's latest closed hour, one hour per tick, and none before the
topic's first hour. No service needed; the timing itself is unit tested in
unit/test_hourly_schedule.py."""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import islice

import pytest
from dagster import SkipReason, build_schedule_context
from dagster._utils.schedules import cron_string_iterator

from kafka_landing.config import TopicConfig
from kafka_landing.definitions import (
    build_hourly_job,
    build_schedule,
    hourly_job_name,
)
from kafka_landing.kafka_slices.plan import HourNotClosedError, check_closed
from kafka_landing.naming import Hour

START = datetime(2026, 3, 28, 22, 17, tzinfo=timezone.utc)


def _schedule(grace: int, first_hour: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)):
    cfg = TopicConfig(topic=f"t.{grace}", dataset="d", table="t", grace_minutes=grace, first_hour=first_hour)
    return build_schedule([cfg], build_hourly_job(hourly_job_name(first_hour, grace), [cfg]))


@pytest.mark.parametrize("grace", [0, 10, 54, 55, 59, 60, 65, 90, 120, 179, 180])
def test_each_tick_lands_the_topics_latest_closed_hour(grace):
    schedule = _schedule(grace)
    assert schedule.job_name == hourly_job_name(datetime(2026, 1, 1, tzinfo=timezone.utc), grace)
    landed = []
    for tick in islice(cron_string_iterator(START.timestamp(), schedule.cron_schedule, "UTC"), 30):
        with build_schedule_context(scheduled_execution_time=tick) as ctx:
            request = schedule(ctx)
        hour = Hour.from_key(request.partition_key)
        check_closed(hour, tick, grace)  # raises HourNotClosedError if the run would find it open
        with pytest.raises(HourNotClosedError):
            check_closed(hour.plus(1), tick, grace)
        assert request.run_key == request.partition_key
        landed.append(hour)
    assert landed == [landed[0].plus(i) for i in range(len(landed))], "one hour per tick, none skipped"


def test_no_tick_lands_an_hour_before_the_topics_first_hour():
    first = datetime(2026, 3, 29, 1, tzinfo=timezone.utc)
    schedule = _schedule(5, first_hour=first)
    answers = []
    for tick in islice(cron_string_iterator(START.timestamp(), schedule.cron_schedule, "UTC"), 6):
        with build_schedule_context(scheduled_execution_time=tick) as ctx:
            answers.append(schedule(ctx))
    skipped = [a for a in answers if isinstance(a, SkipReason)]
    landed = [Hour.from_key(a.partition_key) for a in answers if not isinstance(a, SkipReason)]
    assert skipped and "before the topics' first hour 2026-03-29-01:00" in skipped[0].skip_message
    assert landed and landed[0] == Hour(first) and all(h >= Hour(first) for h in landed)
