"""The event-time checks' arithmetic (`warehouse/by_event/measures.py`), through the real
BigQueryWarehouse and the strict BigQuery fake (no Spark): `settling` tells when an event day is final
and fails only when a day that had settled is amended after all; `event_conservation` tells a
partition that waits for another one's next version from a loss, and names the partitions whose
checks may wait for it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from functools import partial

from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import event_manifest_path, event_pending_dir
from kafka_landing.warehouse.by_event.load import load_event_partition
from kafka_landing.warehouse.by_event.measures import current_settling, event_conservation, settling
from kafka_landing.warehouse.by_event.versions import latest_manifest
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG, land_event_orders  # settle_hours 48

PROJECT = "kl-event-load"
DS, T = CFG.dataset, CFG.table
DAY, LATE_DAY = "2026-01-31", "2026-02-03"
UNIT = event_unit(DS, T, DAY)
T0 = datetime(2026, 1, 31, 15, 0, tzinfo=timezone.utc)
warehouse = partial(bigquery_warehouse, project=PROJECT)


def land(store, hour: str, spread: dict[str, int], first: int) -> None:
    """`spread`: {event hour: how many orders}, their ids numbered from `first`."""
    land_event_orders(store, hour, {e: [f"{e}-{first}-{i}" for i in range(n)] for e, n in spread.items()}, first)


def load(fake_bigquery, partition: str, now: datetime):
    store, fake = fake_bigquery
    return load_event_partition(warehouse(fake, store), store, CFG, T, partition, NO_SPARK, now=now)


def versioned_at_t0(fake_bigquery):
    """DAY's version 1, loaded at T0: landing hour 2026-01-31T13 with two orders of that hour. The store."""
    store, _ = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": 2}, first=1000)
    load(fake_bigquery, DAY, T0)
    return store


def iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


# --- settling -------------------------------------------------------------------------------------

def test_a_day_just_versioned_passes_and_says_until_when_late_records_may_amend_it(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=1))
    assert (s.ok, s.settled, s.settles_at) == (True, False, iso(T0 + timedelta(hours=48)))
    assert f"may still amend it until {iso(T0 + timedelta(hours=48))}" in s.why


def test_an_amendment_before_the_day_settled_passes_and_moves_settles_at(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)  # 18 h later: the day had not settled
    load(fake_bigquery, DAY, T0 + timedelta(hours=18))
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=19))
    assert (s.ok, s.settled, s.settles_at) == (True, False, iso(T0 + timedelta(hours=18 + 48)))


def test_a_day_unchanged_for_settle_hours_is_final_and_says_since_when(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=49))
    assert (s.ok, s.settled, s.settles_at) == (True, True, iso(T0 + timedelta(hours=48)))
    assert f"final since {iso(T0 + timedelta(hours=48))}" in s.why


def test_a_landing_hour_waiting_to_change_the_day_is_not_a_failure(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)  # marked, not versioned yet
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=19))
    assert (s.ok, s.settled, s.settles_at) == (True, False, None)
    assert "2026-02-01T09" in s.why and "versioned again by its next load" in s.why


def test_amending_a_day_after_it_had_settled_fails_and_only_that_version(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1, "2026-02-03T09": 1}, first=2000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=66))  # version 1 had settled at T0 + 48 h
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=66))
    assert (s.ok, s.settled, s.settles_at) == (False, False, iso(T0 + timedelta(hours=66 + 48)))
    assert s.previous_settled_at == iso(T0 + timedelta(hours=48))
    assert f"had settled at {iso(T0 + timedelta(hours=48))}" in s.why and "2026-02-03T09" in s.why
    # A version made after the previous one had settled is the alert; one more within the window is not.
    land(store, "2026-02-03T10", {"2026-01-31T22": 1}, first=3000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=70))
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=70))
    assert (s.ok, s.settled, s.previous_settled_at) == (True, False, None)


def test_a_manifest_written_before_previous_amended_at_existed_reads_the_previous_version(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1}, first=2000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=66))
    rel = event_manifest_path(DS, T, DAY, 2)
    old = {k: v for k, v in json.loads(store.read_bytes(rel)).items() if k != "previous_amended_at"}
    store.write_atomic(rel, json.dumps(old).encode())
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=66))
    assert (s.ok, s.previous_settled_at) == (False, iso(T0 + timedelta(hours=48)))


def test_settling_takes_the_waiting_hours_a_load_answers_as_a_reading_of_the_markers_gives_them(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)  # marked, not versioned yet
    later = T0 + timedelta(hours=19)
    manifest = latest_manifest(store, DS, T, DAY)
    assert settling(store, manifest, ["2026-02-01T09"], CFG.settle_hours, later) == \
        current_settling(store, UNIT, CFG.settle_hours, later)
    s = settling(store, manifest, [], CFG.settle_hours, later)  # nothing waits: final 48 h after version 1
    assert (s.ok, s.settled, s.settles_at) == (True, False, iso(T0 + timedelta(hours=48)))


def test_a_partition_not_versioned_yet_is_not_final_and_not_a_failure(fake_bigquery):
    store, _ = fake_bigquery
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0)
    assert (s.ok, s.settled, s.settles_at) == (True, False, None) and "not versioned yet" in s.why


# --- conservation ---------------------------------------------------------------------------------

def test_conservation_names_the_partitions_sharing_its_landing_hours(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": 2}, first=1000)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1, "2026-02-03T09": 1, "2026-02-02T05": 1}, first=2000)
    for p in (DAY, LATE_DAY, "2026-02-02"):
        load(fake_bigquery, p, T0)
    c = event_conservation(store, warehouse(fake, store), CFG, T, LATE_DAY)
    assert c.ok, c.why
    assert c.neighbours == (DAY, "2026-02-02")  # their checks may have waited for this partition


def test_a_shortfall_waits_only_while_the_partition_that_lacks_the_rows_is_marked(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": 2}, first=1000)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1, "2026-02-03T09": 1}, first=2000)
    load(fake_bigquery, DAY, T0)
    c = event_conservation(store, warehouse(fake, store), CFG, T, DAY)
    assert (c.ok, c.waiting, c.metadata["waiting_for"]) == (False, (LATE_DAY,), [LATE_DAY])
    # The late day's markers gone without a version (a lost load): the same shortfall is a loss now.
    for rel in store.list(event_pending_dir(DS, T, LATE_DAY), "*.json"):
        store.delete(rel)
    c = event_conservation(store, warehouse(fake, store), CFG, T, DAY)
    assert (c.ok, c.waiting) == (False, ()) and "landing hour 2026-02-03T09 landed 2 rows" in c.why
