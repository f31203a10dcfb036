"""The event-time checks' arithmetic (`warehouse/by_event/measures.py`), through the real
BigQueryWarehouse and the strict BigQuery fake (no Spark): `settling` tells whether an event day is
final, until when it may change if not, and whether it changed after it had been final; `event_conservation` tells a
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


# --- settling ---------------------------------------------------------------------------------------

def verdict(s) -> tuple:
    """(final now, changed after it was final, settles_at): what the `settled` check shows (green,
    red, or yellow until settles_at)."""
    return s.settled, s.amended_after_final, s.settles_at


def test_a_day_just_versioned_is_not_final_yet_and_says_until_when_late_records_may_amend_it(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=1))
    assert verdict(s) == (False, False, iso(T0 + timedelta(hours=48)))
    assert f"not final yet: version 1 was made at {iso(T0)}" in s.why
    assert f"may still amend it until {iso(T0 + timedelta(hours=48))}" in s.why and "turns green by itself" in s.why


def test_an_amendment_before_the_day_was_final_moves_settles_at(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)  # 18 h later: the day was not final
    load(fake_bigquery, DAY, T0 + timedelta(hours=18))
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=19))
    assert verdict(s) == (False, False, iso(T0 + timedelta(hours=18 + 48)))


def test_a_day_unchanged_for_settle_hours_is_final_and_says_since_when(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    at_the_time = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=48))
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=49))
    assert verdict(at_the_time) == verdict(s) == (True, False, iso(T0 + timedelta(hours=48)))
    assert f"final since {iso(T0 + timedelta(hours=48))}: version 1" in s.why


def test_a_landing_hour_waiting_to_change_the_day_keeps_it_not_final(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)  # marked, not versioned yet
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=19))
    assert verdict(s) == (False, False, None)
    assert "2026-02-01T09" in s.why and "versioned again by its next load" in s.why
    # Past the version's settle time all the same: not final while the hour waits, and no alarm yet.
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=60))
    assert verdict(s) == (False, False, None)


def test_a_day_amended_after_it_was_final_is_red_until_it_is_final_again(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1, "2026-02-03T09": 1}, first=2000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=66))  # version 1 had been final since T0 + 48 h
    again_at = iso(T0 + timedelta(hours=66 + 48))
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=66))
    assert verdict(s) == (False, True, again_at)
    assert s.previous_settled_at == iso(T0 + timedelta(hours=48))
    assert f"changed after it was final: version 2, made at {iso(T0 + timedelta(hours=66))}" in s.why
    assert f"after it had been final since {iso(T0 + timedelta(hours=48))}" in s.why and "2026-02-03T09" in s.why
    assert "whoever read it as final should read it again" in s.why and f"until {again_at}" in s.why
    # Final again once unchanged for settle_hours: green, the amendment told as history.
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=66 + 48))
    assert verdict(s) == (True, False, again_at) and s.previous_settled_at is None
    assert s.why.startswith(f"{DS}.{T}__by_event {DAY}: final since {again_at}: version 2")
    assert f"earlier, version 2, made at {iso(T0 + timedelta(hours=66))}" in s.why


def test_a_day_amended_after_it_was_final_stays_red_while_a_landing_hour_waits_to_change_it_again(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1}, first=2000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=66))
    land(store, "2026-02-03T10", {"2026-01-31T22": 1}, first=3000)  # marked, not versioned yet
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=67))
    assert verdict(s) == (False, True, None) and "versioned again by its next load" in s.why


def test_a_version_made_while_the_day_was_not_final_again_is_not_a_new_alarm(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1, "2026-02-03T09": 1}, first=2000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=66))  # red: amended after it was final
    land(store, "2026-02-03T10", {"2026-01-31T22": 1}, first=3000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=70))  # version 2 was not final yet: yellow
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=70))
    assert verdict(s) == (False, False, iso(T0 + timedelta(hours=70 + 48))) and s.previous_settled_at is None


def test_a_manifest_written_before_previous_amended_at_existed_reads_the_previous_version(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-03T09", {"2026-01-31T23": 1}, first=2000)
    load(fake_bigquery, DAY, T0 + timedelta(hours=66))
    rel = event_manifest_path(DS, T, DAY, 2)
    old = {k: v for k, v in json.loads(store.read_bytes(rel)).items() if k != "previous_amended_at"}
    store.write_atomic(rel, json.dumps(old).encode())
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0 + timedelta(hours=66))
    assert (s.amended_after_final, s.previous_settled_at) == (True, iso(T0 + timedelta(hours=48)))


def test_settling_takes_the_waiting_hours_a_load_answers_as_a_reading_of_the_markers_gives_them(fake_bigquery):
    store = versioned_at_t0(fake_bigquery)
    land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)  # marked, not versioned yet
    later = T0 + timedelta(hours=19)
    manifest = latest_manifest(store, DS, T, DAY)
    assert settling(store, manifest, ["2026-02-01T09"], CFG.settle_hours, later) == \
        current_settling(store, UNIT, CFG.settle_hours, later)
    s = settling(store, manifest, [], CFG.settle_hours, later)  # nothing waits: final 48 h after version 1
    assert verdict(s) == (False, False, iso(T0 + timedelta(hours=48)))


def test_a_partition_not_versioned_yet_is_not_final_and_no_alarm(fake_bigquery):
    store, _ = fake_bigquery
    s = current_settling(store, UNIT, CFG.settle_hours, now=T0)
    assert verdict(s) == (False, False, None) and "not versioned yet" in s.why


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
