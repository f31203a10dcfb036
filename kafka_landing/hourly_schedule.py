"""When the hourly landing schedule ticks and which hour each tick lands. Pure:
no Dagster, no Spark, so the timing can be tested for every grace period.

An hour [T, T+1h) is closed for a topic once T + 1h + grace <= now (see
`kafka_slices.plan.check_closed`). Each topic's schedule ticks once an hour, at a
fixed minute, and lands the topic's latest closed hour at the tick (the functions
take several graces and then wait for the longest). Ticking `MARGIN_MINUTES` after
the hour closes makes that hour advance by exactly one hour from one tick to the
next: none skipped, none twice, for any grace, even one of several hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from kafka_landing.naming import ONE_HOUR, floor_hour

MARGIN_MINUTES = 5
"""How long after the slowest topic's hour closes the tick comes (late records, clock skew)."""


def tick_minute(grace_minutes: Iterable[int]) -> int:
    """The minute past every hour at which the schedule ticks."""
    return (max(grace_minutes, default=0) + MARGIN_MINUTES) % 60


def hour_to_land(tick: datetime, grace_minutes: Iterable[int]) -> datetime:
    """The latest hour closed for every topic at `tick`: the largest T with T + 1h + grace <= tick."""
    longest = max(grace_minutes, default=0)
    return floor_hour(tick - timedelta(minutes=longest)) - ONE_HOUR


def cron(grace_minutes: Iterable[int]) -> str:
    return f"{tick_minute(grace_minutes)} * * * *"
