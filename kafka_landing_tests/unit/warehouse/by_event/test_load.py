"""Loading an event partition (`warehouse/by_event/load.py`), through the real BigQueryWarehouse and
the strict BigQuery fake (no Spark): a landing hour published while the partition loads is left
marked and answered as waiting; the hand-over of the partitions releases before cut (`hand_over`)
holds back only the unknown partitions while one cannot be handed over (on Iceberg:
integration/test_iceberg_warehouse.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import partial

import pytest

from kafka_landing.handoff import markers
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import UNKNOWN_EVENT, done_file_path, event_handover_path
from kafka_landing.warehouse.bigquery.warehouse import BigQueryWarehouse
from kafka_landing.warehouse.by_event.load import load_event_partition
from kafka_landing.warehouse.by_event.versions import EventPartitionError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG, land_event_orders
from kafka_landing_tests.landed_hours import events_cut_as_before, load_event_partition_as_before

PROJECT = "kl-event-load"
DS, T = CFG.dataset, CFG.table
DAY = "2026-01-31"
T0 = datetime(2026, 1, 31, 15, 0, tzinfo=timezone.utc)
warehouse = partial(bigquery_warehouse, project=PROJECT)


def land(store, hour: str, spread: dict[str | None, int], first: int) -> None:
    """`spread`: {event hour: how many orders}, their ids numbered from `first`."""
    land_event_orders(store, hour, {e: [f"{e}-{first}-{i}" for i in range(n)] for e, n in spread.items()}, first)


def load(fake_bigquery, partition: str, now: datetime):
    store, fake = fake_bigquery
    return load_event_partition(warehouse(fake, store), store, CFG, T, partition, NO_SPARK, now=now)


def test_a_landing_hour_published_while_the_partition_loads_is_left_marked_and_answered_as_waiting(
        fake_bigquery, monkeypatch):
    store, _ = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": 2}, first=1000)
    load_partition = BigQueryWarehouse.load_partition

    def publish_meanwhile(*args, **kwargs):  # after the versioning, before the markers are cleared
        land(store, "2026-02-01T09", {"2026-01-31T23": 1}, first=2000)
        return load_partition(*args, **kwargs)

    monkeypatch.setattr(BigQueryWarehouse, "load_partition", publish_meanwhile)
    ev = load(fake_bigquery, DAY, T0)
    monkeypatch.undo()
    assert (ev.manifest.version, ev.manifest.rows, ev.new_version, ev.cleared) == (1, 2, True, 1)
    assert ev.waiting == ("2026-02-01T09",) == tuple(markers.marks_of(store, event_unit(DS, T, DAY)).hours)
    again = load(fake_bigquery, DAY, T0)
    assert (again.manifest.version, again.manifest.rows, again.manifest.amended, again.waiting) == (2, 3, True, ())


# --- the hand-over of the partitions of before ----------------------------------------------------

def land_before_the_split(store) -> None:
    """Two landing hours as releases before landed them: their records with no event time in the single
    __unknown__ (versioned), one with a sentinel day."""
    with events_cut_as_before():
        land_event_orders(store, "2026-01-31T13", {None: ["n1"], "2026-01-31T13": ["a"], "1900-01-01T00": ["s"]})
        land_event_orders(store, "2026-02-01T09", {None: ["n2"]}, first=2000)


def test_a_partition_of_before_that_cannot_be_handed_over_holds_back_only_the_unknown_partitions(fake_bigquery):
    store, fake = fake_bigquery
    land_before_the_split(store)
    with events_cut_as_before():
        load_event_partition_as_before(warehouse(fake, store).by_event("day", "created_at"), store, UNKNOWN_EVENT)
    gone = store.read_bytes(done_file_path(DS, T, "2026-02-01T09"))
    store.delete(done_file_path(DS, T, "2026-02-01T09"))
    land(store, "2026-02-02T00", {None: 1, "2026-02-02T00": 1}, first=3000)

    with pytest.raises(EventPartitionError, match=r"wait for the partitions they were in before.*__unknown__.*"
                                                  r"landing hours \['2026-02-01T09'\]") as err:
        load(fake_bigquery, "__unknown__2026-02-02", T0)
    assert err.value.elsewhere and not err.value.transient  # the unknown day is not refused for it
    day = load(fake_bigquery, "2026-02-02", T0)  # the event days go on, warned
    assert day.manifest.rows == 1 and "could not be handed over" in day.warnings[0]
    assert store.read_json(event_handover_path(DS, T))["failed"].keys() == {UNKNOWN_EVENT}

    store.write_atomic(done_file_path(DS, T, "2026-02-01T09"), gone)  # the done file is back
    assert load(fake_bigquery, "__unknown__2026-02-02", T0).manifest.rows == 1
    assert store.read_json(event_handover_path(DS, T))["failed"] == {}
    for p in ("__unknown__2026-01-31", "__unknown__2026-02-01", UNKNOWN_EVENT, "1900-01-01"):
        load(fake_bigquery, p, T0)
    assert fake.partition_counts("kl-event-load", DS, "orders__by_event_unknown") == {
        "20260131": 2, "20260201": 1, "20260202": 1}
