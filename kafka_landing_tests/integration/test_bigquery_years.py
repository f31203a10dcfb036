"""Years of hours into one BigQuery table: more than 10,000 hours (BigQuery's partitions per table)
land and load, into a table partitioned by DAY; and a day of more files than one load job may name
(10,000 source URIs). No service (the strict BigQuery fake over HTTP, a local folder that calls
itself gs://), but 20,000 files and 417 load jobs: not a unit test."""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest

from kafka_landing.naming import ONE_HOUR, done_file_path, hour_from_tag, hour_tag
from kafka_landing.warehouse.load import load_done_file
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse, serving_gs_folder
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.landed_hours import DATASET, TABLE, land_orders

PROJECT = "kl-bq-days"  # as in unit/warehouse/bigquery/test_layout_days.py, whose day loads this test scales up


@pytest.fixture
def folder(tmp_path):
    """On tmpfs where there is one: 30,000 fsyncs of tiny files measure the disk, not the loads."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(dir=shm, prefix="kl_years_"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_more_than_10000_hours_keep_loading(folder):
    """417 days of hours (10,008) land and load, a day at a time as a backfill of the day loads it:
    417 partitions and 417 load jobs, far from both limits."""
    with serving_gs_folder(folder) as (store, fake):
        first = hour_from_tag("2025-01-01T00")
        days = 417
        wh = bigquery_warehouse(fake, store, PROJECT)
        for d in range(days):
            day = first + timedelta(days=d)
            rels = [land_orders(store, hour_tag(day + ONE_HOUR * h), [f"{d}-{h}"]) for h in range(24)]
            load_done_file(wh, store, rels[-1], NO_SPARK)
        counts = fake.partition_counts(PROJECT, DATASET, TABLE)
        assert len(counts) == days and set(counts.values()) == {24}
        assert len(fake.jobs) == days and len(wh.loaded_partitions(DATASET, TABLE)) == days * 24 > 10_000
        last = hour_tag(first + timedelta(days=days - 1) + ONE_HOUR * 23)
        assert wh.partition_rows(DATASET, TABLE, last) == 1
        assert json.loads(store.read_bytes(done_file_path(DATASET, TABLE, hour_from_tag(last))))["rows"] == 1


def test_a_day_of_24_hours_of_420_files_loads_though_one_job_may_name_10000(folder):
    """R3: a topic of 420 partitions lands a file per partition per hour; hour 23's load replaces the
    day with 10,080 files, past BigQuery's 10,000 source URIs per load job. It loads in two steps into
    a scratch table and one copy job, each job within the limit the fake enforces as BigQuery does."""
    schema = {"type": "record", "name": "O", "fields": [{"name": "order_id", "type": "string"}]}
    with serving_gs_folder(folder) as (store, fake):
        rels = [write_hour(store, DATASET, TABLE, f"2026-01-31T{h:02d}",
                           [(p, 1, schema, [{"order_id": f"{h}-{p}"}]) for p in range(420)]) for h in range(24)]
        wh = bigquery_warehouse(fake, store, PROJECT)
        result = load_done_file(wh, store, rels[-1], NO_SPARK)
        loads = [j["resource"]["configuration"]["load"] for j in fake.jobs.values()
                 if "load" in j["resource"]["configuration"]]
        assert sorted(len(load["sourceUris"]) for load in loads) == [80, 10_000]
        assert ["__kl_scratch_" in load["destinationTable"]["tableId"] for load in loads] == [True, True]
        assert result.job_id.endswith("_swap")
        assert fake.partition_counts(PROJECT, DATASET, TABLE) == {"20260131": 10_080}
        assert wh.partition_rows(DATASET, TABLE, "2026-01-31T23") == 420
        assert [t for (_, _, t) in fake.tables if "__kl_scratch_" in t] == []
