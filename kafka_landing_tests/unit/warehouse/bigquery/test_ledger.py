"""Load jobs of one partition (a day) never overlap, even when a loader gave up on its job (a timeout, a kill) and
left it running: BigQuery needs no client to finish a job, and whichever job of a partition commits
last holds it. Through the real BigQueryWarehouse and the strict BigQuery fake over HTTP (no stack:
landing files in a local folder that calls itself gs://)."""

from __future__ import annotations

import pytest

from kafka_landing.errors import is_transient
from kafka_landing.warehouse.bigquery import DAY, BigQueryWarehouse, day_sha, job_id, partition_id
from kafka_landing.warehouse.bigquery.jobs import JobLimits
from kafka_landing.handoff.manifests import content_sha
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.landed_hours import DATASET, TABLE, land_orders

PROJECT = "kl-bq-jobs"
H1 = "2026-01-31T13"
LEDGER = f"warehouse_loads/bigquery/{DATASET}/{TABLE}/day={H1[:10]}.json"  # the day's loads: one job per day
HOUR_LEDGER = f"warehouse_loads/bigquery/{DATASET}/{TABLE}/hour={H1}.json"  # what was loaded of the hour
FOREVER = 10**6  # jobs.get polls a job answers RUNNING: longer than any wait here


def warehouse(fake, store, timeout: float = 30.0) -> BigQueryWarehouse:
    return bigquery_warehouse(fake, store, PROJECT, limits=JobLimits(timeout_seconds=timeout))


def land(store, partition: int, ids: list[str]) -> str:
    """One landing file of Kafka partition `partition` (its own file name: a re-land on another partition
    leaves the older file in place, as a re-land killed before its cleanup does) and the hour's done file."""
    return land_orders(store, H1, ids, partition)


def sha_of(store, done_rel: str) -> str:
    """The content of the hour's day, H1 its only landed hour."""
    return day_sha({H1: content_sha(store.read_bytes(done_rel))})


def leave_running(fake, store, done_rel: str) -> str:
    """Load the hour with a loader that gives up on its job (its wait times out): the job keeps running."""
    fake.running_polls = FOREVER
    with pytest.raises(LoadError, match="still running"):
        load_done_file(warehouse(fake, store, timeout=0.2), store, done_rel, NO_SPARK)
    fake.running_polls = 0
    [(_, jid)] = list(fake.jobs)
    assert fake.jobs[(PROJECT, jid)]["resource"]["status"]["state"] == "RUNNING"
    return jid


def ends_after(fake, jid: str, polls: int) -> None:
    """The job ends at the `polls`-th jobs.get from now."""
    fake.jobs[(PROJECT, jid)]["polls_left"] = polls


def finish_every_job(fake) -> None:
    """BigQuery finishes every job whether or not a client asks about it."""
    client = fake.client(PROJECT)
    for (_, jid), job in list(fake.jobs.items()):
        if job["resource"]["status"]["state"] != "DONE":
            job["polls_left"] = 1
            client.get_job(jid, location="US")


def order_ids(fake) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DATASET, TABLE, partition_id(H1, DAY)))


def test_the_job_is_in_the_ledger_before_it_is_waited_for(fake_bigquery):
    store, fake = fake_bigquery
    x = land(store, 0, ["o0", "o1", "o2"])
    jid = leave_running(fake, store, x)

    record = store.read_json(LEDGER)
    assert record["running_job"]["job_id"] == jid == job_id(DATASET, TABLE, H1, sha_of(store, x), layout=DAY)
    assert record["running_job"]["sha256"] == sha_of(store, x)
    wh = warehouse(fake, store)
    assert wh.loaded(DATASET, TABLE, H1) is None and wh.loaded_sha(DATASET, TABLE, H1) is None  # nothing loaded yet


def test_a_newer_content_waits_for_the_older_job_left_running(fake_bigquery):
    store, fake = fake_bigquery
    x_job = leave_running(fake, store, land(store, 0, ["o0", "o1", "o2"]))
    ends_after(fake, x_job, 3)  # it ends while the next load waits
    y = land(store, 1, ["o50", "o51", "o52"])  # a re-land: other files; X's file is still there

    result = load_done_file(warehouse(fake, store), store, y, NO_SPARK)
    finish_every_job(fake)

    assert order_ids(fake) == ["o50", "o51", "o52"]  # not X's rows, committed after Y's
    assert fake.overlaps == [] and len(fake.jobs) == 2
    wh = warehouse(fake, store)
    assert result.job_id == wh.loaded(DATASET, TABLE, H1)["job_id"] != x_job
    assert wh.loaded_sha(DATASET, TABLE, H1) == content_sha(store.read_bytes(y))
    assert wh.partition_rows(DATASET, TABLE, H1) == 3
    assert "running_job" not in store.read_json(LEDGER)


def test_an_older_job_that_outlasts_the_wait_stops_the_newer_load_as_transient(fake_bigquery):
    store, fake = fake_bigquery
    x_job = leave_running(fake, store, land(store, 0, ["o0", "o1", "o2"]))
    y = land(store, 1, ["o50", "o51"])

    with pytest.raises(LoadError) as stopped:
        load_done_file(warehouse(fake, store, timeout=0.2), store, y, NO_SPARK)

    message = str(stopped.value)
    assert is_transient(stopped.value)
    assert f"{PROJECT}.{DATASET}.{TABLE} day {H1[:10]} (loading hour {H1})" in message and x_job in message
    assert "run it again later" in message and f"cancel {PROJECT}:{x_job}" in message
    assert list(fake.jobs) == [(PROJECT, x_job)] and fake.overlaps == []  # no job beside it
    assert store.read_json(LEDGER)["running_job"]["job_id"] == x_job  # still the one to wait for

    ends_after(fake, x_job, 2)  # it ends while the retry waits
    result = load_done_file(warehouse(fake, store), store, y, NO_SPARK)
    finish_every_job(fake)
    assert order_ids(fake) == ["o50", "o51"] and result.rows == 2 and fake.overlaps == []


def test_an_empty_hour_waits_for_the_older_job_before_deleting_the_partition(fake_bigquery):
    store, fake = fake_bigquery
    x_job = leave_running(fake, store, land(store, 0, ["o0", "o1"]))
    ends_after(fake, x_job, 2)
    empty = land(store, 1, [])

    load_done_file(warehouse(fake, store), store, empty, NO_SPARK)
    finish_every_job(fake)

    assert order_ids(fake) == []
    assert warehouse(fake, store).loaded(DATASET, TABLE, H1)["rows"] == 0


def test_the_same_content_meets_its_own_running_job(fake_bigquery):
    store, fake = fake_bigquery
    x = land(store, 0, ["o0", "o1"])
    x_job = leave_running(fake, store, x)
    ends_after(fake, x_job, 2)

    result = load_done_file(warehouse(fake, store), store, x, NO_SPARK)

    assert result.job_id == x_job and list(fake.jobs) == [(PROJECT, x_job)]  # waited for, not repeated
    assert fake.calls_of("jobs.insert") == 2  # the second answered 409
    assert order_ids(fake) == ["o0", "o1"] and "running_job" not in store.read_json(LEDGER)


def test_a_recorded_job_bigquery_does_not_know_is_not_waited_for(fake_bigquery):
    store, fake = fake_bigquery
    store.write_json_atomic(LEDGER, {"running_job": {"job_id": "kafka_landing_never_started", "sha256": "0" * 64}})

    result = load_done_file(warehouse(fake, store), store, land(store, 0, ["o0"]), NO_SPARK)

    assert result.rows == 1 and order_ids(fake) == ["o0"]


def test_a_failed_job_leaves_the_hour_unloaded(fake_bigquery):
    store, fake = fake_bigquery
    x = land(store, 0, ["o0"])
    read = fake.read_object
    fake.read_object = lambda uri: (_ for _ in ()).throw(FileNotFoundError(uri))  # BigQuery cannot read it

    with pytest.raises(LoadError, match="failed: Not found: URI"):
        load_done_file(warehouse(fake, store), store, x, NO_SPARK)

    wh = warehouse(fake, store)
    assert wh.loaded(DATASET, TABLE, H1) is None and wh.loaded_partitions(DATASET, TABLE) == set()
    fake.read_object = read
    assert load_done_file(wh, store, x, NO_SPARK).rows == 1


def test_an_unreadable_record_still_says_loaded_after_a_failed_job(fake_bigquery):
    store, fake = fake_bigquery
    store.write_atomic(HOUR_LEDGER, b"{not json")  # loaded once, content unknown
    fake.read_object = lambda uri: (_ for _ in ()).throw(FileNotFoundError(uri))

    with pytest.raises(LoadError, match="failed: Not found: URI"):
        load_done_file(warehouse(fake, store), store, land(store, 0, ["o0"]), NO_SPARK)

    wh = warehouse(fake, store)
    assert wh.loaded(DATASET, TABLE, H1) is not None and wh.loaded_sha(DATASET, TABLE, H1) is None
