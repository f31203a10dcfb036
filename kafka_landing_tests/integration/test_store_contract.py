"""One contract, two backends: every behaviour the landing, loading and sensor code relies
on is checked by one test body run on a local folder (LocalStore) and on a gs:// bucket
(GcsStore on the fake-gcs-server emulator, a real server). What only a bucket needs
(lock leases: a dead holder's lock is taken over, a live one is kept) is tested after."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.avro_files import AvroFileError
from kafka_landing.kafka_slices.freeze import first_frozen_hour
from kafka_landing.store.local import LocalStore

# The emulator fixtures; redundant (and harmless) once conftest.py loads this plugin itself.

# Short leases: a dead holder's lock is free again after a second or two.
LEASE = dict(lease_seconds=2.0, renew_seconds=0.5)


@pytest.fixture(params=["local", "gcs"])
def make_store(request, tmp_path):
    """Build stores on one landing root of the backend; kwargs (lease, timeouts) for gcs only."""
    if request.param == "local":
        return lambda **_: LocalStore(tmp_path / "landing")
    factory = request.getfixturevalue("gcs_store_factory")
    return lambda **kw: factory("landing", **{**LEASE, **kw})


@pytest.fixture
def store(make_store):
    return make_store()


def _avro(n: int) -> bytes:
    """A real Avro container file of n rows in several blocks."""
    buf = io.BytesIO()
    schema = {"type": "record", "name": "r",
              "fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}]}
    fastavro.writer(buf, schema, ({"id": i, "s": "x" * 20} for i in range(n)), sync_interval=500)
    return buf.getvalue()


# --- where ---------------------------------------------------------------------


def test_location_is_under_the_root(store):
    assert store.location("a/b.json") == f"{store.root}/a/b.json"
    assert store.location("./a//b.json") == f"{store.root}/a/b.json"


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/etc/passwd", "a/.."])
def test_paths_leaving_the_root_are_refused(store, rel):
    outside = store.location("")  # the root itself stays untouched
    calls = [
        lambda: store.location(rel), lambda: store.exists(rel), lambda: store.read_bytes(rel),
        lambda: store.write_atomic(rel, b"x"), lambda: store.create_exclusive(rel, b"x"),
        lambda: store.move("ok", rel), lambda: store.move(rel, "ok"), lambda: store.delete(rel),
        lambda: store.list(rel), lambda: store.subdirs(rel), lambda: store.walk(rel),
        lambda: store.sweep(rel, "*", 0), lambda: store.size(rel),
    ]
    store.write_atomic("ok", b"ok")
    for call in calls:
        with pytest.raises(ValueError, match="escapes the landing root"):
            call()
    with pytest.raises(ValueError, match="escapes the landing root"), store.lock(rel):
        pass
    assert store.read_bytes("ok") == b"ok" and store.location("") == outside


# --- read and write ------------------------------------------------------------


def test_write_atomic_replaces_the_whole_content(store):
    store.write_atomic("d/f.json", b"a" * 1000)
    store.write_atomic("d/f.json", b"b" * 10)
    assert store.read_bytes("d/f.json") == b"b" * 10
    assert store.size("d/f.json") == 10
    store.write_json_atomic("d/g.json", {"k": 1})
    assert store.read_json("d/g.json") == {"k": 1}
    assert store.read_json("d/absent.json") is None


def test_a_reader_never_sees_half_a_write(store):
    big = {b"a" * (1 << 20), b"b" * (3 << 19)}
    store.write_atomic("f", b"a" * (1 << 20))
    stop = threading.Event()
    seen: list[bytes] = []

    def writer():
        while not stop.is_set():
            for data in big:
                store.write_atomic("f", data)

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            seen.append(store.read_bytes("f"))
    finally:
        stop.set()
        t.join()
    assert len(seen) > 3
    assert all(s in big for s in seen), {len(s) for s in seen}


def test_missing_files_raise_file_not_found(store):
    for call in (store.read_bytes, store.size, store.avro_rows):
        with pytest.raises(FileNotFoundError, match="nope"):
            call("d/nope")
    with pytest.raises(FileNotFoundError):
        store.move("d/nope", "d/x")


def test_size(store):
    store.write_atomic("d/f", b"12345")
    assert store.size("d/f") == 5
    store.write_atomic("d/f", b"1")
    assert store.size("d/f") == 1


def test_avro_rows_from_block_headers(store, monkeypatch):
    import kafka_landing.store.gcs as gcs

    monkeypatch.setattr(gcs, "_AVRO_READ_CHUNK", 700)  # many ranged reads across block boundaries
    data = _avro(400)
    store.write_atomic("t/a.avro", data)
    assert store.avro_rows("t/a.avro") == 400
    store.write_atomic("t/cut.avro", data[:-7])
    with pytest.raises(AvroFileError, match="cut.avro"):
        store.avro_rows("t/cut.avro")
    store.write_atomic("t/no.avro", b"not avro at all")
    with pytest.raises(AvroFileError):
        store.avro_rows("t/no.avro")


def test_rows_of_an_object_unchanged_since_they_were_counted_cost_no_download(store, monkeypatch):
    """N12: on a bucket the rows counted when a file was written stand while the object keeps the
    CRC32C recorded then (one metadata read); other bytes are walked again and a cut is found."""
    from google.cloud.storage.blob import Blob

    import kafka_landing.store.gcs as gcs

    data = _avro(400)
    store.write_atomic("t/c.avro", data)
    crc = store.crc32c("t/c.avro")
    assert (crc is not None) == isinstance(store, gcs.GcsStore)
    fetched: list[str] = []
    download = Blob.download_as_bytes

    def counting(self, *args, **kwargs):
        fetched.append(self.name)
        return download(self, *args, **kwargs)

    monkeypatch.setattr(Blob, "download_as_bytes", counting)
    assert store.avro_rows("t/c.avro", counted=(400, crc)) == 400
    if isinstance(store, gcs.GcsStore):
        assert fetched == [], "an unchanged object was downloaded to count its rows"
    store.write_atomic("t/c.avro", data[:-7])  # replaced by a cut copy: another CRC32C
    with pytest.raises(AvroFileError, match="c.avro"):
        store.avro_rows("t/c.avro", counted=(400, crc))


def test_avro_schema_reads_the_header_only(store, monkeypatch):
    """The schema comes from the first ranged read: the rest of a big file is never fetched."""
    from google.cloud.storage.blob import Blob

    import kafka_landing.store.gcs as gcs

    monkeypatch.setattr(gcs, "_AVRO_HEADER_CHUNK", 1024)
    data = _avro(20_000)
    assert len(data) > 100 * 1024
    store.write_atomic("t/big.avro", data)
    fetched: list[int] = []
    download = Blob.download_as_bytes

    def counting(self, *args, **kwargs):
        out = download(self, *args, **kwargs)
        fetched.append(len(out))
        return out

    monkeypatch.setattr(Blob, "download_as_bytes", counting)
    schema = store.avro_schema("t/big.avro")
    assert [f["name"] for f in schema["fields"]] == ["id", "s"]
    if isinstance(store, gcs.GcsStore):
        assert fetched and sum(fetched) <= 4 * 1024, fetched
    with pytest.raises(FileNotFoundError):
        store.avro_schema("t/none.avro")


def test_create_exclusive_first_writer_wins(store):
    assert store.create_exclusive("m/h.json", b"first")
    assert not store.create_exclusive("m/h.json", b"second")
    assert store.read_bytes("m/h.json") == b"first"


def test_create_exclusive_racing_threads_one_winner(store):
    for round_ in range(5):
        rel = f"m/race-{round_}.json"
        barrier = threading.Barrier(6)
        won: list[int] = []

        def racer(i: int) -> None:
            barrier.wait()
            if store.create_exclusive(rel, str(i).encode()):
                won.append(i)

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, f"round {round_}: winners {won}"
        assert store.read_bytes(rel) == str(won[0]).encode()


def test_move_puts_the_file_in_place_and_removes_the_source(store):
    store.write_atomic("staging/a1/x.avro", b"new")
    store.write_atomic("tables/t/x.avro", b"old")
    store.move("staging/a1/x.avro", "tables/t/x.avro")
    assert store.read_bytes("tables/t/x.avro") == b"new"
    assert not store.exists("staging/a1/x.avro")
    store.write_atomic("staging/a1/y.avro", b"y")
    store.move("staging/a1/y.avro", "tables/new/folder/y.avro")
    assert store.read_bytes("tables/new/folder/y.avro") == b"y"
    store.move("tables/new/folder/y.avro", "tables/new/folder/y.avro")  # onto itself: kept
    assert store.read_bytes("tables/new/folder/y.avro") == b"y"


# --- list ----------------------------------------------------------------------


def test_list_subdirs_walk_glob(store):
    for rel in ["d/a.json", "d/b.avro", "d/.tmp.avro", "d/sub/c.avro", "d/sub/deep/e.avro",
                "d/.hidden/f.avro", "d/sub2/g.json", "dx/h.avro", "top.avro"]:
        store.write_atomic(rel, b"x")
    assert store.list("d") == ["d/a.json", "d/b.avro"]
    assert store.list("d", "*.avro") == ["d/b.avro"]
    assert store.list("d/absent") == []
    assert store.list("") == ["top.avro"]
    assert store.subdirs("d") == ["sub", "sub2"]
    assert store.subdirs("") == ["d", "dx"]
    assert store.subdirs("d/absent") == []
    assert store.walk("d", ".avro") == ["d/.hidden/f.avro", "d/b.avro", "d/sub/c.avro", "d/sub/deep/e.avro"]
    assert store.walk("d/sub") == ["d/sub/c.avro", "d/sub/deep/e.avro"]
    assert store.walk("nothing") == []
    assert store.glob("d/*/*.avro") == ["d/.hidden/f.avro", "d/sub/c.avro"]
    assert store.glob("d/sub*/*") == ["d/sub/c.avro", "d/sub2/g.json"]
    assert store.glob("*/a.json") == ["d/a.json"]
    assert store.exists("d/a.json") and store.exists("d/sub") and not store.exists("d/nope")
    assert store.first("d") == "d/a.json" and store.first("d", "*.avro") == "d/b.avro"
    assert store.first("d", "*.csv") is None and store.first("d/absent") is None


GLOB_TREE = ["tables/d/t/hour=2026-11-20T13/_DONE.json", "tables/d/t/hour=2026-11-20T13/a.avro",
             "tables/d/t/hour=2026-11-20T13/.a.avro.tmp", "tables/d/t/hour=2026-11-20T14/_DONE.json",
             "tables/d/t/hour=2026-11-20T14/sub/_DONE.json", "tables/d/t/hours.json", "tables/d/t/_x/_DONE.json",
             "tables/d/t2/hour=2026-11-20T13/_DONE.json", "tables/d/.h/hour=1/_DONE.json", "tables/e/t/hour=1/_DONE.json",
             "pending_loads/d/t/hour=2026-11-20T13.json", "top.json", "tables/d/t/hour=x?/_DONE.json"]
GLOB_PATTERNS = ["tables/d/t/hour=*/_DONE.json", "tables/d/t/hour=2026-11-20T1?/*", "tables/d/t*/hour=*/_DONE.json",
                 "tables/*/t/hour=*/_DONE.json", "tables/d/*/hour=1/*", "tables/d/t/hour=*/*/_DONE.json",
                 "tables/d/t/hour=2026-11-20T1[3]/_DONE.json", "tables/d/t/hour=2026-11-20T1[!3]/_DONE.json",
                 "tables/d/t/hours.json", "tables/d/t/hour=*", "*.json", "*", "*/*/*/*/*", "tables/d/t/hour=x[?]/*",
                 "tables/d/t/hour=2026-11-20T13/.*", "nothing/*", "tables/d/t/hour=2026-11-20T13/"]


def test_glob_is_the_base_definition_on_both_backends(store):
    """Whatever listing a backend's glob does, it finds what the base definition (walk the fixed
    folders, filter) finds: the same depth, hidden files never, hidden folders yes."""
    from kafka_landing.store.base import LandingStore

    for rel in GLOB_TREE:
        store.write_atomic(rel, b"x")
    for pattern in GLOB_PATTERNS:
        assert store.glob(pattern) == LandingStore.glob(store, pattern), pattern
    assert store.glob("tables/d/t/hour=*/_DONE.json") == ["tables/d/t/hour=2026-11-20T13/_DONE.json",
                                                          "tables/d/t/hour=2026-11-20T14/_DONE.json",
                                                          "tables/d/t/hour=x?/_DONE.json"]
    assert store.glob("tables/d/*/hour=1/*") == ["tables/d/.h/hour=1/_DONE.json"]
    assert store.glob("tables/d/t/hour=2026-11-20T13/.*") == []
    with pytest.raises(ValueError, match="escapes the landing root"):
        store.glob("../*")


def test_glob_stats_finds_what_glob_finds_with_each_files_size_and_write_time(store):
    """What the settled sensor decides by: the files a pattern names and when each was written, from
    the listing alone."""
    start = time.time()
    for rel in GLOB_TREE:
        store.write_atomic(rel, b"xyz")
    for pattern in GLOB_PATTERNS:
        got = store.glob_stats(pattern)
        assert [rel for rel, _, _ in got] == store.glob(pattern), pattern
        assert {size for _, size, _ in got} <= {3} and all(start - 5 < t < time.time() + 5 for _, _, t in got)
    with pytest.raises(ValueError, match="escapes the landing root"):
        store.glob_stats("../*")


def test_gcs_glob_lists_only_the_literal_prefix(gcs_store_factory):
    """N12: globbing a table's done files lists by the pattern's literal prefix (up to the first
    wildcard) and asks the bucket to match the glob itself (`matchGlob`; real GCS then returns only
    the done files, the emulator ignores it and the store filters), not every object of the table."""
    store = gcs_store_factory()
    hours = [f"2026-11-20T{h:02d}" for h in range(6)]
    for h in hours:
        store.write_atomic(f"tables/d/t/hour={h}/_DONE.json", b"{}")
        for i in range(4):
            store.write_atomic(f"tables/d/t/hour={h}/part-{i}.avro", b"x")
    for i in range(30):  # a table's other objects, and other tables
        store.write_atomic(f"tables/d/t/_schemas/s{i}.json", b"{}")
        store.write_atomic(f"tables/d/u/hour=2026-11-20T{i % 24:02d}/_DONE.json", b"{}")
    real = store.client

    class Counting:
        def __init__(self):
            self.calls, self.listed = [], 0

        def __getattr__(self, name):
            return getattr(real, name)

        def list_blobs(self, *args, **kwargs):
            self.calls.append(kwargs)
            for blob in real.list_blobs(*args, **kwargs):
                self.listed += 1
                yield blob

    store.client = counting = Counting()
    assert store.glob("tables/d/t/hour=*/_DONE.json") == [f"tables/d/t/hour={h}/_DONE.json" for h in hours]
    assert [(c.get("prefix"), c.get("match_glob")) for c in counting.calls] == [
        ("landing/tables/d/t/hour=", "landing/tables/d/t/hour=*/_DONE.json")]
    assert counting.listed <= 6 * 5  # under the prefix only (6 on GCS itself); not the 30 schemas nor table u
    counting.calls.clear()
    assert store.glob("tables/d/t/hour=2026-11-20T0[0-1]/_DONE.json") == [f"tables/d/t/hour={h}/_DONE.json"
                                                                         for h in hours[:2]]
    # A bracket or brace may mean something else to the bucket: the prefix only, the store filters.
    assert [(c.get("prefix"), c.get("match_glob")) for c in counting.calls] == [
        ("landing/tables/d/t/hour=2026-11-20T0", None)]


def test_first_frozen_hour_is_the_earliest_slice_by_hour(store):
    """Slice names sort as their hours do; temporary files, locks and other files are ignored."""
    for rel in ["slices/t/.plan.lock", "slices/t/.hour=2026-01-01T00.json.tmp", "slices/t/hour=2026-11-20T13.json",
                "slices/t/hour=2026-11-20T09.json", "slices/t/hour=2026-12-01T00.json", "slices/t2/hour=2025-01-01T00.json"]:
        store.write_atomic(rel, b"{}")
    assert first_frozen_hour(store, "t") == "2026-11-20T09"
    assert first_frozen_hour(store, "none") is None


# --- delete and sweep ------------------------------------------------------------


def test_delete_a_file_and_a_folder(store):
    for rel in ["s/a/1", "s/a/b/2", "s/ab/3", "s/a.json", "s/keep"]:
        store.write_atomic(rel, b"x")
    store.delete("s/a.json")
    assert not store.exists("s/a.json")
    store.delete("s/a")  # the folder and everything in it, not its namesake siblings
    assert store.walk("s") == ["s/ab/3", "s/keep"]
    store.delete("s/a")  # absent is fine
    store.delete("s/never/was")
    assert store.walk("s") == ["s/ab/3", "s/keep"]


def test_sweep_removes_only_what_is_old(store):
    for rel in ["st/hour=1/old-attempt/part.avro", "st/hour=2/old-attempt/part.avro",
                "st/hour=2/mixed-attempt/part.avro", "st/old-file.tmp"]:
        store.write_atomic(rel, b"x")
    time.sleep(1.2)
    # A killed attempt's folder is old; one still written to is young (its newest file is).
    store.write_atomic("st/hour=2/mixed-attempt/later.avro", b"x")
    store.write_atomic("st/hour=3/live-attempt/part.avro", b"x")
    store.write_atomic("st/new-file.tmp", b"x")
    removed = store.sweep("st", "hour=*/*", 1.0)
    assert sorted(removed) == ["st/hour=1/old-attempt", "st/hour=2/old-attempt"]
    assert store.walk("st") == ["st/hour=2/mixed-attempt/later.avro", "st/hour=2/mixed-attempt/part.avro",
                                "st/hour=3/live-attempt/part.avro", "st/new-file.tmp", "st/old-file.tmp"]
    assert store.sweep("st", "*.tmp", 1.0) == ["st/old-file.tmp"]
    assert store.sweep("st", "*.tmp", 1.0) == []
    assert store.sweep("absent", "*", 0) == []


def test_walk_stats_gives_each_files_size_and_when_it_was_written(store):
    """What Iceberg's upkeep decides on: sizes for what it reports, times for what is old enough."""
    store.write_atomic("w/a/1.parquet", b"xyz")
    time.sleep(1.2)
    start = time.time()
    store.write_atomic("w/a/b/2.parquet", b"x" * 10)
    store.write_atomic("w/a/.hidden.parquet", b"x")
    store.write_atomic("w/a/3.json", b"{}")
    got = store.walk_stats("w", ".parquet")
    assert [(rel, size) for rel, size, _ in got] == [("w/a/1.parquet", 3), ("w/a/b/2.parquet", 10)]
    (_, _, older), (_, _, newer) = got
    assert older < start - 0.5 < newer  # second precision on both; a local clock and the server's agree
    assert store.walk_stats("absent") == []


def test_check_writable(store):
    store.check_writable()
    assert store.walk("") == []  # the probe is gone


# --- lock ----------------------------------------------------------------------


def test_lock_is_held_by_one_thread_at_a_time(make_store):
    stores = [make_store() for _ in range(5)]  # as separate processes would each have their own
    inside, most, entries = [0], [0], []
    guard = threading.Lock()

    def worker(s, i: int) -> None:
        for _ in range(3):
            with s.lock("locks/t/hour=1.lock"):
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                    entries.append(i)
                time.sleep(0.02)
                with guard:
                    inside[0] -= 1

    threads = [threading.Thread(target=worker, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(entries) == 15
    assert most[0] == 1
    with stores[0].lock("locks/t/hour=1.lock"):  # free again afterwards
        pass


# --- a bucket's lock leases ------------------------------------------------------


def _lock_blob(gcs_client, bucket: str, rel: str):
    return gcs_client.bucket(bucket).get_blob(f"landing/{rel}")


def _plant_lock(gcs_client, bucket: str, rel: str, holder: str, lease: float) -> None:
    """A lock object as a holder leaves it when it is killed: nobody renews it any more."""
    blob = gcs_client.bucket(bucket).blob(f"landing/{rel}")
    blob.metadata = {"holder": holder, "lease_seconds": str(lease)}
    blob.upload_from_string(b"{}", if_generation_match=0)


def test_an_expired_lease_is_taken_over(gcs_store_factory, gcs_client, gcs_bucket):
    _plant_lock(gcs_client, gcs_bucket, "locks/x.lock", "dead-host:pid=1:abc", lease=1.0)
    expires = _lock_blob(gcs_client, gcs_bucket, "locks/x.lock").updated.timestamp() + 1.0
    store = gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    with store.lock("locks/x.lock"):
        acquired = time.time()
        holder = _lock_blob(gcs_client, gcs_bucket, "locks/x.lock").metadata["holder"]
        assert holder.startswith(f"{os.uname().nodename}:pid={os.getpid()}:")
    assert expires - 0.05 <= acquired < expires + 5  # when the lease ran out, not at the timeout
    assert _lock_blob(gcs_client, gcs_bucket, "locks/x.lock") is None  # released


def test_waiting_gives_up_with_a_message_naming_lock_holder_and_expiry(gcs_store_factory, gcs_client, gcs_bucket):
    _plant_lock(gcs_client, gcs_bucket, "locks/y.lock", "busy-host:pid=7:def", lease=3600)
    store = gcs_store_factory(**LEASE, wait_timeout_seconds=0.5)
    with pytest.raises(TimeoutError) as err, store.lock("locks/y.lock"):
        pass
    msg = str(err.value)
    assert f"gs://{gcs_bucket}/landing/locks/y.lock" in msg
    assert "busy-host:pid=7:def" in msg and "expires" in msg and "gcloud storage rm" in msg
    assert _lock_blob(gcs_client, gcs_bucket, "locks/y.lock").metadata["holder"] == "busy-host:pid=7:def"


def test_a_live_holder_keeps_the_lock_beyond_its_lease(gcs_store_factory):
    lease = dict(lease_seconds=1.5, renew_seconds=0.3)
    holder, waiter = gcs_store_factory(**lease), gcs_store_factory(**lease, wait_timeout_seconds=20)
    released_at, acquired_at, errors = [], [], []
    in_block = threading.Event()

    def hold():
        try:
            with holder.lock("locks/z.lock") as held:  # raises LockLost at exit if it was taken meanwhile
                in_block.set()
                time.sleep(3.2)  # over two leases
                held.fence()  # renewed all along: still ours
                released_at.append(time.monotonic())
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    t = threading.Thread(target=hold)
    t.start()
    in_block.wait(10)
    with waiter.lock("locks/z.lock"):
        acquired_at.append(time.monotonic())
    t.join()
    assert not errors
    assert acquired_at[0] >= released_at[0]


def test_a_holder_whose_lock_was_taken_over_says_so_and_leaves_the_new_lock(gcs_store_factory, gcs_client,
                                                                               gcs_bucket):
    from kafka_landing.store.gcs import LockLost

    store = gcs_store_factory(lease_seconds=2.0, renew_seconds=0.2)
    with pytest.raises(LockLost, match=f"gs://{gcs_bucket}/landing/locks/w.lock.*intruder"):
        with store.lock("locks/w.lock"):
            # What a waiter does once a lease has lapsed (e.g. renewals failed for a whole lease).
            blob = _lock_blob(gcs_client, gcs_bucket, "locks/w.lock")
            blob.metadata = {"holder": "intruder", "lease_seconds": "60"}
            blob.upload_from_string(b"{}", if_generation_match=blob.generation)
            time.sleep(1.2)  # a few renewals: the first one finds the intruder
    assert _lock_blob(gcs_client, gcs_bucket, "locks/w.lock").metadata["holder"] == "intruder"


def test_a_holder_that_lost_its_lock_is_fenced_before_it_commits(make_store):
    """N9: a holder whose lock went to someone else while it worked (on a bucket: its lease lapsed,
    renewals failing or the process paused, and a waiter took it over; on a local folder: the lock
    file was removed and a new holder locked the new one) gets LockLost at its next fence, before
    the commit it fences, and the new holder's lock is left alone."""
    from kafka_landing.store.gcs import LockLost

    holder = make_store(lease_seconds=1.0, renew_seconds=0.25)
    taker = make_store(wait_timeout_seconds=20)
    taken, finish, errors = threading.Event(), threading.Event(), []

    def take() -> None:
        try:
            if isinstance(taker, LocalStore):
                taker.delete("locks/f.lock")  # by hand, or a sweep: the next locker gets a new file
            with taker.lock("locks/f.lock") as theirs:
                taken.set()
                finish.wait(20)
                theirs.fence()  # still theirs: the holder that lost it neither renewed nor released it
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    with pytest.raises(LockLost, match="locks/f.lock"):
        with holder.lock("locks/f.lock") as held:
            held.fence()  # a live holder passes
            assert holder.create_exclusive("out/fresh.json", b"fenced, while held")
            if not isinstance(holder, LocalStore):
                def unreachable(*_a, **_kw):
                    raise ConnectionError("the bucket is unreachable from the holder")

                holder._write_lock = unreachable  # renewals fail from now on: the lease lapses
            t = threading.Thread(target=take)
            t.start()
            try:
                assert taken.wait(20), errors
                held.fence()
                holder.create_exclusive("out/stale.json", b"written without the lock")  # never reached
            finally:
                finish.set()
                t.join()
    assert not errors, errors
    assert not holder.exists("out/stale.json")
    assert holder.read_bytes("out/fresh.json") == b"fenced, while held"


def test_a_planner_stalled_past_its_lease_freezes_nothing(gcs_store_factory):
    """N9 end to end: a planner stalls inside the plan lock (a slow Kafka, a paused VM) while
    its renewals fail; another planner takes the lapsed lock over. The stalled one must not freeze
    its plan afterwards (it could leave a gap or an overlap with what the other froze)."""
    from kafka_landing.config import TopicConfig
    from kafka_landing.kafka_slices.freeze import freeze_slice
    from kafka_landing.naming import slice_dir, slice_manifest_path
    from kafka_landing.store.gcs import LockLost
    from kafka_landing_tests.mem_log import DATA, HOUR0, NOW, MemLog, at

    planner = gcs_store_factory(lease_seconds=1.0, renew_seconds=0.25)
    other = gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    cfg = TopicConfig("web", "w", table="events", grace_minutes=0, rows_per_task=10)
    lock = f"{slice_dir(cfg.topic)}/.plan.lock"
    taken, finish = threading.Event(), threading.Event()

    def take_over() -> None:
        with other.lock(lock):
            taken.set()
            finish.wait(20)

    class StalledLog(MemLog):
        def partitions(self, topic):
            def unreachable(*_a, **_kw):
                raise ConnectionError("the bucket is unreachable from the planner")

            planner._write_lock = unreachable
            threading.Thread(target=take_over, daemon=True).start()
            assert taken.wait(20)
            return super().partitions(topic)

    log = StalledLog({0: [(at(h, 5), DATA) for h in range(4)]})
    try:
        with pytest.raises(LockLost):
            freeze_slice(planner, log, cfg, HOUR0.plus(1), NOW)
        assert not planner.exists(slice_manifest_path(cfg.topic, HOUR0.plus(1)))
    finally:
        finish.set()


# --- a holder stalled between its check and its write (N9) -------------------------------------

STALE = dict(lease_seconds=1.0, renew_seconds=0.25)  # the holder that stalls: its lease lapses in a second


@contextlib.contextmanager
def stalled_at(request: str, name: str, meanwhile):
    """The first `request` ("upload", "delete" or "rewrite") the client sends for object `name` runs
    `meanwhile()` first: whoever makes it stalled right before it, after every check it made (a GC
    pause, a preempted VM). Yields a list that says whether it ran."""
    from google.cloud.storage import Blob

    method = {"upload": "upload_from_string", "delete": "delete", "rewrite": "rewrite"}[request]
    original, ran = getattr(Blob, method), []

    def stalled(self, *args, **kwargs):
        if self.name == name and not ran:
            ran.append(request)
            meanwhile()
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Blob, method, stalled)
        yield ran


def taken_over(stalled_store, lock: str, taker, then=None):
    """What happens while a holder of `lock` on `stalled_store` is stalled: its renewals stop too
    (the process is paused), its lease runs out, `taker` takes the lock over and, holding it, runs
    `then(held)`, then releases it. With no `then`: `taker` is a function that takes the lock itself."""

    def unreachable(*_a, **_kw):
        raise ConnectionError("the holder is stalled: no renewal leaves it")

    def meanwhile() -> None:
        stalled_store._write_lock = unreachable
        if then is None:
            taker()
            return
        with taker.lock(lock) as theirs:
            then(theirs)

    return meanwhile


def _says_taken_over(err, store, rel: str, lock: str) -> None:
    from kafka_landing.errors import is_transient
    from kafka_landing.store.base import LockTakenOver

    assert isinstance(err, LockTakenOver), repr(err)
    msg = str(err)
    assert store.location(rel) in msg and store.location(lock) in msg and "taken over by" in msg, msg
    assert not is_transient(err)  # terminal for this attempt: it does not write it again


def test_a_holder_stalled_between_its_check_and_its_write_leaves_the_next_holders_write(gcs_store_factory):
    """N9: the check passes, the holder stalls past its lease before the upload leaves, another holder
    takes the lock over and writes the same object. The stale upload is conditional on the version
    the holder checked: refused (by the emulator's own precondition), terminal, naming the object,
    the lock and the takeover; the next holder's write stands."""
    holder = gcs_store_factory(**STALE)
    taker = gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    lock, rel = "locks/s.lock", "out/s.json"
    holder.write_atomic(rel, b"before both")
    meanwhile = taken_over(holder, lock, taker, lambda theirs: theirs.write_atomic(rel, b"the next holder's"))
    with stalled_at("upload", f"landing/{rel}", meanwhile) as ran, pytest.raises(Exception) as err:
        with holder.lock(lock) as held:
            held.write_atomic(rel, b"the stale holder's")
    assert ran, "the write never stalled: the test tests nothing"
    assert holder.read_bytes(rel) == b"the next holder's"
    _says_taken_over(err.value, holder, rel, lock)


def test_a_holder_stalled_before_creating_what_the_next_holder_created_learns_it_lost_the_lock(gcs_store_factory):
    """create_exclusive under a lock creates only what is absent, as the store's: the next holder's
    object stays, and the stale holder is told why (False would say "someone was first")."""
    holder = gcs_store_factory(**STALE)
    taker = gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    lock, rel = "locks/c.lock", "out/c.json"
    meanwhile = taken_over(holder, lock, taker, lambda theirs: theirs.create_exclusive(rel, b"the next holder's"))
    with stalled_at("upload", f"landing/{rel}", meanwhile) as ran, pytest.raises(Exception) as err:
        with holder.lock(lock) as held:
            held.create_exclusive(rel, b"the stale holder's")
    assert ran and holder.read_bytes(rel) == b"the next holder's"
    _says_taken_over(err.value, holder, rel, lock)
    with taker.lock(lock) as held:  # an object that exists, made by no later holder: False, as ever
        assert held.create_exclusive(rel, b"again") is False


@pytest.mark.parametrize("request_", ["delete", "rewrite"])
def test_a_holder_stalled_before_a_delete_or_a_move_leaves_the_next_holders_object(strict_gcs_store_factory,
                                                                                   request_):
    """As above for a delete and a move (a rewrite onto the target), on a server that enforces their
    preconditions as GCS does (the emulator ignores them: `StrictPreconditions`)."""
    holder = strict_gcs_store_factory(**STALE)
    taker = strict_gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    lock, rel = "locks/d.lock", "out/d.avro"
    holder.write_atomic(rel, b"before both")
    holder.write_atomic("staging/mine.avro", b"the stale holder's")
    meanwhile = taken_over(holder, lock, taker, lambda theirs: theirs.write_atomic(rel, b"the next holder's"))
    with stalled_at(request_, f"landing/{rel}", meanwhile) as ran, pytest.raises(Exception) as err:
        with holder.lock(lock) as held:
            if request_ == "delete":
                held.delete(rel)
            else:
                held.move("staging/mine.avro", rel)
    assert ran, "the request never stalled: the test tests nothing"
    assert holder.read_bytes(rel) == b"the next holder's"
    _says_taken_over(err.value, holder, rel, lock)


def test_a_publisher_stalled_before_its_done_file_leaves_the_next_landing_of_the_hour(gcs_store_factory):
    """N9 end to end: attempt a1 publishes an hour, moves its files and stalls right before writing
    the done file; its lease lapses, attempt a2 re-lands the hour (taking the publish lock over) and
    publishes all of it. a1's done file must not replace a2's: a2's done file, marker and files stay."""
    from kafka_landing.avro_landing.publish import StagedHour, publish
    from kafka_landing.config import TopicConfig
    from kafka_landing.handoff.manifests import content_sha
    from kafka_landing.handoff.markers import TableHour, marker_path
    from kafka_landing.naming import done_file_path, hour_from_tag, publish_lock_path
    from kafka_landing_tests.unit.store.test_base import HOUR, NO_DEAD, PLAN, staged

    stale = gcs_store_factory(**STALE)
    other = gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    cfg = TopicConfig("web", "w", table="events")
    done = done_file_path("w", "events", hour_from_tag(HOUR))
    mine, theirs = [staged(stale, "events", "p0.avro", "a1")], [staged(other, "events", "p0.avro", "a2")]
    meanwhile = taken_over(stale, publish_lock_path("web", hour_from_tag(HOUR)),
                           lambda: publish(other, cfg, StagedHour(PLAN, theirs, [], NO_DEAD, 2, "a2")))
    with stalled_at("upload", f"landing/{done}", meanwhile) as ran, pytest.raises(Exception) as err:
        publish(stale, cfg, StagedHour(PLAN, mine, [], NO_DEAD, 2, "a1"))
    assert ran, "the publish never stalled: the test tests nothing"
    assert stale.read_json(done)["attempt"] == "a2"
    assert stale.read_json(marker_path(TableHour(HOUR, "w", "events")))["sha256"] == content_sha(stale.read_bytes(done))
    assert [stale.read_bytes(f["path"]) for f in stale.read_json(done)["files"]] == [b"avro bytes of a2"]
    _says_taken_over(err.value, stale, done, publish_lock_path("web", hour_from_tag(HOUR)))


def test_a_loader_stalled_before_clearing_a_marker_leaves_the_new_one(strict_gcs_store_factory):
    """N9, the loss it would be: a load saw marker content A and clears it under the table's pending
    lock, but stalls right before the delete; a re-land meanwhile takes the lock over and marks new
    content B. Deleting now would drop B's marker and B would never be loaded: the delete is refused."""
    from kafka_landing.handoff.manifests import content_sha
    from kafka_landing.handoff.markers import TableHour, clear_pending, mark_pending, marker_path
    from kafka_landing.naming import pending_lock_path

    loader = strict_gcs_store_factory(**STALE)
    publisher = strict_gcs_store_factory(**LEASE, wait_timeout_seconds=20)
    done = "tables/shop/orders/hour=2026-11-20T13/_DONE.json"
    marker = marker_path(TableHour("2026-11-20T13", "shop", "orders"))
    mark_pending(publisher, done, b"A")
    meanwhile = taken_over(loader, pending_lock_path("shop", "orders"), lambda: mark_pending(publisher, done, b"B"))
    with stalled_at("delete", f"landing/{marker}", meanwhile) as ran, pytest.raises(Exception) as err:
        clear_pending(loader, done, content_sha(b"A"))
    assert ran, "the clear never stalled: the test tests nothing"
    assert loader.read_json(marker)["sha256"] == content_sha(b"B")
    _says_taken_over(err.value, loader, marker, pending_lock_path("shop", "orders"))


HOLDER_SCRIPT = """
import sys, time
from kafka_landing.store.gcs import GcsStore
store = GcsStore(sys.argv[1], lease_seconds=2.0, renew_seconds=0.5)
with store.lock("locks/k.lock"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_lock_whose_holder_was_killed_is_taken_over_after_the_lease(gcs_store_factory, gcs_client, gcs_bucket):
    from kafka_landing.store.gcs import LockTimeout

    child = subprocess.Popen([sys.executable, "-c", HOLDER_SCRIPT, f"gs://{gcs_bucket}/landing"],
                             stdout=subprocess.PIPE, text=True, env={**os.environ})
    try:
        assert child.stdout.readline().strip() == "held"
        # Alive, it renews: a waiter longer than the lease still does not get it.
        with pytest.raises(LockTimeout, match=f"pid={child.pid}"), \
                gcs_store_factory(**LEASE, wait_timeout_seconds=3.0).lock("locks/k.lock"):
            pass
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        assert f"pid={child.pid}" in _lock_blob(gcs_client, gcs_bucket, "locks/k.lock").metadata["holder"]
        t0 = time.monotonic()
        with gcs_store_factory(**LEASE, wait_timeout_seconds=30).lock("locks/k.lock"):
            waited = time.monotonic() - t0
        assert waited < 2.0 + 3, waited  # one lease after the last renewal, and some polling
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# --- a bucket's own --------------------------------------------------------------


def test_gcs_root_sees_only_its_own_prefix(gcs_store_factory, gcs_client, gcs_bucket):
    gcs_client.bucket(gcs_bucket).blob("landing-other/a.json").upload_from_string(b"x")
    store = gcs_store_factory()
    store.write_atomic("a.json", b"y")
    store.write_atomic("dir/b.json", b"y")
    assert store.root == f"gs://{gcs_bucket}/landing"
    assert store.walk("") == ["a.json", "dir/b.json"] and store.list("") == ["a.json"] and store.subdirs("") == ["dir"]
    store.delete("")
    assert [b.name for b in gcs_client.list_blobs(gcs_bucket)] == ["landing-other/a.json"]


def test_gcs_check_writable_names_the_bucket(gcs_emulator, gcs_client):
    from kafka_landing.store.gcs import GcsStore

    store = GcsStore(f"gs://no-such-bucket-{uuid.uuid4().hex[:8]}/x", client=gcs_client)
    with pytest.raises(OSError, match=f"gs://{store.bucket_name}.*does not exist"):
        store.check_writable()


def test_gcs_check_writable_names_the_role_and_credentials_when_refused():
    """What GCS answers a principal without write access (the emulator has no IAM): a 403."""
    import http.server

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from kafka_landing.store.gcs import GcsStore

    class Refuse(http.server.BaseHTTPRequestHandler):
        def _refuse(self):
            body = json.dumps({"error": {"code": 403, "message": "lander@p.iam.gserviceaccount.com does not have "
                                         "storage.objects.create access to the Google Cloud Storage object."}}).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _refuse

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = storage.Client(project="p", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": f"http://127.0.0.1:{server.server_port}"})
        store = GcsStore("gs://prod-landing/root", client=client)
        with pytest.raises(OSError) as err:
            store.check_writable()
    finally:
        server.shutdown()
    msg = str(err.value)
    assert "gs://prod-landing/root" in msg and "roles/storage.objectAdmin" in msg and "gs://prod-landing" in msg
    assert "storage.objects.create" in msg and "the storage client passed in" in msg


def _service_account_key() -> dict:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return {"type": "service_account", "project_id": "lander-project", "private_key_id": "k1", "private_key": pem,
            "client_email": "lander@lander-project.iam.gserviceaccount.com", "client_id": "1",
            "token_uri": "https://oauth2.googleapis.com/token"}


@pytest.fixture
def no_emulator(monkeypatch, tmp_path):
    """As in production: no emulator, no ambient credentials (nor a metadata server to ask)."""
    for var in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))


def test_a_service_account_key_is_read_as_json_or_base64(no_emulator):
    import base64

    from kafka_landing.store.gcs import GcsStore

    key = _service_account_key()
    for text in (json.dumps(key), base64.b64encode(json.dumps(key).encode()).decode()):
        store = GcsStore("gs://landing-bucket/root", credentials=text)
        assert store.client._credentials.service_account_email == key["client_email"]
        assert store.client.project == "lander-project"
        assert key["client_email"] in store.credentials_source and "PRIVATE" not in store.credentials_source


def test_bad_credentials_are_refused_without_quoting_them(no_emulator):
    from kafka_landing.store.gcs import GcsStore

    for bad in ["SECRET-MATERIAL not a key", '{"private_key": "SECRET-MATERIAL", cut off',
                json.dumps({"type": "authorized_user", "refresh_token": "SECRET-MATERIAL"}),
                json.dumps({**_service_account_key(), "private_key": "-----BEGIN PRIVATE KEY-----\nSECRET-MATERIAL"})]:
        with pytest.raises(ValueError) as err:
            GcsStore("gs://landing-bucket/root", credentials=bad)
        assert "SECRET" not in str(err.value) and "service-account key" in str(err.value)
    with pytest.raises(OSError, match="gs://landing-bucket/root.*Application Default Credentials"):
        GcsStore("gs://landing-bucket/root")  # and none to be found


# --- both backends agree on any sequence of changes ------------------------------

DIRS = ["", "d1", "d1/d2", "d3"]
NAMES = ["f1", "f2", ".h"]  # never a folder's name: a local folder cannot also be a file
PATHS = [f"{d}/{n}" if d else n for d in DIRS for n in NAMES]
OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), st.binary(max_size=8)),
    st.tuples(st.just("create"), st.sampled_from(PATHS), st.binary(max_size=8)),
    st.tuples(st.just("move"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
    st.tuples(st.just("delete"), st.sampled_from(PATHS + DIRS[1:]), st.none()),
)


def _apply(store, op):
    kind, a, b = op
    try:
        if kind == "write":
            return store.write_atomic(a, b)
        if kind == "create":
            return store.create_exclusive(a, b)
        if kind == "move":
            return store.move(a, b)
        return store.delete(a)
    except FileNotFoundError:
        return "missing"


def _view(store) -> dict:
    """Everything a reader can see. Folders only where files are: a local folder stays after
    its last file goes, a bucket prefix does not."""
    return {
        "walk": store.walk(""), "content": {r: store.read_bytes(r) for r in store.walk("")},
        "list": {d: store.list(d) for d in DIRS}, "glob": store.glob("*/*"),
        "subdirs": {d: [s for s in store.subdirs(d) if store.walk(f"{d}/{s}" if d else s)] for d in DIRS},
        "exists": {p: store.exists(p) for p in PATHS},
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=10))
def test_local_and_gcs_agree_on_any_sequence(gcs_client, gcs_bucket, ops):
    from kafka_landing.store.gcs import GcsStore

    with tempfile.TemporaryDirectory() as tmp:
        local = LocalStore(Path(tmp) / "landing")
        gcs = GcsStore(f"gs://{gcs_bucket}/p-{uuid.uuid4().hex[:10]}", client=gcs_client)
        for op in ops:
            assert _apply(local, op) == _apply(gcs, op), op
        assert _view(local) == _view(gcs)
