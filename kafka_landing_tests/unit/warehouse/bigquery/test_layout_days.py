"""BigQuery tables partitioned by DAY: each hour's load replaces its day with every landed hour
of it, in one job whose id is the day's content; the other hours of the day then meet that job.
A table keeps loading for years (10,000 partitions: 27 years of days, 417 days of hours), tables
made by HOUR before keep loading by hour and warn as they fill, and load jobs are counted against
BigQuery's 1,500 a day. Through the real BigQueryWarehouse and the strict BigQuery fake over HTTP
(landing files in a local folder that calls itself gs://)."""

from __future__ import annotations

import os
import time
from functools import partial


import pytest
from google.cloud import bigquery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.naming import ONE_HOUR, done_file_path, hour_from_tag, hour_tag
from kafka_landing.warehouse.bigquery import jobs as bq
from kafka_landing.warehouse.bigquery import DAY, HOUR, day_sha, job_id, partition_id
from kafka_landing.handoff.manifests import content_sha
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse, serving_gs_folder
from kafka_landing_tests.landed_hours import DATASET, TABLE, land_orders as land

PROJECT = "kl-bq-days"
H13, H14, H15 = "2026-01-31T13", "2026-01-31T14", "2026-01-31T15"
NEXT_DAY = "2026-02-01T00"
warehouse = partial(bigquery_warehouse, project=PROJECT)


def day_ids(fake, hour: str) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DATASET, TABLE, partition_id(hour, DAY)))


def sha(store, rel: str) -> str:
    return content_sha(store.read_bytes(rel))


def test_an_hours_load_replaces_its_day_with_every_landed_hour_of_it_in_one_job(fake_bigquery):
    store, fake = fake_bigquery
    a, b = land(store, H13, ["a0", "a1", "a2"]), land(store, H14, ["b0", "b1"])
    land(store, NEXT_DAY, ["n0"])  # another day: not in this day's job

    result = load_done_file(warehouse(fake, store), store, b, NO_SPARK)

    [(_, jid)] = list(fake.jobs)
    assert jid == result.job_id == job_id(DATASET, TABLE, H14, day_sha({H13: sha(store, a), H14: sha(store, b)}),
                                          layout=DAY)
    load = fake.jobs[(PROJECT, jid)]["resource"]["configuration"]["load"]
    assert load["destinationTable"]["tableId"] == "t$20260131"
    assert load["timePartitioning"] == {"type": "DAY"}
    assert len(load["sourceUris"]) == 2 and all("hour=2026-01-31T1" in u for u in load["sourceUris"])
    assert (result.rows, result.partition, result.location) == (2, H14, f"{PROJECT}.{DATASET}.{TABLE}$20260131")
    assert day_ids(fake, H13) == ["a0", "a1", "a2", "b0", "b1"]
    wh = warehouse(fake, store)
    assert (wh.partition_rows(DATASET, TABLE, H13), wh.partition_rows(DATASET, TABLE, H14)) == (3, 2)
    assert (wh.loaded_sha(DATASET, TABLE, H13), wh.loaded_sha(DATASET, TABLE, H14)) == (sha(store, a), sha(store, b))
    assert wh.loaded_partitions(DATASET, TABLE) == {H13, H14}
    assert wh.partition_location(DATASET, TABLE, H13) == f"{PROJECT}.{DATASET}.{TABLE}$20260131"


def test_the_other_hours_of_a_loaded_day_meet_its_job(fake_bigquery):
    store, fake = fake_bigquery
    a, b = land(store, H13, ["a0"]), land(store, H14, ["b0"])
    wh = warehouse(fake, store)
    first = load_done_file(wh, store, a, NO_SPARK)
    again = load_done_file(wh, store, b, NO_SPARK)  # a run of the day's hours: one job for all of them
    assert again.job_id == first.job_id and len(fake.jobs) == 1 and fake.calls_of("jobs.insert") == 2
    assert day_ids(fake, H13) == ["a0", "b0"]


def test_a_reland_replaces_its_hours_rows_and_keeps_the_days_others(fake_bigquery):
    store, fake = fake_bigquery
    land(store, H13, ["a0", "a1"])
    b = land(store, H14, ["b0"])
    wh = warehouse(fake, store)
    load_done_file(wh, store, b, NO_SPARK)

    relanded = load_done_file(wh, store, land(store, H13, ["z0"], partition=1), NO_SPARK)

    assert len(fake.jobs) == 2 and relanded.rows == 1
    assert day_ids(fake, H13) == ["b0", "z0"]
    assert (wh.partition_rows(DATASET, TABLE, H13), wh.partition_rows(DATASET, TABLE, H14)) == (1, 1)


def test_a_day_changed_by_other_hands_shows_in_every_hour_of_it(fake_bigquery):
    store, fake = fake_bigquery
    land(store, H13, ["a0", "a1", "a2"])
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H14, ["b0", "b1"]), NO_SPARK)
    fake.tables[(PROJECT, DATASET, TABLE)]["partitions"]["20260131"].pop()  # a row deleted in BigQuery
    assert (wh.partition_rows(DATASET, TABLE, H13), wh.partition_rows(DATASET, TABLE, H14)) == (2, 1)


def test_an_hour_loaded_before_whose_done_file_is_gone_stops_the_day_load(fake_bigquery):
    store, fake = fake_bigquery
    a = land(store, H13, ["a0"])
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H14, ["b0"]), NO_SPARK)
    store.delete(a)

    with pytest.raises(LoadError, match=rf"hours \['{H13}'\] were loaded into {PROJECT}\.{DATASET}\.{TABLE}\$20260131 "
                                        "and their done files are gone") as failed:
        load_done_file(wh, store, land(store, H14, ["b9"], partition=1), NO_SPARK)
    assert not failed.value.transient and "Nothing was loaded" in str(failed.value)
    assert len(fake.jobs) == 1 and day_ids(fake, H13) == ["a0", "b0"]


def test_an_unreadable_done_file_of_another_hour_stops_the_day_load_naming_it(fake_bigquery):
    store, fake = fake_bigquery
    store.write_atomic(done_file_path(DATASET, TABLE, hour_from_tag(H15)), b"{not json")
    with pytest.raises(LoadError, match=rf"the done file of hour {H15}, gs://unit/tables/{DATASET}/{TABLE}/"
                                        rf"hour={H15}/_DONE.json, cannot be read .* re-land hour {H15}"):
        load_done_file(warehouse(fake, store), store, land(store, H14, ["b0"]), NO_SPARK)
    assert fake.jobs == {}


def test_a_day_whose_hours_hold_no_row_is_deleted_and_an_empty_hour_adds_no_file(fake_bigquery):
    store, fake = fake_bigquery
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H13, ["a0"]), NO_SPARK)
    result = load_done_file(wh, store, land(store, H14, []), NO_SPARK)  # empty: the day keeps H13's rows
    assert result.rows == 0 and day_ids(fake, H13) == ["a0"]
    assert len(fake.jobs[(PROJECT, result.job_id)]["resource"]["configuration"]["load"]["sourceUris"]) == 1

    emptied = load_done_file(wh, store, land(store, H13, []), NO_SPARK)
    assert emptied.job_id is None and day_ids(fake, H13) == []
    assert wh.partition_rows(DATASET, TABLE, H13) is None and wh.loaded(DATASET, TABLE, H13)["deleted_partition"]
    assert wh.loaded(DATASET, TABLE, H14)["rows"] == 0


def _hour_table(fake) -> None:
    """A table kafka_landing made before days: partitioned by HOUR."""
    client = fake.client(PROJECT)
    client.create_dataset(bigquery.Dataset(f"{PROJECT}.{DATASET}"))
    table = bigquery.Table(f"{PROJECT}.{DATASET}.{TABLE}")
    table.time_partitioning = bigquery.TimePartitioning(type_=HOUR)
    client.create_table(table)


def test_a_table_made_by_hour_keeps_loading_by_hour_and_warns_as_it_fills(fake_bigquery, monkeypatch):
    store, fake = fake_bigquery
    _hour_table(fake)
    land(store, H13, ["a0"])
    monkeypatch.setattr(bq, "PARTITIONS_WARNING", 2)

    wh = warehouse(fake, store)
    first = load_done_file(wh, store, land(store, H14, ["b0"]), NO_SPARK)
    second = load_done_file(wh, store, done_file_path(DATASET, TABLE, hour_from_tag(H13)), NO_SPARK)

    assert first.location == f"{PROJECT}.{DATASET}.{TABLE}$2026013114" and first.warnings == ()
    assert first.job_id == job_id(DATASET, TABLE, H14, sha(store, done_file_path(DATASET, TABLE, hour_from_tag(H14))))
    assert fake.partition_counts(PROJECT, DATASET, TABLE) == {"2026013113": 1, "2026013114": 1}
    [warning] = second.warnings
    assert f"{PROJECT}.{DATASET}.{TABLE} is partitioned by HOUR and holds 2 partitions" in warning
    assert "refuses every load past 10000" in warning and "Recreate it partitioned by DAY" in warning


def test_bigquery_refuses_a_partition_past_its_limit_and_a_table_by_day_holds_24_times_the_hours(tmp_path):
    with serving_gs_folder(tmp_path, max_partitions=2) as (store, fake):
        hours = [hour_tag(hour_from_tag(H13) + ONE_HOUR * i) for i in range(3)]
        _hour_table(fake)
        by_hour = warehouse(fake, store)
        for h in hours[:2]:
            load_done_file(by_hour, store, land(store, h, [h]), NO_SPARK)
        with pytest.raises(LoadError, match=r"exceeded quota for number of partitions per table: 2"):
            load_done_file(by_hour, store, land(store, hours[2], [hours[2]]), NO_SPARK)

        fake.tables.clear()  # the same hours, and those of another day, into a table by day
        for h in [*hours, NEXT_DAY]:
            load_done_file(warehouse(fake, store), store, done_file_path(DATASET, TABLE, hour_from_tag(h))
                           if h != NEXT_DAY else land(store, h, ["n0"]), NO_SPARK)
        assert fake.partition_counts(PROJECT, DATASET, TABLE) == {"20260131": 3, "20260201": 1}


def test_load_jobs_are_counted_warned_about_and_refused_past_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(bq, "LOAD_JOBS_WARNING", 2)
    with serving_gs_folder(tmp_path, max_load_jobs_per_day=2) as (store, fake):
        wh = warehouse(fake, store)
        assert load_done_file(wh, store, land(store, H13, ["a0"]), NO_SPARK).warnings == ()
        [warning] = load_done_file(wh, store, land(store, H14, ["b0"]), NO_SPARK).warnings
        assert f"{PROJECT}.{DATASET}.{TABLE}: 2 load jobs started in the last 24 hours" in warning
        assert "1500" in warning and wh.load_jobs_in_24_hours(DATASET, TABLE) == 2
        with pytest.raises(LoadError, match="Quota exceeded: Your table exceeded quota for imports") as failed:
            load_done_file(wh, store, land(store, H15, ["c0"]), NO_SPARK)
        assert wh.load_jobs_in_24_hours(DATASET, TABLE) == 3  # a failed job counts too, as BigQuery counts it
        assert day_ids(fake, H13) == ["a0", "b0"] and "Nothing was replaced" in str(failed.value)


def test_job_counts_older_than_two_days_are_swept_by_a_days_first_job(fake_bigquery):
    store, fake = fake_bigquery
    old = "warehouse_loads/bigquery/shop/t/jobs/day=2026-01-01/kafka_landing_shop_t_20260101_x"
    store.write_atomic(old, b"")
    os.utime(store._path(old), (time.time() - 3 * 86_400,) * 2)
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H13, ["a0"]), NO_SPARK)
    assert not store.exists(old) and wh.load_jobs_in_24_hours(DATASET, TABLE) == 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([H13, H14, H15]), st.integers(0, 3), st.sampled_from([H13, H14, H15])),
                min_size=1, max_size=6))
def test_property_a_day_holds_the_last_landed_content_of_each_of_its_hours(tmp_path_factory, steps):
    """Hours of one day landed, re-landed (variant 3: empty) and loaded in any order: after each load
    the day holds exactly the rows of each hour's done file now, and a load adds a job only when the
    day's content changed since its last job."""
    folder = tmp_path_factory.mktemp("days")
    with serving_gs_folder(folder) as (store, fake):
        wh = warehouse(fake, store)
        now: dict[str, list[str]] = {}  # hour -> its landed ids
        loaded_content = None
        for hour, variant, load in steps:
            ids = [] if variant == 3 else [f"{hour}-{variant}-{i}" for i in range(variant + 1)]
            land(store, hour, ids, partition=variant)
            now[hour] = ids
            if load not in now:
                continue
            jobs_before = len(fake.jobs)
            load_done_file(wh, store, done_file_path(DATASET, TABLE, hour_from_tag(load)), NO_SPARK)
            content = {h: sha(store, done_file_path(DATASET, TABLE, hour_from_tag(h))) for h in now}
            changed = content != loaded_content and any(now.values())
            assert len(fake.jobs) == jobs_before + (1 if changed else 0)
            loaded_content = content
            assert day_ids(fake, H13) == sorted(i for ids in now.values() for i in ids)
            for h, ids in now.items():
                assert wh.partition_rows(DATASET, TABLE, h) == (len(ids) or None)


def test_an_hours_load_verifies_only_the_hours_of_its_day_not_loaded_with_the_same_content(fake_bigquery):
    """An hourly schedule loads a day 24 times: each load verifies its own hour's files and those of
    hours changed since the day's last load, not every landed hour of the day again."""
    store, fake = fake_bigquery
    read: list[str] = []
    rows_of = store.avro_rows

    def avro_rows(rel, *args, **kw):
        read.append(rel.rsplit("/", 2)[-2])
        return rows_of(rel, *args, **kw)

    store.avro_rows = avro_rows
    a = land(store, H13, ["a0", "a1"])
    load_done_file(warehouse(fake, store), store, a, NO_SPARK)
    read.clear()
    b = land(store, H14, ["b0"])
    load_done_file(warehouse(fake, store), store, b, NO_SPARK)
    assert read == [f"hour={H14}"]  # H13 was verified and loaded with this content by the day's last load

    read.clear()
    land(store, H13, ["a0", "a1", "a2"])  # H13 re-landed: its new content is verified with the next load
    c = land(store, H15, ["c0"])
    load_done_file(warehouse(fake, store), store, c, NO_SPARK)
    assert sorted(read) == [f"hour={H13}", f"hour={H15}"]
    assert day_ids(fake, H13) == ["a0", "a1", "a2", "b0", "c0"]


def test_a_load_counts_its_job_and_warns_from_one_listing(fake_bigquery, monkeypatch):
    store, fake = fake_bigquery
    monkeypatch.setattr(bq, "LOAD_JOBS_WARNING", 2)
    listed: list[str] = []
    walker = store.walk

    def walk(rel_dir, suffix=""):
        listed.append(rel_dir)
        return walker(rel_dir, suffix)

    store.walk = walk
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H13, ["a0"]), NO_SPARK)
    first = load_done_file(wh, store, land(store, NEXT_DAY, ["n0"]), NO_SPARK)
    assert sum(d.endswith("/jobs") for d in listed) == 2  # one listing per job, none more for the warning
    assert any("2 load jobs started in the last 24 hours" in w for w in first.warnings)
