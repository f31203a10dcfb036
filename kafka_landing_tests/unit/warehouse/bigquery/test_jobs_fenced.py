"""A BigQuery job start fenced by the lock: a loader that stalled past its lease between recording a
job and starting it (jobs.insert) cannot start it after the loader that took the lock over loaded
newer content. Job starts cannot be conditional, but a job id is taken once: the newer loader
reserves the recorded id with a job that does nothing, and the stale loader's insert meets it
(409) and stops with LockTakenOver. Through the real BigQueryWarehouse and the strict fake."""

from __future__ import annotations

import contextlib
from functools import partial

import pytest

from kafka_landing.errors import is_transient
from kafka_landing.store.base import HeldLock, LockLost, LockTakenOver
from kafka_landing.warehouse.bigquery import DAY, partition_id
from kafka_landing.warehouse.bigquery.jobs import RESERVED_LABEL
from kafka_landing.warehouse.load import load_done_file
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse, serving_folder
from kafka_landing_tests.helpers import GsLikeStore
from kafka_landing_tests.landed_hours import DATASET, TABLE, land_orders as land

PROJECT = "kl-bq-fenced"
H13, H14 = "2026-01-31T13", "2026-01-31T14"
warehouse = partial(bigquery_warehouse, project=PROJECT)


class LapsingLocks(GsLikeStore):
    """A landing root whose locks are leases a test lets lapse, as a bucket's: taking a lock never waits,
    a later holder takes it over, and an earlier holder's fence then fails (LockLost), as on GCS."""

    def __init__(self, root):
        super().__init__(root)
        self.tokens: dict[str, int] = {}

    @contextlib.contextmanager
    def lock(self, rel: str):
        token = self.tokens[rel] = self.tokens.get(rel, 0) + 1
        yield _Lease(self, rel, token)


class _Lease(HeldLock):
    def __init__(self, store: LapsingLocks, rel: str, token: int):
        self.store, self.rel, self.token = store, rel, token

    def fence(self) -> None:
        if self.store.tokens[self.rel] != self.token:
            raise LockLost(f"lock {self.rel} was taken over")


def day_ids(fake) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DATASET, TABLE, partition_id(H13, DAY)))


def stall_before_insert(wh, meanwhile) -> list[str]:
    """The loader of `wh` stalls once, after its last check and before its jobs.insert of a load job,
    while `meanwhile(insert)` runs (`insert()`: that jobs.insert, made once, whenever it is called);
    returns the ids of the load jobs it asked to start."""
    real, asked = wh.client.load_table_from_uri, []

    def stalled(*args, **kwargs):
        asked.append(kwargs["job_id"])
        if len(asked) > 1:
            return real(*args, **kwargs)
        made: list = []

        def insert():
            if not made:
                made.append(real(*args, **kwargs))
            return made[0]
        meanwhile(insert)
        return insert()
    wh.client.load_table_from_uri = stalled
    return asked


@pytest.fixture
def lapsing(tmp_path):
    fake = serving_folder(tmp_path)
    try:
        yield LapsingLocks(tmp_path), fake
    finally:
        fake.stop()


def test_a_loader_stalled_before_its_job_start_cannot_start_it_after_the_next_loader_loaded(lapsing):
    """A loads the day with H13 and stalls before jobs.insert; its lease lapses, H14 lands, and B takes
    the lock over and loads the day with both hours. Then A resumes: its stale WRITE_TRUNCATE would
    leave the day without H14. It meets the id B reserved, stops with LockTakenOver, and the day
    keeps B's load."""
    store, fake = lapsing
    a_done = land(store, H13, ["a0"])
    stale, newer = warehouse(fake, store), warehouse(fake, store)

    def next_loader_takes_over(_insert):
        loaded.append(load_done_file(newer, store, land(store, H14, ["b0"]), NO_SPARK))
    loaded: list = []
    asked = stall_before_insert(stale, next_loader_takes_over)

    with pytest.raises(LockTakenOver) as stopped:
        load_done_file(stale, store, a_done, NO_SPARK)

    [stale_id] = asked
    [b] = loaded
    assert day_ids(fake) == ["a0", "b0"]  # B's load stands
    reservation = fake.jobs[(PROJECT, stale_id)]["resource"]
    assert "query" in reservation["configuration"] and "load" not in reservation["configuration"]
    assert reservation["status"]["errorResult"]["reason"] == "invalidQuery"
    assert f"kafka_landing reserved job id {stale_id}" in reservation["status"]["errorResult"]["message"]
    assert RESERVED_LABEL in reservation["configuration"]["labels"]
    said = str(stopped.value)
    assert stale_id in said and f"{PROJECT}.{DATASET}.{TABLE}$20260131" in said and "day 2026-01-31" in said
    assert "a retry cannot help" in said and not is_transient(stopped.value)
    assert newer.loaded(DATASET, TABLE, H14)["job_id"] == b.job_id != stale_id
    assert "running_job" not in store.read_json(f"warehouse_loads/bigquery/{DATASET}/{TABLE}/day=2026-01-31.json")


def test_a_later_load_of_the_stale_content_takes_the_next_job_id_past_the_reservation(lapsing):
    """The reservation only stops the loader whose start it reserved: a load of the same content later
    (H13 re-landed, then its first landing restored) meets it as a job id used, and takes the next."""
    store, fake = lapsing
    a_done = land(store, H13, ["a0"])
    content_a = store.read_bytes(a_done)
    stale = warehouse(fake, store)
    asked = stall_before_insert(stale, lambda _insert: load_done_file(warehouse(fake, store), store,
                                                                      land(store, H13, ["b0"], partition=1), NO_SPARK))
    with pytest.raises(LockTakenOver):
        load_done_file(stale, store, a_done, NO_SPARK)
    assert day_ids(fake) == ["b0"]
    store.write_atomic(a_done, content_a)  # H13's first landing again (its file is still there): A's content

    again = load_done_file(warehouse(fake, store), store, a_done, NO_SPARK)

    assert again.job_id == asked[0] + "_r1" and day_ids(fake) == ["a0"]
    [earlier] = warehouse(fake, store).loaded(DATASET, TABLE, H13)["earlier_jobs"]
    assert earlier["job_id"] == asked[0] and "kafka_landing reserved job id" in earlier["why"]


def test_a_reservation_that_meets_the_stale_loaders_job_waits_for_it(lapsing):
    """The other order: the stale loader's jobs.insert lands between the newer loader's jobs.get (not
    found) and its reservation. The reservation meets that job (409) and waits for it, so the newer
    load still commits last; the stale loader then finds its lock lost at its ledger write."""
    store, fake = lapsing
    a_done = land(store, H13, ["a0"])
    stale, newer = warehouse(fake, store), warehouse(fake, store)
    reserving: list[str] = []

    def next_loader_takes_over(stale_insert):
        real_query = newer.client.query

        def query(sql, *args, **kwargs):
            reserving.append(kwargs["job_id"])
            stale_insert()  # the stale loader's insert goes through right before the reservation
            return real_query(sql, *args, **kwargs)
        newer.client.query = query
        load_done_file(newer, store, land(store, H14, ["b0"]), NO_SPARK)
    asked = stall_before_insert(stale, next_loader_takes_over)

    with pytest.raises(LockLost) as lost:
        load_done_file(stale, store, a_done, NO_SPARK)

    assert reserving == asked[:1] and not isinstance(lost.value, LockTakenOver)
    assert "load" in fake.jobs[(PROJECT, asked[0])]["resource"]["configuration"]  # the stale loader's own job
    assert day_ids(fake) == ["a0", "b0"] and fake.overlaps == []  # the newer load ran after it, not beside it
