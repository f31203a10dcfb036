"""The settled sensor's tick (`queue/settled.py`) on an in-memory landing root that counts what it is
asked and keeps when each file was written: which event partitions became final since the last tick
(their newest version's `amended_at` + settle_hours), each asked for once per version; what the
position keeps; a first tick looking back settle_hours and a day; the budget; and what a year of days
costs per tick, in store calls."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from kafka_landing.naming import event_manifest_path
from kafka_landing.warehouse.by_event.versions import EventManifest, newest_versions
from kafka_landing.warehouse.queue.settled import (
    CLOCK_SKEW,
    LOOKBACK_EXTRA,
    Budget,
    SettledPosition,
    find_settled,
)
from kafka_landing_tests.mem_store import MemStore

DS, T = "shop", "orders"
TABLES = {(DS, T): 48}
NOW = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
H = timedelta(hours=1)


def write_version(store: MemStore, partition: str, version: int, made: datetime, table: str = T,
                  written: datetime | None = None) -> None:
    """Version `version` of the partition, made (its `amended_at`) and written at `made` (or `written`)."""
    m = EventManifest(dataset=DS, table=table, partition=partition, granularity="day", version=version,
                      sha256=f"sha-{partition}-{version}", rows=1, files=(), hours={},
                      amended_at=made.isoformat(timespec="seconds"))
    store.clock = lambda: (written or made).timestamp()
    store.write_atomic(m.path, m.to_bytes())


def tick(store, position=SettledPosition(), now=NOW, tables=TABLES, **budget):
    return find_settled(store, tables, position, now, Budget(**budget), clock=lambda: 0.0)


def due(plan) -> list[tuple[str, int, str]]:
    return [(s.partition, s.version, s.settles_at) for s in plan.due]


def iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


@pytest.fixture
def store() -> MemStore:
    return MemStore()


def test_the_first_tick_asks_for_what_settled_in_the_last_settle_hours_and_a_day(store):
    write_version(store, "2026-02-20", 1, NOW - 75 * H - 48 * H)  # settled 75 h ago: before the look back
    write_version(store, "2026-02-24", 1, NOW - 70 * H - 48 * H)  # settled 70 h ago
    write_version(store, "2026-02-28", 1, NOW - 1 * H - 48 * H)  # settled an hour ago
    write_version(store, "2026-03-01", 1, NOW - 2 * H)  # final in 46 h
    plan = tick(store)
    assert plan.since == iso(NOW - 48 * H - LOOKBACK_EXTRA)
    assert due(plan) == [("2026-02-24", 1, iso(NOW - 70 * H)), ("2026-02-28", 1, iso(NOW - H))]
    assert plan.position.until == iso(NOW)
    assert sorted(plan.position.seen) == [f"{DS}/{T}/2026-02-24", f"{DS}/{T}/2026-02-28", f"{DS}/{T}/2026-03-01"]


def test_a_partition_is_asked_for_once_when_its_settle_time_passes_and_nothing_is_read_twice(store):
    write_version(store, "2026-03-01", 1, NOW - 2 * H)
    first = tick(store)
    assert due(first) == [] and first.read == 1
    store.calls.clear()
    not_yet = tick(store, first.position, NOW + 45 * H)
    assert due(not_yet) == [] and dict(store.calls) == {"list": 1}  # remembered: no read
    at = tick(store, not_yet.position, NOW + 46 * H)
    assert due(at) == [("2026-03-01", 1, iso(NOW + 46 * H))]
    assert due(tick(store, at.position, NOW + 47 * H)) == []


def test_a_new_version_is_read_once_and_asked_for_at_its_own_settle_time_under_its_own_run_key(store):
    write_version(store, "2026-03-01", 1, NOW - 50 * H)
    first = tick(store)
    (v1,) = first.due
    write_version(store, "2026-03-01", 2, NOW + H)  # a late record amends it after it was final
    store.calls.clear()
    before = tick(store, first.position, NOW + 2 * H)
    assert due(before) == [] and store.calls["read"] == 1
    (v2,) = tick(store, before.position, NOW + 49 * H).due
    assert (v2.version, v2.settles_at) == (2, iso(NOW + 49 * H)) and v2.run_key != v1.run_key
    assert v2.run_key == f"settled/{DS}.{T}__by_event/2026-03-01@v2/{iso(NOW + 49 * H)}"


def test_a_version_written_long_before_the_last_tick_is_not_read(store):
    write_version(store, "2026-01-01", 1, NOW - 400 * H)
    write_version(store, "2026-03-01", 1, NOW - H)
    looked = SettledPosition(iso(NOW - 10 * H))
    plan = tick(store, looked)
    assert plan.read == 1 and sorted(plan.position.seen) == [f"{DS}/{T}/2026-03-01"]
    # One written a little before settle_hours before the last tick is read: the loader's clock may be
    # ahead of the store's, and its version settle after all.
    write_version(store, "2026-02-27", 1, NOW - 58 * H + CLOCK_SKEW / 2, written=NOW - 58 * H - CLOCK_SKEW / 2)
    plan = tick(store, SettledPosition(looked.until, plan.position.seen))
    assert due(plan) == [("2026-02-27", 1, iso(NOW - 10 * H + CLOCK_SKEW / 2))] and plan.read == 1


def test_each_table_settles_after_its_own_topics_settle_hours(store):
    write_version(store, "2026-03-01", 1, NOW - 30 * H)
    write_version(store, "2026-03-01", 1, NOW - 30 * H, table="hits")
    plan = tick(store, tables={(DS, T): 48, (DS, "hits"): 24})
    assert [(s.table, s.settles_at) for s in plan.due] == [("hits", iso(NOW - 6 * H))]


def test_the_read_budget_leaves_the_rest_for_the_next_tick_which_looks_from_the_same_time(store):
    for day in range(5):
        write_version(store, f"2026-02-2{day}", 1, NOW - (60 - day) * H)  # settled 12 to 8 hours ago
    first = tick(store, reads=2)
    assert first.stopped_early and first.read == 2 and first.position.until is None
    assert [p for p, _, _ in due(first)] == ["2026-02-20", "2026-02-21"]  # the earliest written first
    second = tick(store, first.position, reads=2)
    assert [p for p, _, _ in due(second)] == ["2026-02-22", "2026-02-23"]  # none asked for twice
    third = tick(store, second.position, reads=2)
    assert [p for p, _, _ in due(third)] == ["2026-02-24"] and not third.stopped_early
    assert third.position.until == iso(NOW)


def test_the_time_budget_stops_a_tick_and_a_table_it_did_not_list_keeps_what_was_read_of_it(store):
    write_version(store, "2026-03-01", 1, NOW - 2 * H, table="a")
    write_version(store, "2026-03-01", 1, NOW - 2 * H, table="b")
    tables = {(DS, "a"): 48, (DS, "b"): 48}
    known = tick(store, tables=tables).position
    assert sorted(known.seen) == [f"{DS}/a/2026-03-01", f"{DS}/b/2026-03-01"]
    times = iter([0.0, 0.0, 100.0, 100.0, 100.0])  # the start, table a's listing, then past the deadline
    plan = find_settled(store, tables, known, NOW + 47 * H, Budget(seconds=15), clock=lambda: next(times))
    assert plan.stopped_early and plan.position.until == known.until
    assert sorted(plan.position.seen) == sorted(known.seen)
    assert due(plan) == [("2026-03-01", 1, iso(NOW + 46 * H))] * 2


def test_the_request_budget_asks_for_the_earliest_settled_first_and_the_rest_next_tick(store):
    for day in range(3):
        write_version(store, f"2026-02-2{day}", 1, NOW - (50 + day) * H)
    first = tick(store, requests=2)
    assert [p for p, _, _ in due(first)] == ["2026-02-22", "2026-02-21"] and first.more_due == 1
    assert first.position.until is None
    second = tick(store, first.position, requests=2)
    assert [p for p, _, _ in due(second)] == ["2026-02-20"] and second.position.until == iso(NOW)


def test_an_unreadable_version_is_warned_about_once_and_a_removed_one_waits_for_the_next_listing(store):
    write_version(store, "2026-02-27", 1, NOW - 50 * H)
    store.write_atomic(event_manifest_path(DS, T, "2026-02-27", 1), b"{not json")
    first = tick(store)
    assert due(first) == [] and len(first.unreadable) == 1 and "2026-02-27" in first.unreadable[0]
    again = tick(store, first.position, NOW + H)
    assert again.unreadable == [] and again.read == 0


def test_a_version_removed_between_the_listing_and_its_read_is_skipped(store, monkeypatch):
    from kafka_landing.warehouse.queue import settled

    write_version(store, "2026-02-27", 1, NOW - 50 * H)
    monkeypatch.setattr(settled, "read_version", lambda *a: (_ for _ in ()).throw(FileNotFoundError("gone")))
    plan = tick(store)
    assert due(plan) == [] and plan.unreadable == [] and plan.position.seen == {}


def test_the_position_reads_back_as_written_and_an_unreadable_one_starts_over(store):
    write_version(store, "2026-03-01", 1, NOW - 2 * H)
    position = tick(store).position
    assert SettledPosition.from_json(json.loads(json.dumps(position.to_json()))) == position
    for raw in (None, "x", {"until": "yesterday", "seen": {}}, {"until": None, "seen": {"k": [1]}}):
        assert SettledPosition.from_json(raw) == SettledPosition()


def test_a_year_of_days_costs_a_listing_per_tick_and_a_read_per_version_once(store):
    """A year of event days, each versioned at the end of its day and once more two days later (late
    records): a tick lists the table once and reads only the versions it has not read that may settle
    after it last looked; every version is asked for once, at its settle time."""
    start = datetime(2025, 3, 1, tzinfo=timezone.utc)
    days = [start + timedelta(days=d) for d in range(365)]
    for day in days:
        write_version(store, day.date().isoformat(), 1, day + 24 * H)
        write_version(store, day.date().isoformat(), 2, day + 72 * H)  # version 1 had not settled yet
    now = days[-1] + 80 * H
    assert len(newest_versions(store, DS, T)) == 365
    store.calls.clear()
    first = tick(store, now=now)
    assert store.calls["list"] == 1 and store.calls["read"] <= 6, dict(store.calls)
    asked = [s.partition for s in first.due]
    position = first.position
    for hour in range(1, 73):  # three days of hourly ticks
        store.calls.clear()
        plan = tick(store, position, now + hour * H)
        assert store.calls["list"] == 1 and store.calls["read"] == 0, (hour, dict(store.calls))
        asked += [s.partition for s in plan.due]
        position = plan.position
    # Every day whose version 2 settled in the 72 h looked back on, or since, once; the others long before.
    expected = [d.date().isoformat() for d in days if now - 72 * H < d + 120 * H <= now + 72 * H]
    assert sorted(asked) == expected and len(expected) == 5  # each once
    assert len(position.seen) <= 5  # what it remembers stays a few days', not a year's
