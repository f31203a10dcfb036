"""Event-time tables in BigQuery: each event partition replaced whole by one load job into the decorator
of a table partitioned on the event-time column, a late landing hour amending it as a new version, records
with no event time in their own table, and the fake refusing a decorator load whose rows fall outside the
decorated partition. Through the real BigQueryWarehouse and the strict BigQuery fake over HTTP."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
from google.cloud import bigquery

from kafka_landing.handoff import markers
from kafka_landing.handoff.units import EVENT
from kafka_landing.naming import UNKNOWN_EVENT
from kafka_landing.warehouse.event_load import event_conservation, load_event_partition
from kafka_landing.warehouse.load import LoadError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.helpers import avro_file, write_event_hour
from kafka_landing_tests.landed_hours import ORDER_WITH_EVENT_TIME as SCHEMA, ORDERS_BY_EVENT as CFG, orders
from kafka_landing_tests.landed_hours import land_event_orders as land

PROJECT = "kl-bq-events"
DS, T = CFG.dataset, CFG.table
warehouse = partial(bigquery_warehouse, project=PROJECT)


def load(fake, store, partition: str):
    return load_event_partition(warehouse(fake, store), store, CFG, T, partition, NO_SPARK)


def ids(fake, table: str, pid: str) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DS, table, pid))


def test_an_event_day_is_one_decorator_load_and_a_late_hour_replaces_it_whole(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]})
    land(store, "2026-01-31T14", {"2026-01-31T13": ["c"], "2026-01-31T14": ["d"]}, first=2000)

    first = load(fake, store, "2026-01-31")
    assert (first.manifest.version, first.result.rows) == (1, 4)
    [(_, jid)] = list(fake.jobs)
    job = fake.jobs[(PROJECT, jid)]["resource"]["configuration"]["load"]
    assert job["destinationTable"]["tableId"] == "orders__by_event$20260131"
    assert job["timePartitioning"] == {"type": "DAY", "field": "created_at"}
    assert job["writeDisposition"] == "WRITE_TRUNCATE"
    assert ids(fake, "orders__by_event", "20260131") == ["a", "b", "c", "d"]
    assert first.location == f"{PROJECT}.{DS}.orders__by_event$20260131"

    # Three days later, a landing hour brings one more record of that day: version 2 replaces the day.
    land(store, "2026-02-03T09", {"2026-01-31T23": ["late"], "2026-02-03T09": ["e"]}, first=3000)
    second = load(fake, store, "2026-01-31")
    assert (second.manifest.version, second.manifest.changed_hours) == (2, ("2026-02-03T09",))
    assert ids(fake, "orders__by_event", "20260131") == ["a", "b", "c", "d", "late"]
    assert len(fake.jobs) == 2
    c = event_conservation(store, warehouse(fake, store), CFG, T, "2026-01-31")
    assert not c.ok and c.waiting == ("2026-02-03",)  # the late hour's own day is not versioned yet
    load(fake, store, "2026-02-03")
    c = event_conservation(store, warehouse(fake, store), CFG, T, "2026-01-31")
    assert c.ok, c.why
    assert c.metadata["landing_hours"]["2026-02-03T09"] == {"landed": 2, "by_event_partition": {
        "2026-01-31": 1, "2026-02-03": 1}}

    # Loaded again with nothing changed: no job.
    again = load(fake, store, "2026-01-31")
    assert (again.amended, again.result, len(fake.jobs)) == (False, None, 3)


def test_conservation_fails_when_the_partition_in_bigquery_is_changed_by_other_hands(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]})
    load(fake, store, "2026-01-31")
    assert event_conservation(store, warehouse(fake, store), CFG, T, "2026-01-31").ok
    fake.tables[(PROJECT, DS, "orders__by_event")]["partitions"]["20260131"].pop()
    c = event_conservation(store, warehouse(fake, store), CFG, T, "2026-01-31")
    assert not c.ok and not c.waiting and "holds 1 rows, version 1 lists 2" in c.why


def test_records_with_no_event_time_go_to_a_table_of_their_own_replaced_whole(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {None: ["n1", "n2"], "2026-01-31T13": ["a"]})
    result = load(fake, store, UNKNOWN_EVENT)
    assert result.location == f"{PROJECT}.{DS}.orders__by_event_unknown"
    assert ids(fake, "orders__by_event_unknown", "") == ["n1", "n2"]
    land(store, "2026-01-31T14", {None: ["n3"]}, first=2000)
    load(fake, store, UNKNOWN_EVENT)
    assert ids(fake, "orders__by_event_unknown", "") == ["n1", "n2", "n3"]
    by_event = warehouse(fake, store).by_event("day", "created_at")
    assert by_event.partition_rows(DS, "orders__by_event", UNKNOWN_EVENT) == 3


def test_a_reland_reloads_exactly_the_event_partitions_whose_files_changed(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-30T10": ["x"], "2026-01-31T13": ["a", "b"]})
    land(store, "2026-01-31T14", {"2026-01-29T01": ["y"]}, first=2000)
    for p in sorted([u.partition for u in markers.list_units(store, EVENT, [(DS, T)])]):
        load(fake, store, p)
    jobs = len(fake.jobs)

    land(store, "2026-01-31T13", {"2026-01-31T13": ["a"], "2026-02-01T00": ["b"]}, first=4000)
    touched = sorted([u.partition for u in markers.list_units(store, EVENT, [(DS, T)])])
    assert touched == ["2026-01-30", "2026-01-31", "2026-02-01"]
    results = {p: load(fake, store, p) for p in touched}
    assert {p: r.manifest.version for p, r in results.items()} == {"2026-01-30": 2, "2026-01-31": 2, "2026-02-01": 1}
    # Jan 30 is empty now: its partition is deleted, not loaded; two loads for the others.
    assert results["2026-01-30"].result.job_id is None and len(fake.jobs) == jobs + 2
    assert fake.partition_rows(PROJECT, DS, "orders__by_event", "20260130") == []
    assert ids(fake, "orders__by_event", "20260201") == ["b"]
    assert ids(fake, "orders__by_event", "20260129") == ["y"]  # untouched, not reloaded


def test_the_fake_refuses_a_decorator_load_whose_rows_fall_outside_the_partition(fake_bigquery):
    store, fake = fake_bigquery
    store.write_atomic("x.avro", avro_file(SCHEMA, orders("2026-01-30T10", "x") + orders("2026-01-31T10", "a")))
    client = fake.client(PROJECT)
    client.create_dataset(DS)
    config = bigquery.LoadJobConfig(source_format="AVRO", use_avro_logical_types=True, write_disposition="WRITE_TRUNCATE",
                                    time_partitioning=bigquery.TimePartitioning(type_="DAY", field="created_at"))
    job = client.load_table_from_uri(["gs://unit/x.avro"], f"{PROJECT}.{DS}.t$20260131", job_config=config)
    with pytest.raises(Exception, match="Some rows belong to different partitions rather than destination partition"):
        job.result()
    assert (PROJECT, DS, "t") not in fake.tables  # a failed job changes nothing


def test_an_event_table_of_another_partitioning_is_named_and_left_alone(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a"]})
    client = fake.client(PROJECT)
    client.create_dataset(DS)
    client.create_table(bigquery.Table(f"{PROJECT}.{DS}.orders__by_event",
                                       schema=[bigquery.SchemaField("created_at", "TIMESTAMP")]))
    with pytest.raises(LoadError, match=r"orders__by_event exists but is not partitioned; kafka_landing needs it "
                                        r"partitioned by DAY on column created_at"):
        load(fake, store, "2026-01-31")


def test_an_event_time_of_epoch_milliseconds_cannot_partition_a_bigquery_table_and_says_so(fake_bigquery):
    store, fake = fake_bigquery
    millis = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"},
                                                           {"name": "created_at", "type": "long"}]}
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": [{"order_id": "a", "created_at": 1}]}, millis,
                     topic="orders")
    with pytest.raises(LoadError, match=r"Partitioning field created_at .* must be a top-level TIMESTAMP, DATE or "
                                        r"DATETIME field, not INTEGER.*Nothing was replaced") as err:
        load(fake, store, "2026-01-31")
    assert not err.value.transient
    assert (PROJECT, DS, "orders__by_event") not in fake.tables


# --- event hours: 10,000 partitions are 417 days (N11) ---------------------------------------------

BY_EVENT_HOUR = dataclasses.replace(CFG, event_time_partition="hour")


def test_an_event_hour_table_is_not_created_and_the_refusal_says_what_to_use_instead(fake_bigquery):
    """A table partitioned by HOUR would refuse every load after 417 days of event hours: the first
    load refuses, before any job, naming event_time_partition: day and the Parquet warehouse."""
    store, fake = fake_bigquery
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": orders("2026-01-31T13", "a")}, SCHEMA,
                     granularity="hour", topic="orders")
    with pytest.raises(LoadError) as refused:
        load_event_partition(warehouse(fake, store), store, BY_EVENT_HOUR, T, "2026-01-31T13", NO_SPARK)
    said = str(refused.value)
    assert "event_time_partition is hour" in said and "417 days" in said and "event_time_partition: day" in said
    assert "Parquet warehouse" in said and not refused.value.transient
    assert fake.jobs == {} and (PROJECT, DS, "orders__by_event") not in fake.tables


def test_an_event_hour_table_made_before_keeps_loading_and_warns_as_it_fills(fake_bigquery, monkeypatch):
    from kafka_landing.warehouse.bigquery import jobs as bq
    store, fake = fake_bigquery
    client = fake.client(PROJECT)
    client.create_dataset(DS)
    table = bigquery.Table(f"{PROJECT}.{DS}.orders__by_event",
                           schema=[bigquery.SchemaField("order_id", "STRING"),
                                   bigquery.SchemaField("created_at", "TIMESTAMP")])
    table.time_partitioning = bigquery.TimePartitioning(type_="HOUR", field="created_at")
    client.create_table(table)
    monkeypatch.setattr(bq, "PARTITIONS_WARNING", 1)
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": orders("2026-01-31T13", "a")}, SCHEMA,
                     granularity="hour", topic="orders")
    loaded = load_event_partition(warehouse(fake, store), store, BY_EVENT_HOUR, T, "2026-01-31T13", NO_SPARK)
    assert ids(fake, "orders__by_event", "2026013113") == ["a"]
    [warning] = loaded.result.warnings
    assert "is partitioned by HOUR and holds 1 partitions" in warning
    assert "Set the topic's event_time_partition to day" in warning
