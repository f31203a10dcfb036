"""Which hour each tick of a topic's hourly schedule lands, for every grace period
from 0 to 180 minutes: closed, the latest such hour, and one hour further at each tick."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.hourly_schedule import (
    BUDGET_MINUTES,
    MARGIN_MINUTES,
    cron,
    deadline_cron,
    hour_to_land,
    tick_minute,
)
from kafka_landing.kafka_slices.plan import HourNotClosedError, check_closed
from kafka_landing.naming import ONE_HOUR, Hour

DAY = datetime(2026, 3, 28, tzinfo=timezone.utc)  # the day before the EU clocks change: UTC ignores it


def ticks(grace: int, hours: int = 26):
    first = DAY + timedelta(minutes=tick_minute(grace))
    return [first + ONE_HOUR * i for i in range(hours)]


def assert_latest_closed(hour: Hour, tick: datetime, grace: int) -> None:
    check_closed(hour, tick, grace)
    with pytest.raises(HourNotClosedError):
        check_closed(hour.plus(1), tick, grace)


@pytest.mark.parametrize("grace", range(0, 181))
def test_every_grace_lands_the_latest_closed_hour_one_hour_per_tick(grace):
    landed = []
    for tick in ticks(grace):
        hour = hour_to_land(tick, grace)
        assert_latest_closed(hour, tick, grace)
        assert tick - hour.closes(grace) == timedelta(minutes=MARGIN_MINUTES)
        landed.append(hour)
    assert landed == [landed[0].plus(i) for i in range(len(landed))]


@given(grace=st.integers(0, 180), late=st.integers(0, 59 * 60))
def test_a_late_run_still_lands_the_hour_of_its_scheduled_time(grace, late):
    """A tick run late (a busy daemon) still lands the hour of its scheduled time, which is closed."""
    for tick in ticks(grace, hours=3):
        hour = hour_to_land(tick, grace)
        assert isinstance(hour, Hour)
        assert_latest_closed(hour, tick, grace)
        check_closed(hour, tick + timedelta(seconds=late), grace)


def test_cron_is_hourly_at_the_tick_minute():
    assert cron(30) == "31 * * * *"
    assert cron(59) == "0 * * * *"
    assert cron(90) == "31 * * * *"
    assert cron(0) == f"{MARGIN_MINUTES} * * * *"


@pytest.mark.parametrize("grace", range(0, 181))
def test_the_freshness_deadline_is_the_budget_after_each_tick(grace):
    """The deadline's cron names the minute BUDGET_MINUTES after every tick of the schedule."""
    minute = int(deadline_cron(grace).split()[0])
    assert deadline_cron(grace).endswith(" * * * *")
    for tick in ticks(grace, hours=2):
        deadline = tick + timedelta(minutes=BUDGET_MINUTES)
        assert deadline.minute == minute
