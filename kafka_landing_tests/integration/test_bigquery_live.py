"""The BigQuery warehouse against real BigQuery and real GCS: opt-in, because it needs a
project, a bucket and credentials. It checks what the fake can only take from the
documentation: decorator loads into an ingestion-time HOUR table, 409 on a repeated
job id, the reader schema of an hour mixing schema ids, INFORMATION_SCHEMA.PARTITIONS
and deleting a partition by its decorator; and schema evolution in both orders of
hours: ALTER COLUMN SET DATA TYPE before a load, older files read through a reader
schema (referenceFileSchemaUri) into FLOAT64 and BIGNUMERIC columns (a NUMERIC-sized
decimal into a decimal of the same scale: the one behaviour BigQuery does not document).

    KAFKA_LANDING_BIGQUERY_LIVE_PROJECT=my-project \\
    KAFKA_LANDING_BIGQUERY_LIVE_BUCKET=my-bucket \\
    [KAFKA_LANDING_BIGQUERY_LIVE_LOCATION=EU]   # the bucket's location; default US
    .venv/bin/pytest kafka_landing_tests/integration/test_bigquery_live.py

Credentials: Application Default Credentials (`gcloud auth application-default login`,
or GOOGLE_APPLICATION_CREDENTIALS), with BigQuery Data Editor and Job User on the
project and Storage Object Admin on the bucket. Everything it creates (one dataset,
objects under one prefix) is removed at the end.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from kafka_landing.warehouse.bigquery import BigQueryWarehouse
from kafka_landing.warehouse.load import load_done_file
from kafka_landing_tests.integration.test_bigquery_warehouse import (
    EV1,
    EV2,
    EV3,
    H1,
    H2,
    NO_SPARK,
    V1,
    V2,
    ev1,
    ev2,
    ev3,
    land,
    orders,
    read_back,
)

PROJECT = os.environ.get("KAFKA_LANDING_BIGQUERY_LIVE_PROJECT")
BUCKET = os.environ.get("KAFKA_LANDING_BIGQUERY_LIVE_BUCKET")
LOCATION = os.environ.get("KAFKA_LANDING_BIGQUERY_LIVE_LOCATION", "US")


def _credentials_problem() -> str | None:
    try:
        import google.auth

        google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except Exception as exc:  # DefaultCredentialsError, or a broken key file
        return f"no Google credentials ({type(exc).__name__})"
    return None


def _skip_reason() -> str | None:
    if not PROJECT or not BUCKET:
        return ("live BigQuery test: set KAFKA_LANDING_BIGQUERY_LIVE_PROJECT and KAFKA_LANDING_BIGQUERY_LIVE_BUCKET "
                "(and Application Default Credentials) to run it")
    problem = _credentials_problem()
    return f"live BigQuery test: {problem}; run `gcloud auth application-default login`" if problem else None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _eventually(read, want, seconds: float = 60.0):
    """INFORMATION_SCHEMA may trail a finished job by a moment."""
    deadline = time.monotonic() + seconds
    while (got := read()) != want and time.monotonic() < deadline:
        time.sleep(2)
    return got


def test_one_small_hour_in_real_bigquery(monkeypatch):
    from google.cloud import bigquery, storage

    from kafka_landing.store.gcs import GcsStore

    for var in ("STORAGE_EMULATOR_HOST", "BIGQUERY_EMULATOR_HOST"):  # other tests may point at emulators
        monkeypatch.delenv(var, raising=False)
    run = uuid.uuid4().hex[:10]
    dataset, prefix = f"kafka_landing_live_{run}", f"kafka_landing_live/{run}"
    gcs = storage.Client(project=PROJECT)
    client = bigquery.Client(project=PROJECT, location=LOCATION)
    store = GcsStore(f"gs://{BUCKET}/{prefix}", client=gcs)
    warehouse = BigQueryWarehouse(client, store, PROJECT, location=LOCATION, datasets=[dataset])
    try:
        warehouse.check_writable()
        first_rel = land(store, dataset, H1, [(0, 1, V1, orders(3))])
        first = load_done_file(warehouse, store, first_rel, NO_SPARK)
        assert first.rows == 3 and first.location == f"{PROJECT}.{dataset}.orders$20260131"
        table = client.get_table(f"{PROJECT}.{dataset}.orders")
        assert table.time_partitioning.type_ == "DAY" and table.time_partitioning.field is None
        assert _eventually(lambda: warehouse.partition_rows(dataset, "orders", H1), 3) == 3

        again = load_done_file(warehouse, store, first_rel, NO_SPARK)  # 409, awaited: no second job
        assert again.job_id == first.job_id and again.rows == 3

        # An hour mixing schema ids, the old schema's file sorting last: loaded through a reader schema.
        mixed = load_done_file(warehouse, store, land(store, dataset, H2, [
            (0, 2, V2, orders(2, 10, coupon="C")), (1, 1, V1, orders(1, 20))]), NO_SPARK)
        assert mixed.rows == 3 and mixed.added_columns == ("coupon",)
        got = sorted((r["order_id"], r["coupon"]) for r in client.query_and_wait(
            f"SELECT order_id, coupon FROM `{PROJECT}.{dataset}.orders` "
            "WHERE _PARTITIONTIME = TIMESTAMP('2026-02-01')"))  # H2's day
        assert got == [("o10", "C"), ("o11", "C"), ("o20", None)]

        empty = load_done_file(warehouse, store, land(store, dataset, H1, []), NO_SPARK)
        assert empty.rows == 0
        assert _eventually(lambda: warehouse.partition_rows(dataset, "orders", H1), None) is None
        assert _eventually(lambda: warehouse.partition_rows(dataset, "orders", H2), 3) == 3

        # Evolution, oldest hour first (widened by ALTER COLUMN, then v1 read through the reader schema) and
        # newest hour first (the table as wide as it gets at once, older files promoted).
        h3, h4 = "2026-02-02T15", "2026-02-03T16"  # a day each: each loaded alone, in the order given
        hours = {H1: [(0, 1, EV1, [ev1(0)])], H2: [(0, 2, EV2, [ev2(0)])], h3: [(0, 3, EV3, [ev3(0)])],
                 h4: [(0, 3, EV3, [ev3(1)]), (1, 1, EV1, [ev1(1)])]}
        want = sorted((read_back(r) for r in (ev1(0), ev2(0), ev3(0), ev3(1), ev1(1))), key=lambda r: r["order_id"])
        for table, order in (("evolved_oldest_first", (H1, H2, h3, h4)), ("evolved_newest_first", (h4, h3, H2, H1))):
            for hour in order:
                load_done_file(warehouse, store, land(store, dataset, hour, hours[hour], table=table), NO_SPARK)
            columns = {f.name: (f.field_type, f.mode) for f in client.get_table(f"{PROJECT}.{dataset}.{table}").schema}
            assert columns["amount"] == ("FLOAT", "REQUIRED") and columns["price"] == ("BIGNUMERIC", "REQUIRED")
            got = [dict(r) for r in client.query_and_wait(
                "SELECT order_id, amount, qty, ratio, price, status, legacy, currency "
                f"FROM `{PROJECT}.{dataset}.{table}` ORDER BY order_id")]
            assert got == [{k: r[k] for k in got[0]} for r in want], table
    finally:
        client.delete_dataset(f"{PROJECT}.{dataset}", delete_contents=True, not_found_ok=True)
        for blob in gcs.list_blobs(BUCKET, prefix=f"{prefix}/"):
            blob.delete()
