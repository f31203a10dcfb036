"""The GCS emulator for tests: one fake-gcs-server per session (a running one is
reused, else the dev stack starts it), a fresh bucket per test, and GcsStores on it.

Load as a plugin: `pytest_plugins = ["kafka_landing_tests.gcs_support"]`.
`STORAGE_EMULATOR_HOST` is set for the whole session, so google-cloud-storage,
the store and any process the tests start (Spark's GCS connector, `dagster`)
talk to the emulator with anonymous credentials, never to real GCS.
"""

from __future__ import annotations

import uuid

import pytest

from kafka_landing_tools import devstack


@pytest.fixture(scope="session")
def gcs_emulator() -> str:
    """The emulator's URL, with STORAGE_EMULATOR_HOST pointing at it for the session."""
    url = devstack.start_gcs_emulator()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", url)
        yield url


@pytest.fixture(scope="session")
def gcs_client(gcs_emulator):
    """One anonymous client on the emulator for the session."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="kafka-landing-test", credentials=AnonymousCredentials())


def new_bucket(client, prefix: str = "kl-test") -> str:
    """Create a bucket with a unique name (a test never sees another's objects)."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    client.create_bucket(name)
    return name


def drop_bucket(client, name: str) -> None:
    """Remove a test bucket and everything in it (the emulator keeps data on disk)."""
    from google.api_core.exceptions import NotFound

    try:
        bucket = client.bucket(name)
        for blob in client.list_blobs(name):
            try:
                blob.delete()
            except NotFound:
                pass
        bucket.delete()
    except NotFound:
        pass


@pytest.fixture
def gcs_bucket(gcs_client) -> str:
    """A fresh, empty bucket on the emulator, removed after the test."""
    name = new_bucket(gcs_client)
    yield name
    drop_bucket(gcs_client, name)


def make_gcs_store(bucket: str, prefix: str = "landing", client=None, **kwargs):
    """A GcsStore on gs://<bucket>/<prefix>; kwargs go to GcsStore (lease, timeouts)."""
    from kafka_landing.store.gcs import GcsStore

    root = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
    return GcsStore(root, client=client, **kwargs)


@pytest.fixture
def gcs_store_factory(gcs_client, gcs_bucket):
    """Build GcsStores on this test's bucket: `gcs_store_factory(prefix="landing", lease_seconds=2)`."""

    def _make(prefix: str = "landing", **kwargs):
        return make_gcs_store(gcs_bucket, prefix, client=gcs_client, **kwargs)

    return _make


@pytest.fixture
def bigquery_on_gcs(gcs_client):
    """The strict BigQuery fake, started, reading load jobs' gs:// sources from the emulator."""
    from google.api_core import exceptions as gexc

    from kafka_landing_tests.bigquery_fake import FakeBigQuery

    def read_object(uri: str) -> bytes:
        bucket, _, name = uri[len("gs://"):].partition("/")
        try:
            return gcs_client.bucket(bucket).blob(name).download_as_bytes()
        except gexc.NotFound:
            raise FileNotFoundError(uri) from None

    fake = FakeBigQuery(read_object)
    fake.start()
    yield fake
    fake.stop()
