"""BigQuery's job quotas per table (load jobs; copy jobs into it) count the jobs of any 24 hours, failed ones included, not those of
a UTC day: the product's own count of the jobs it started is over the same rolling window, warns
from it and refuses a job BigQuery would refuse (the quota refills as jobs turn 24 hours old).
The product's clock and the fake's are one test clock."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import partial

import pytest

from kafka_landing.errors import is_transient
from kafka_landing.warehouse.bigquery import jobs as bq
from kafka_landing.warehouse.bigquery import swap
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse, serving_gs_folder
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.landed_hours import DATASET, TABLE, land_orders as land

PROJECT = "kl-bq-quota"
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}]}
warehouse = partial(bigquery_warehouse, project=PROJECT)


@pytest.fixture
def clock(monkeypatch):
    """The time of the product and of the fake, set by the test (UTC)."""
    now = [datetime(2026, 1, 31, 23, 0, tzinfo=timezone.utc)]
    monkeypatch.setattr(bq, "_now", lambda: now[0])
    return now


def at(clock, day: str, hour: int, minute: int) -> None:
    """`day`: "day" (2026-01-31) or "next" (2026-02-01)."""
    clock[0] = datetime(2026, 2 if day == "next" else 1, 1 if day == "next" else 31, hour, minute,
                        tzinfo=timezone.utc)


def test_load_jobs_are_counted_over_the_last_24_hours_across_utc_midnight(tmp_path, clock, monkeypatch):
    """Scaled down (1,200 and 1,500 become 2 and 3): jobs at 23:00 and 23:30, then 01:00 the next day. A
    count per UTC day would start afresh at midnight; BigQuery's window still holds both jobs."""
    monkeypatch.setattr(bq, "LOAD_JOBS_WARNING", 2)
    monkeypatch.setattr(bq, "MAX_LOAD_JOBS", 3)
    with serving_gs_folder(tmp_path, clock=lambda: clock[0].timestamp()) as (store, fake):
        wh = warehouse(fake, store)
        assert load_done_file(wh, store, land(store, "2026-01-31T13", ["a"]), NO_SPARK).warnings == ()
        at(clock, "day", 23, 30)
        [warning] = load_done_file(wh, store, land(store, "2026-01-31T14", ["b"]), NO_SPARK).warnings
        assert "2 load jobs started in the last 24 hours" in warning

        at(clock, "next", 1, 0)
        [warning] = load_done_file(wh, store, land(store, "2026-02-01T00", ["c"]), NO_SPARK).warnings
        assert "3 load jobs started in the last 24 hours" in warning and "past 3 in any 24 hours" in warning
        assert wh.load_jobs_in_24_hours(DATASET, TABLE) == 3

        at(clock, "next", 1, 30)
        started = len(fake.jobs)
        with pytest.raises(LoadError) as refused:
            load_done_file(wh, store, land(store, "2026-02-01T01", ["d"]), NO_SPARK)
        assert len(fake.jobs) == started  # refused before any job: a refused job would count too
        said = str(refused.value)
        assert f"day 2026-02-01 (loading hour 2026-02-01T01)" in said and "3 load jobs were started into " \
            f"{PROJECT}.{DATASET}.{TABLE} in the last 24 hours" in said and "2026-02-01 23:00 UTC" in said
        assert f"{PROJECT}.{DATASET}.{TABLE}$20260201 holds what it held before" in said
        assert not is_transient(refused.value) and refused.value.heals_after == 3600  # asked for again

        at(clock, "next", 23, 1)  # the job of 23:00 is more than 24 hours old: one job may start
        load_done_file(wh, store, land(store, "2026-02-01T01", ["d"]), NO_SPARK)
        assert wh.load_jobs_in_24_hours(DATASET, TABLE) == 3 and len(fake.jobs) == started + 1
        rows = fake.partition_rows(PROJECT, DATASET, TABLE, "20260201")
        assert sorted(r["order_id"] for r in rows) == ["c", "d"]


def test_a_job_met_again_is_not_counted_or_refused_again(tmp_path, clock, monkeypatch):
    """A load of content already loading (its job id meets the job: 409) starts no job: at the quota,
    it is neither refused nor counted twice."""
    monkeypatch.setattr(bq, "MAX_LOAD_JOBS", 1)
    with serving_gs_folder(tmp_path, clock=lambda: clock[0].timestamp()) as (store, fake):
        done = land(store, "2026-01-31T13", ["a"])
        load_done_file(warehouse(fake, store), store, done, NO_SPARK)
        store.delete(f"warehouse_loads/bigquery/{DATASET}/{TABLE}/day=2026-01-31.json")  # as if its ledger write was lost
        at(clock, "next", 1, 0)
        again = load_done_file(warehouse(fake, store), store, done, NO_SPARK)
        assert len(fake.jobs) == 1 and again.job_id == list(fake.jobs)[0][1]
        assert warehouse(fake, store).load_jobs_in_24_hours(DATASET, TABLE) == 1


# --- copy jobs (a load in steps swaps its partition in by one) ------------------------------------

@pytest.fixture
def steps_of_two(tmp_path, clock, monkeypatch):
    """The landing root and the fake on the test clock, one load job naming at most 2 files: an hour
    of 3 files loads in steps into a scratch table and one copy job."""
    monkeypatch.setattr(swap, "MAX_SOURCE_URIS", 2)
    with serving_gs_folder(tmp_path, max_source_uris=2, clock=lambda: clock[0].timestamp()) as served:
        yield served


def land_files(store, hour: str, files: int) -> str:
    return write_hour(store, DATASET, TABLE, hour, [(p, 1, ORDER, [{"order_id": f"{hour}-{p}"}])
                                                    for p in range(files)])


def test_copy_jobs_are_counted_against_the_tables_copy_quota_warned_about_and_refused(steps_of_two, clock,
                                                                                         monkeypatch):
    """Scaled down (800 and 1,000 become 1 and 2). The copies are counted apart from the load jobs (the
    steps load into the scratch table: not the table's load jobs); at the quota a load in steps is
    refused before its first step."""
    store, fake = steps_of_two
    monkeypatch.setattr(bq, "COPY_JOBS_WARNING", 1)
    monkeypatch.setattr(bq, "MAX_COPY_JOBS", 2)
    wh = warehouse(fake, store)
    [warning] = load_done_file(wh, store, land_files(store, "2026-01-30T13", 3), NO_SPARK).warnings
    assert f"{PROJECT}.{DATASET}.{TABLE}: 1 copy jobs started into it in the last 24 hours" in warning
    assert "past 2 in a day" in warning
    assert (wh.jobs.last_24_hours(DATASET, TABLE, "copy"), wh.load_jobs_in_24_hours(DATASET, TABLE)) == (1, 0)
    at(clock, "next", 1, 0)
    load_done_file(wh, store, land_files(store, "2026-01-29T13", 3), NO_SPARK)
    assert wh.jobs.last_24_hours(DATASET, TABLE, "copy") == 2

    started = len(fake.jobs)
    with pytest.raises(LoadError) as refused:
        load_done_file(wh, store, land_files(store, "2026-01-28T13", 3), NO_SPARK)
    assert len(fake.jobs) == started  # no step spent on a load whose copy BigQuery would refuse
    said = str(refused.value)
    assert "day 2026-01-28 (loading hour 2026-01-28T13)" in said and "2 copy jobs were started into " \
        f"{PROJECT}.{DATASET}.{TABLE} in the last 24 hours" in said
    assert "the copy job of this load in steps" in said and "2026-02-01 23:00 UTC" in said
    assert not is_transient(refused.value) and refused.value.heals_after == 3600

    at(clock, "next", 23, 1)  # the first copy left the window
    result = load_done_file(wh, store, land_files(store, "2026-01-28T13", 3), NO_SPARK)
    assert result.job_id.endswith("_swap") and wh.jobs.last_24_hours(DATASET, TABLE, "copy") == 2
    assert len(fake.partition_rows(PROJECT, DATASET, TABLE, "20260128")) == 3
