"""Event-time tables in BigQuery: each event partition replaced whole by one load job into the decorator
of a table partitioned on the event-time column, a late landing hour amending it as a new version, records
with no event time (or a sentinel one BigQuery cannot partition) in a table of their own by landing day, the
unknown partition of before handed over to it, and the fake refusing a decorator load whose rows fall outside
the decorated partition. Through the real BigQueryWarehouse and the strict BigQuery fake over HTTP."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from functools import partial

import pytest
from google.cloud import bigquery

from kafka_landing.handoff import markers
from kafka_landing.handoff.units import EVENT, event_unit
from kafka_landing.naming import UNKNOWN_EVENT, Hour, event_handover_path
from kafka_landing.warehouse.by_event.load import load_event_partition
from kafka_landing.warehouse.by_event.measures import current_settling, event_conservation
from kafka_landing.warehouse.load import LoadError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.helpers import avro_file, write_event_hour
from kafka_landing_tests.landed_hours import ORDER_WITH_EVENT_TIME as SCHEMA, ORDERS_BY_EVENT as CFG, orders
from kafka_landing_tests.landed_hours import events_cut_as_before, load_event_partition_as_before
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
    assert (again.new_version, again.result, len(fake.jobs)) == (False, None, 3)


def test_conservation_fails_when_the_partition_in_bigquery_is_changed_by_other_hands(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {"2026-01-31T13": ["a", "b"]})
    load(fake, store, "2026-01-31")
    assert event_conservation(store, warehouse(fake, store), CFG, T, "2026-01-31").ok
    fake.tables[(PROJECT, DS, "orders__by_event")]["partitions"]["20260131"].pop()
    c = event_conservation(store, warehouse(fake, store), CFG, T, "2026-01-31")
    assert not c.ok and not c.waiting and "holds 1 rows, version 1 lists 2" in c.why


def pending(store) -> list[str]:
    return sorted(u.partition for u in markers.list_units(store, EVENT, [(DS, T)]))


def load_pending(fake, store) -> dict:
    """Every marked partition loaded, as the event sensor's runs do: {partition: EventLoad}."""
    return {p: load(fake, store, p) for p in pending(store)}


def test_records_with_no_event_time_go_to_their_landing_day_of_a_table_of_their_own(fake_bigquery):
    store, fake = fake_bigquery
    land(store, "2026-01-31T13", {None: ["n1", "n2"], "2026-01-31T13": ["a"]})
    result = load(fake, store, "__unknown__2026-01-31")
    assert result.location == f"{PROJECT}.{DS}.orders__by_event_unknown$20260131"
    [(_, jid)] = list(fake.jobs)
    job = fake.jobs[(PROJECT, jid)]["resource"]["configuration"]["load"]
    assert (job["destinationTable"]["tableId"], job["timePartitioning"]) == (
        "orders__by_event_unknown$20260131", {"type": "DAY"})  # by ingestion time: the landing day
    assert ids(fake, "orders__by_event_unknown", "20260131") == ["n1", "n2"]
    land(store, "2026-01-31T14", {None: ["n3"]}, first=2000)
    land(store, "2026-02-01T00", {None: ["n4"]}, first=3000)
    load_pending(fake, store)
    assert fake.partition_counts(PROJECT, DS, "orders__by_event_unknown") == {"20260131": 3, "20260201": 1}
    by_event = warehouse(fake, store).by_event("day", None)
    assert by_event.partition_rows(DS, "orders__by_event", "__unknown__2026-01-31") == 3
    for p in ("__unknown__2026-01-31", "__unknown__2026-02-01", "2026-01-31"):
        c = event_conservation(store, warehouse(fake, store), CFG, T, p)
        assert c.ok, c.why


def test_three_days_of_hourly_landing_hours_name_at_most_a_days_files_per_job(fake_bigquery):
    store, fake = fake_bigquery
    for n in range(72):
        hour = Hour("2026-01-31T00").plus(n)
        land(store, hour, {None: [f"n{n}"], hour: [f"e{n}"]}, first=1000 + 10 * n)
        load_pending(fake, store)
    unknown_jobs = [j["resource"]["configuration"]["load"] for j in fake.jobs.values()
                    if j["resource"]["configuration"]["load"]["destinationTable"]["tableId"].startswith(
                        "orders__by_event_unknown$")]
    assert len(unknown_jobs) == 72 and max(len(j["sourceUris"]) for j in unknown_jobs) == 24
    assert fake.partition_counts(PROJECT, DS, "orders__by_event_unknown") == {
        "20260131": 24, "20260201": 24, "20260202": 24}


def test_sentinel_event_times_load_into_the_landing_days_unknown_partition_counted(fake_bigquery):
    """Event times BigQuery cannot partition (before 1960, after 2159) and timestamp zero are never a
    refused load: they are in the landing day's unknown partition, counted and named in its check."""
    store, fake = fake_bigquery
    land(store, "2026-03-01T10", {"2026-03-01T10": ["ok"], "1900-01-01T00": ["sentinel"], "9999-12-31T23": ["max"],
                                  "1970-01-01T00": ["zero"], None: ["none"]})
    assert pending(store) == ["2026-03-01", "__unknown__2026-03-01"]
    loaded = load_pending(fake, store)
    assert {p: ev.manifest.rows for p, ev in loaded.items()} == {"2026-03-01": 1, "__unknown__2026-03-01": 4}
    assert ids(fake, "orders__by_event_unknown", "20260301") == ["max", "none", "sentinel", "zero"]
    c = event_conservation(store, warehouse(fake, store), CFG, T, "__unknown__2026-03-01")
    assert c.ok, c.why
    assert (c.metadata["no_event_time_rows"], c.metadata["sentinel_time_rows"], c.metadata["sentinel_event_hours"]) \
        == (1, 3, {"1900-01-01T00": 1, "1970-01-01T00": 1, "9999-12-31T23": 1})
    assert "3 of them have an event time outside 1970-01-02..2159-12-31" in c.why


# --- the single __unknown__ of before, and sentinel days, handed over ------------------------------

def load_as_before(fake, store, partition: str):
    return load_event_partition_as_before(warehouse(fake, store).by_event("day", CFG.event_time_field), store,
                                          partition)


def test_the_unknown_partition_of_before_is_handed_over_to_its_landing_days_before_any_is_loaded(fake_bigquery):
    store, fake = fake_bigquery
    with events_cut_as_before():
        land(store, "2026-01-31T13", {None: ["n1"], "2026-01-31T13": ["a"], "1900-01-01T00": ["s1"]})
        land(store, "2026-02-01T09", {None: ["n2", "n3"]}, first=2000)
        load_as_before(fake, store, UNKNOWN_EVENT)
        load_as_before(fake, store, "2026-01-31")
        with pytest.raises(LoadError, match=r"Invalid partition decorator \$19000101"):
            load_as_before(fake, store, "1900-01-01")  # what R9 was: refused for good
    assert fake.tables[(PROJECT, DS, "orders__by_event_unknown")]["resource"].get("timePartitioning") is None
    assert ids(fake, "orders__by_event_unknown", "") == ["n1", "n2", "n3"]

    # The upgrade, a month later: the next landing hour brings a record with no event time; its day's load
    # hands over first.
    land(store, "2026-02-02T00", {None: ["n4"]}, first=3000)
    later = datetime.now(timezone.utc) + timedelta(days=30)
    new_day = load_event_partition(warehouse(fake, store), store, CFG, T, "__unknown__2026-02-02", NO_SPARK, now=later)
    assert new_day.manifest.rows == 1
    record = store.read_json(event_handover_path(DS, T))
    assert record["failed"] == {} and sorted(record["handed_over"]) == ["1900-01-01", UNKNOWN_EVENT]
    assert record["handed_over"][UNKNOWN_EVENT]["to"] == ["__unknown__2026-01-31", "__unknown__2026-02-01"]
    assert pending(store) == ["1900-01-01", UNKNOWN_EVENT, "__unknown__2026-01-31", "__unknown__2026-02-01"]
    loaded = load_pending(fake, store)
    assert {p: (ev.manifest.rows, ev.result is None) for p, ev in loaded.items()} == {
        "1900-01-01": (0, True), UNKNOWN_EVENT: (0, True),  # emptied by the hand-over, shown empty by their runs
        "__unknown__2026-01-31": (2, False), "__unknown__2026-02-01": (2, False)}
    assert fake.tables[(PROJECT, DS, "orders__by_event_unknown")]["resource"]["timePartitioning"] == {"type": "DAY"}
    assert fake.partition_counts(PROJECT, DS, "orders__by_event_unknown") == {
        "20260131": 2, "20260201": 2, "20260202": 1}
    assert ids(fake, "orders__by_event_unknown", "20260131") == ["n1", "s1"]
    for p in ("2026-01-31", "1900-01-01", UNKNOWN_EVENT, "__unknown__2026-01-31", "__unknown__2026-02-01",
              "__unknown__2026-02-02"):
        c = event_conservation(store, warehouse(fake, store), CFG, T, p)
        assert c.ok, c.why
    for p in ("1900-01-01", UNKNOWN_EVENT):  # emptied by the hand-over a month after they had settled: no alert
        s = current_settling(store, event_unit(DS, T, p), CFG.settle_hours, now=later)
        assert s.settled and not s.amended_after_final and "handed over" in s.why, s.why
    assert pending(store) == []
    # Handed over once: later loads read the record and nothing else of it.
    land(store, "2026-02-02T01", {None: ["n5"]}, first=4000)
    before = store.read_bytes(event_handover_path(DS, T))
    load(fake, store, "__unknown__2026-02-02")
    assert store.read_bytes(event_handover_path(DS, T)) == before


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
    load refuses, before any job, naming event_time_partition: day and the Iceberg warehouse."""
    store, fake = fake_bigquery
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": orders("2026-01-31T13", "a")}, SCHEMA,
                     granularity="hour", topic="orders")
    with pytest.raises(LoadError) as refused:
        load_event_partition(warehouse(fake, store), store, BY_EVENT_HOUR, T, "2026-01-31T13", NO_SPARK)
    said = str(refused.value)
    assert "event_time_partition is hour" in said and "417 days" in said and "event_time_partition: day" in said
    assert "Iceberg warehouse" in said and not refused.value.transient
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
