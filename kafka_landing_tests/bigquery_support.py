"""The BigQuery warehouse's world without a service: a landing root in a local folder that calls itself
gs://unit (`helpers.GsLikeStore`) and the strict BigQuery fake serving it over HTTP, for the tests that
load through the real BigQueryWarehouse.

Load as a plugin (the root conftest does): `fake_bigquery` is then a fixture of every test.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from kafka_landing.warehouse.bigquery import BigQueryWarehouse
from kafka_landing_tests.bigquery_fake import FakeBigQuery, serving_folder
from kafka_landing_tests.helpers import GsLikeStore

NO_SPARK = lambda: pytest.fail("the BigQuery backend must not start Spark")  # noqa: E731


@contextmanager
def serving_gs_folder(folder, **settings) -> Iterator[tuple[GsLikeStore, FakeBigQuery]]:
    """(the landing root in `folder`, the fake serving it), the fake stopped on leaving;
    `settings`: FakeBigQuery's (its quotas, for instance)."""
    fake = serving_folder(folder, **settings)
    try:
        yield GsLikeStore(folder), fake
    finally:
        fake.stop()


@pytest.fixture
def fake_bigquery(tmp_path) -> Iterator[tuple[GsLikeStore, FakeBigQuery]]:
    """(the landing root in the test's folder, the strict BigQuery fake serving it)."""
    with serving_gs_folder(tmp_path) as served:
        yield served


def bigquery_warehouse(fake: FakeBigQuery, store, project: str, **options) -> BigQueryWarehouse:
    """The real BigQueryWarehouse of `project` on the fake, loading from `store`, in location US;
    `options`: BigQueryWarehouse's (its job timeout, for instance)."""
    return BigQueryWarehouse(fake.client(project), store, project, location="US", **options)
