"""Which partitions upkeep compacts: those over for a day that hold more than one file, at a
year's scale (counted, no table); the unknown partitions by their landing day; hours for hourly
tables; a landing-hour table's days."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kafka_landing.warehouse.iceberg.compact import due, ended

UTC = timezone.utc


def test_a_partition_ends_with_its_day_its_hour_or_its_landing_day():
    assert ended("2026-01-31", "event_day") == datetime(2026, 2, 1, tzinfo=UTC)
    assert ended("2026-01-31T13", "event_hour") == datetime(2026, 1, 31, 14, tzinfo=UTC)
    assert ended("__unknown__2026-01-31", "event_day") == datetime(2026, 2, 1, tzinfo=UTC)
    assert ended("__unknown__2026-01-31", "event_hour") == datetime(2026, 2, 1, tzinfo=UTC)
    assert ended("not a day", "event_day") is None
    assert ended("2026-01-31", "hour") == datetime(2026, 2, 1, tzinfo=UTC)  # a landing-hour table's day


def test_a_year_of_landing_days_of_24_hourly_files_compacts_every_day_but_the_last():
    start = datetime(2025, 1, 1, tzinfo=UTC)
    files = {(start + timedelta(days=d)).strftime("%Y-%m-%d"): 24 for d in range(365)}

    todo = due(files, "hour", start + timedelta(days=365, hours=23))

    assert len(todo) == 364 and sum(files[p] for p in todo) == 364 * 24
    assert todo[-1] == (start + timedelta(days=363)).strftime("%Y-%m-%d")


def test_a_year_of_days_each_fed_by_many_landing_hours_compacts_all_but_the_last_day():
    """A year of event days, each with a file per landing hour that brought records (24 on time, a
    few late), and the unknown partition of each landing day: on the day after the last, every
    partition but the last day's own is due, and one file is never due."""
    start = datetime(2025, 1, 1, tzinfo=UTC)
    files = {}
    for d in range(365):
        day = (start + timedelta(days=d)).strftime("%Y-%m-%d")
        files[day] = 24 + d % 5
        files[f"__unknown__{day}"] = 1 + d % 2
    now = start + timedelta(days=365, hours=1)

    todo = due(files, "event_day", now)

    assert len(todo) == 364 + 182  # every day but the last; the unknown partitions with 2 files, but the last day's
    assert sum(files[p] for p in todo) == sum(24 + d % 5 for d in range(364)) + 2 * 182
    assert (start + timedelta(days=364)).strftime("%Y-%m-%d") not in todo
    assert due(files, "event_day", now, after=timedelta(0)) == sorted(p for p, n in files.items() if n > 1)
