"""When a topic's hourly landing schedule ticks and which hour each tick lands (the topics of
one first hour and grace share a schedule and a run: `definitions.hourly_groups`). Pure:
no Dagster, no Spark, so the timing can be tested for every grace period.

An hour [T, T+1h) is closed for a topic once T + 1h + grace <= now
(`naming.hour_closes`). Each topic's schedule ticks once an hour, at a fixed minute,
and lands the topic's latest closed hour at the tick (`naming.last_closed_hour`).
Ticking `MARGIN_MINUTES` after the hour closes makes that hour advance by exactly
one hour from one tick to the next: none skipped, none twice, for any grace, even
one of several hours.

A table is fresh when its hour is loaded by the deadline: the tick plus `BUDGET_MINUTES`,
what landing and loading an hour take through the daemon with room to spare (seconds to
a minute, `make bench`'s freshness case).
"""

from __future__ import annotations

from datetime import datetime

from kafka_landing.naming import Hour, last_closed_hour

MARGIN_MINUTES = 1
"""How long after the topic's hour closes (its end plus the grace that late records get) the
tick comes: the cron's minute resolution, and the daemon's clock a little behind the brokers'."""

BUDGET_MINUTES = 5
"""How long after its tick an hour may take to be loaded into every table before the table
is stale in the UI."""


def tick_minute(grace_minutes: int) -> int:
    """The minute past every hour at which the topic's schedule ticks."""
    return (grace_minutes + MARGIN_MINUTES) % 60


def hour_to_land(tick: datetime, grace_minutes: int) -> Hour:
    """The latest hour closed at the tick's scheduled time: the largest T with T + 1h + grace <= tick."""
    return Hour(last_closed_hour(tick, grace_minutes))


def cron(grace_minutes: int) -> str:
    return f"{tick_minute(grace_minutes)} * * * *"


def deadline_minute(grace_minutes: int) -> int:
    """The minute past every hour by which the hour the tick landed is loaded."""
    return (grace_minutes + MARGIN_MINUTES + BUDGET_MINUTES) % 60


def deadline_cron(grace_minutes: int) -> str:
    return f"{deadline_minute(grace_minutes)} * * * *"
