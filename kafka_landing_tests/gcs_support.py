"""The GCS emulator for tests: one fake-gcs-server per session (a running one is
reused, else the dev stack starts it), a fresh bucket per test, and GcsStores on it;
and the emulator behind a proxy that enforces the preconditions it ignores
(`StrictPreconditions`), for what must be refused as GCS refuses it.

Load as a plugin: `pytest_plugins = ["kafka_landing_tests.gcs_support"]`.
`STORAGE_EMULATOR_HOST` is set for the whole session, so google-cloud-storage,
the store and any process the tests start (Spark's GCS connector, `dagster`)
talk to the emulator with anonymous credentials, never to real GCS.
"""

from __future__ import annotations

import http.client
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

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


# --- preconditions as GCS enforces them --------------------------------------------------------


class StrictPreconditions:
    """fake-gcs-server behind a proxy that answers as GCS does where the emulator does not: a
    DELETE, a rewrite or a copy whose `ifGenerationMatch` (the destination's) or
    `ifSourceGenerationMatch` does not hold is refused with GCS's 412 (the emulator honours them
    on uploads only). Every other request passes unchanged. Changing requests go one at a time,
    so a check and the change it guards are atomic for every client of the proxy, as on GCS."""

    _CHANGES = ("POST", "PUT", "PATCH", "DELETE")

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self._serial = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):  # quiet
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command in proxy._CHANGES:
                    with proxy._serial:
                        refused = proxy._refused(self.command, self.path)
                        status, headers, answer = refused or proxy._forward(self.command, self.path, self.headers,
                                                                            body)
                else:
                    status, headers, answer = proxy._forward(self.command, self.path, self.headers, body)
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="gcs preconditions", daemon=True)

    def start(self) -> StrictPreconditions:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _forward(self, method: str, path: str, headers, body: bytes) -> tuple[int, list, bytes]:
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            conn.request(method, path, body=body if body or method in self._CHANGES else None, headers=sent)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _generation(self, bucket: str, name: str) -> int:
        """The live generation of an object on the emulator, 0 if absent."""
        status, _, answer = self._forward("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}",
                                          {}, b"")
        return int(json.loads(answer)["generation"]) if status == 200 else 0

    def _refused(self, method: str, path: str) -> tuple[int, list, bytes] | None:
        """GCS's 412 for a precondition that does not hold, else None."""
        url = urlsplit(path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.split("/")]
        # /storage/v1/b/<bucket>/o/<object>[/rewriteTo|copyTo/b/<bucket>/o/<object>]
        if parts[1:4] != ["storage", "v1", "b"] or len(parts) < 7 or parts[5] != "o":
            return None
        checks = []
        if method == "DELETE" and len(parts) == 7:
            checks.append((parts[4], parts[6], query.get("ifGenerationMatch")))
        elif method == "POST" and len(parts) == 12 and parts[7] in ("rewriteTo", "copyTo"):
            checks.append((parts[9], parts[11], query.get("ifGenerationMatch")))
            checks.append((parts[4], parts[6], query.get("ifSourceGenerationMatch")))
        for bucket, name, want in checks:
            if want is not None and self._generation(bucket, name) != int(want):
                error = {"code": 412, "message": "At least one of the pre-conditions you specified did not hold.",
                         "errors": [{"message": "At least one of the pre-conditions you specified did not hold.",
                                     "domain": "global", "reason": "conditionNotMet", "locationType": "header",
                                     "location": "If-Match"}]}
                return 412, [("Content-Type", "application/json; charset=UTF-8")], json.dumps({"error": error}).encode()
        return None


@pytest.fixture(scope="session")
def strict_gcs(gcs_emulator) -> str:
    """The URL of the emulator behind `StrictPreconditions`, for the session."""
    proxy = StrictPreconditions(gcs_emulator).start()
    yield proxy.url
    proxy.stop()


@pytest.fixture
def strict_gcs_store_factory(strict_gcs, gcs_bucket):
    """`gcs_store_factory` through `StrictPreconditions`: a delete or a rewrite whose precondition does
    not hold is refused as on GCS."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="kafka-landing-test", credentials=AnonymousCredentials(),
                            client_options=ClientOptions(api_endpoint=strict_gcs))

    def _make(prefix: str = "landing", **kwargs):
        return make_gcs_store(gcs_bucket, prefix, client=client, **kwargs)

    return _make
