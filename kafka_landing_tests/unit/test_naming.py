"""Every landing-root path comes from naming.py, and each is exactly the path earlier releases
wrote: a landing root written before keeps its slices, markers, locks and ledgers. An hour
may come as a datetime or a tag, with the same path either way; nothing from a config or a
record can leave the root."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing import naming as n

H = datetime(2026, 1, 31, 13, tzinfo=timezone.utc)
TAG = "2026-01-31T13"


@pytest.mark.parametrize("path, expected", [
    (n.slice_manifest_path("orders.v1", H), "slices/orders.v1/hour=2026-01-31T13.json"),
    (n.plan_lock_path("orders.v1"), "slices/orders.v1/.plan.lock"),
    (n.staging_path("orders.v1", H, "ab12-cd34"), "staging/orders.v1/hour=2026-01-31T13/ab12-cd34"),
    (n.staging_dir("orders.v1") + "/" + n.STAGING_GLOB, "staging/orders.v1/hour=*/*"),
    (n.publish_lock_path("orders.v1", H), "locks/orders.v1/hour=2026-01-31T13.lock"),
    (n.done_file_path("shop", "orders", H), "tables/shop/orders/hour=2026-01-31T13/_DONE.json"),
    (n.done_file_glob("shop", "orders"), "tables/shop/orders/hour=*/_DONE.json"),
    (n.rejected_dead_letter_dir("orders.v1", H, "a1"), "dead_letters/orders.v1/hour=2026-01-31T13/rejected/a1"),
    (n.pending_marker_path("shop", "orders", H), "pending_loads/shop/orders/hour=2026-01-31T13.json"),
    (n.pending_marker_path("shop", "orders", H, given_up=True),
     "pending_loads/_given_up/shop/orders/hour=2026-01-31T13.json"),
    (n.pending_lock_path("shop", "orders"), "locks/pending_loads/shop/orders.lock"),
    (n.load_ledger_path("shop", "orders", H), "warehouse_loads/bigquery/shop/orders/hour=2026-01-31T13.json"),
    (n.load_lock_path("shop", "orders", H), "locks/warehouse_loads/bigquery/shop/orders/hour=2026-01-31T13.lock"),
    (n.landing_file_name(n.OffsetRange("orders.v1", 3, 7, 1200), "shop", "orders", 12),
     "orders.v1+3+shop.orders+12+00000000000000000007+00000000000000001200.avro"),
    (n.landing_file_name(n.OffsetRange("orders.v1", 3, 7, 1200), "shop", "orders", 12, n.Hour(H)),
     "orders.v1+3+shop.orders+12+00000000000000000007+00000000000000001200+2026-01-31T13.avro"),
    (n.dead_letter_file_name(n.OffsetRange("orders.v1", 3, 7, 1200)),
     "orders.v1+3+dead_letters+00000000000000000007+00000000000000001200.avro"),
])
def test_each_path_is_the_one_a_landing_root_already_holds(path, expected):
    assert path == expected


def test_an_hour_as_a_tag_or_a_datetime_names_the_same_path():
    for build in (lambda h: n.done_file_path("shop", "orders", h), lambda h: n.publish_lock_path("t", h),
                  lambda h: n.pending_marker_path("shop", "orders", h), lambda h: n.load_ledger_path("d", "t", h)):
        assert build(TAG) == build(H)


@pytest.mark.parametrize("bad", ["2026-01-31", "../x", "2026-01-31T13/../../etc", ""])
def test_a_string_that_is_not_an_hour_tag_is_refused(bad):
    with pytest.raises(n.NameError_, match="is not an hour tag"):
        n.done_file_path("shop", "orders", bad)


@pytest.mark.parametrize("bad", ["../up", "a/b", "", "x" * 129])
def test_an_attempt_that_could_leave_its_folder_is_refused(bad):
    with pytest.raises(n.NameError_, match="attempt"):
        n.staging_path("t", H, bad)


@pytest.mark.parametrize("name, hour", [("hour=2026-01-31T13", TAG), ("hour=2026-01-31T13.json", TAG),
                                        ("hour=2026-01-31", None), ("_given_up", None), ("hours=2026-01-31T13", None)])
def test_hour_folder_tag_reads_back_only_hour_folders(name, hour):
    assert n.hour_folder_tag(name) == hour


# --- the Hour value --------------------------------------------------------------------------

_hours = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(timezone.utc))


@given(_hours, st.integers(-100_000, 100_000))
def test_every_form_of_an_hour_is_one_method_of_one_value_and_they_agree(t, k):
    h = n.Hour(t)
    start = t.replace(minute=0, second=0, microsecond=0)
    assert h.start == start and h == start.strftime("%Y-%m-%dT%H")
    assert n.Hour(h) is h and n.Hour(str(h)) == h and n.Hour.from_key(h.key) == h
    assert h.day == start.date().isoformat() and h.decorator(by_day=True) == start.strftime("%Y%m%d")
    assert h.decorator() == start.strftime("%Y%m%d%H")
    if datetime(1970, 1, 1, tzinfo=timezone.utc) <= start + timedelta(hours=k) < datetime(9999, 1, 1, tzinfo=timezone.utc):
        later = h.plus(k)
        assert later.number - h.number == k and later.start == start + timedelta(hours=k)
        assert (later > h) == (k > 0)  # the tag sorts as time does


def test_an_hour_is_its_tag_wherever_a_tag_was_written():
    h = n.Hour("2026-01-31T13")
    assert json.dumps({"hour": h}) == '{"hour": "2026-01-31T13"}' and {"2026-01-31T13": 1}[h] == 1
    assert n.done_file_path("d", "t", h) == n.done_file_path("d", "t", "2026-01-31T13") == "tables/d/t/hour=2026-01-31T13/_DONE.json"
    assert h.closes(15) == datetime(2026, 1, 31, 14, 15, tzinfo=timezone.utc)


@pytest.mark.parametrize("bad", ["2026-01-31", "2026-13-01T00", "2026-01-31T24", "2026-01-31-13:00", "x",
                                 datetime(2026, 1, 31, 13), 1234])
def test_what_is_not_an_hour_is_refused_naming_it(bad):
    with pytest.raises(n.NameError_, match="hour"):
        n.Hour(bad)


# --- event partitions -----------------------------------------------------------------------------

@pytest.mark.parametrize("event_hour, granularity, expected", [
    ("2026-01-30T05", "day", "2026-01-30"),
    ("2026-01-30T05", "hour", "2026-01-30T05"),
    (None, "day", "__unknown__2026-01-31"),  # no event time: the unknown partition of the landing day
    (None, "hour", "__unknown__2026-01-31"),
    ("1970-01-02T00", "day", "1970-01-02"),  # the first and last event hours an event partition is cut by
    ("2159-12-31T23", "hour", "2159-12-31T23"),
    ("0001-01-01T00", "day", "__unknown__2026-01-31"),  # sentinels: with the records that have none
    ("1900-01-01T00", "day", "__unknown__2026-01-31"),
    ("1959-12-31T23", "day", "__unknown__2026-01-31"),  # BigQuery partitions 1960..2159 only
    ("1969-12-31T23", "hour", "__unknown__2026-01-31"),  # -1 ms
    ("1970-01-01T00", "day", "__unknown__2026-01-31"),  # timestamp zero: the day every landing hour would feed
    ("2160-01-01T00", "day", "__unknown__2026-01-31"),
    ("9999-12-31T23", "hour", "__unknown__2026-01-31"),
])
def test_a_file_is_cut_into_its_event_day_or_hour_or_its_landing_days_unknown_partition(event_hour, granularity,
                                                                                         expected):
    assert n.event_partition(event_hour, granularity, TAG) == expected
    assert n.check_event_partition(expected) == expected


@pytest.mark.parametrize("partition, superseded", [
    ("__unknown__", True), ("__unknown__2026-01-31", False), ("1970-01-01", True), ("1969-12-31T23", True),
    ("1970-01-02", False), ("2159-12-31T23", False), ("2160-01-01", True), ("1900-01-01", True), ("2026-01-31", False),
])
def test_the_partitions_no_file_is_cut_into_any_more_are_named_by_their_names(partition, superseded):
    assert n.superseded(partition) is superseded


@pytest.mark.parametrize("bad", ["__unknown__2026-02-30", "__unknown__x", "__unknown__/2026-01-31", "2026-01-31T24",
                                 "../x", "", None])
def test_what_is_not_an_event_partition_is_refused(bad):
    with pytest.raises(n.NameError_, match="is not an event partition"):
        n.check_event_partition(bad)


def test_an_unknown_partition_is_named_by_its_landing_day_in_every_path():
    p = n.unknown_partition(H)
    assert (p, n.unknown_day(p), n.unknown_day(n.UNKNOWN_EVENT), n.unknown_day("2026-01-31")) == (
        "__unknown__2026-01-31", "2026-01-31", None, None)
    assert n.event_manifest_path("shop", "orders", p, 3) == \
        "event_partitions/shop/orders/__unknown__2026-01-31/v=000003.json"
    assert n.event_pending_path("shop", "orders", p, H) == \
        "pending_event_loads/shop/orders/__unknown__2026-01-31/hour=2026-01-31T13.json"
    assert n.event_load_ledger_path("shop", "orders__by_event", p) == \
        "warehouse_loads/bigquery/shop/orders__by_event/partition=__unknown__2026-01-31.json"
    assert n.event_handover_path("shop", "orders") == "event_partitions/shop/orders/_handed_over.json"
