"""N9 without a server: a bucket lock fences the write itself. A holder stalled between its checks
and its write (the request about to leave) while another holder took the lock over and wrote the
same object is refused by the object's own precondition, and told who took over; a write of an
object only earlier holders (or no holder) wrote goes through. The bucket is an in-memory fake
that keeps GCS's precondition rules atomically (the emulator, in integration/test_store_contract.py,
ignores them on deletes and rewrites); a takeover is written as a waiter writes it once a lease
lapsed, so no test waits for one."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timezone

import pytest
from google.api_core import exceptions as gexc

from kafka_landing.errors import is_transient
from kafka_landing.store.base import LockLost, LockTakenOver
from kafka_landing.store.gcs import FENCE_HOLDER, FENCE_LOCK, FENCE_TOKEN, GcsStore, WriteContended, _HeldLock

LOCK, REL = "locks/t.lock", "out/x.json"


class FakeBucket:
    """Objects by name, each (data, generation, metadata, content type); one lock makes each request's
    check and change one step, as on GCS. `before[(request, name)]` runs right before that request."""

    def __init__(self):
        self.objects: dict[str, tuple[bytes, int, dict, str | None]] = {}
        self.generations = itertools.count(1_000_000)
        self.guard = threading.RLock()
        self.before: dict[tuple[str, str], list] = {}

    def blob(self, name: str) -> FakeBlob:
        return FakeBlob(self, name)

    def get_blob(self, name: str) -> FakeBlob | None:
        with self.guard:
            if name not in self.objects:
                return None
            data, gen, meta, ctype = self.objects[name]
            blob = FakeBlob(self, name)
            blob.generation, blob.metadata, blob.content_type = gen, dict(meta), ctype
            blob.updated = datetime.now(timezone.utc)
            return blob

    def stall(self, request: str, name: str, meanwhile) -> None:
        """The next such request not made by a `meanwhile` runs `meanwhile()` first (one per request)."""
        self.before.setdefault((request, name), []).append(meanwhile)

    def _stalled(self, request: str, name: str) -> None:
        waiting = self.before.get((request, name))
        if not waiting or getattr(self, "_meanwhile", False):
            return
        meanwhile = waiting.pop(0)
        if not waiting:
            del self.before[(request, name)]
        self._meanwhile = True
        try:
            meanwhile()
        finally:
            self._meanwhile = False

    def _holds(self, name: str, want: int | None) -> None:
        if want is not None and (self.objects[name][1] if name in self.objects else 0) != want:
            raise gexc.PreconditionFailed("At least one of the pre-conditions you specified did not hold.")


class FakeBlob:
    def __init__(self, bucket: FakeBucket, name: str):
        self.bucket, self.name = bucket, name
        self.generation, self.metadata, self.content_type, self.updated = None, None, None, None

    def upload_from_string(self, data, content_type=None, if_generation_match=None, **_request):
        self.bucket._stalled("upload", self.name)
        with self.bucket.guard:
            self.bucket._holds(self.name, if_generation_match)
            self.generation = next(self.bucket.generations)
            self.bucket.objects[self.name] = (bytes(data), self.generation, dict(self.metadata or {}), content_type)

    def exists(self, **_request) -> bool:
        return self.name in self.bucket.objects

    def download_as_bytes(self, **_request) -> bytes:
        with self.bucket.guard:
            if self.name not in self.bucket.objects:
                raise gexc.NotFound(self.name)
            return self.bucket.objects[self.name][0]

    def delete(self, if_generation_match=None, **_request):
        self.bucket._stalled("delete", self.name)
        with self.bucket.guard:
            if self.name not in self.bucket.objects:
                raise gexc.NotFound(self.name)
            self.bucket._holds(self.name, if_generation_match)
            del self.bucket.objects[self.name]

    def rewrite(self, source, token=None, if_generation_match=None, if_source_generation_match=None, **_request):
        self.bucket._stalled("rewrite", self.name)
        with self.bucket.guard:
            self.bucket._holds(source.name, if_source_generation_match)
            self.bucket._holds(self.name, if_generation_match)
            data, _, meta, ctype = self.bucket.objects[source.name]
            self.bucket.objects[self.name] = (data, next(self.bucket.generations), dict(self.metadata or meta),
                                              self.content_type or ctype)
            return None, len(data), len(data)


class FakeClient:
    def __init__(self):
        self.the_bucket = FakeBucket()

    def bucket(self, _name: str) -> FakeBucket:
        return self.the_bucket

    def list_blobs(self, bucket: FakeBucket, prefix: str = "", **_kw):
        with bucket.guard:
            return [bucket.get_blob(n) for n in sorted(bucket.objects) if n.startswith(prefix)]


@pytest.fixture
def client():
    return FakeClient()


def store(client, **kw) -> GcsStore:
    # Leases long enough that no renewal runs in a test: takeovers are written by hand.
    return GcsStore("gs://b/landing", client=client, **{"lease_seconds": 3600, **kw})


def take_over(s: GcsStore, holder: str = "the-next-holder") -> _HeldLock:
    """What a waiter does once the lease lapsed: write the lock object over the version it saw. The
    held lock it then has (its renewals not started: nothing renews in a test)."""
    name = s._name(LOCK)
    return _HeldLock(s, name, holder, s._write_lock(name, holder, s._current_lease(name).generation))


def stale_write(client, request: str, rel: str, write, meanwhile) -> BaseException:
    """A holder's `write(held)` whose `request` on `rel` stalls first while `meanwhile()` runs; the
    error it ends with (the test fails if it ends without one)."""
    s = store(client)
    client.the_bucket.stall(request, s._name(rel), meanwhile)
    with pytest.raises(Exception) as err:
        with s.lock(LOCK) as held:
            write(held)
    assert not client.the_bucket.before, "the request never stalled: the test tests nothing"
    return err.value


def _taken_over_naming(err: BaseException, s: GcsStore, rel: str) -> None:
    assert isinstance(err, LockTakenOver) and isinstance(err, LockLost), repr(err)
    assert not is_transient(err)
    msg = str(err)
    assert s.location(rel) in msg and s.location(LOCK) in msg and "taken over by the-next-holder" in msg, msg


def test_a_write_stalled_past_a_takeover_leaves_the_next_holders_and_says_so(client):
    s = store(client)
    s.write_atomic(REL, b"before both")
    err = stale_write(client, "upload", REL, lambda held: held.write_atomic(REL, b"stale"),
                      lambda: take_over(s).write_atomic(REL, b"the next holder's"))
    assert s.read_bytes(REL) == b"the next holder's"
    _taken_over_naming(err, s, REL)


@pytest.mark.parametrize("request_", ["delete", "rewrite"])
def test_a_delete_or_a_move_stalled_past_a_takeover_leaves_the_next_holders(client, request_):
    s = store(client)
    s.write_atomic(REL, b"before both")
    s.write_atomic("staging/mine", b"stale")

    def write(held):
        held.delete(REL) if request_ == "delete" else held.move("staging/mine", REL)

    err = stale_write(client, request_, REL, write, lambda: take_over(s).write_atomic(REL, b"the next holder's"))
    assert s.read_bytes(REL) == b"the next holder's"
    _taken_over_naming(err, s, REL)


def test_a_create_stalled_past_a_takeover_is_told_who_made_the_object(client):
    s = store(client)
    err = stale_write(client, "upload", REL, lambda held: held.create_exclusive(REL, b"stale"),
                      lambda: take_over(s).create_exclusive(REL, b"the next holder's"))
    assert s.read_bytes(REL) == b"the next holder's"
    _taken_over_naming(err, s, REL)


def test_a_holder_writes_over_what_earlier_holders_and_writers_outside_the_lock_wrote(client):
    """Only a later holder's write stops a holder: its own, an earlier holder's, another lock's and an
    unlocked write are replaced (conditionally), stamped with this lock and holder."""
    s = store(client)
    with s.lock(LOCK) as earlier:
        earlier.write_atomic("a", b"earlier holder")
    with s.lock("locks/other.lock") as other:
        other.write_atomic("b", b"another lock's holder")
    s.write_atomic("c", b"no lock")
    with s.lock(LOCK) as held:
        for rel in "abc":
            held.write_atomic(rel, b"mine")
            held.write_atomic(rel, b"mine again")  # its own write
        held.move("a", "d")
        held.delete("b")
    assert [s.read_bytes(rel) for rel in "cd"] == [b"mine again"] * 2 and not s.exists("b")
    meta = client.the_bucket.get_blob(s._name("c")).metadata
    assert meta[FENCE_LOCK] == s._name(LOCK) and meta[FENCE_HOLDER] == held.holder
    assert int(meta[FENCE_TOKEN]) == held.token


def test_a_write_whose_object_keeps_changing_outside_the_lock_gives_up_transient(client):
    s = store(client)
    s.write_atomic(REL, b"0")
    for i in range(10):  # each of its attempts finds another unlocked write made meanwhile
        client.the_bucket.stall("upload", s._name(REL), lambda i=i: s.write_atomic(REL, str(i).encode()))
    with pytest.raises(WriteContended, match="changed 5 times") as err, s.lock(LOCK) as held:
        held.write_atomic(REL, b"mine")
    assert is_transient(err.value) and s.read_bytes(REL) != b"mine"


def test_a_write_answered_412_for_its_own_retried_request_is_written_again(client):
    """The client retries an upload whose answer was lost; the retry finds its own write and gets 412:
    the write is still this holder's to make (its own stamp), and is made."""
    s = store(client)
    with s.lock(LOCK) as held:
        client.the_bucket.stall("upload", s._name(REL), lambda: held.write_atomic(REL, b"mine"))
        held.write_atomic(REL, b"mine")
    assert s.read_bytes(REL) == b"mine"


def test_a_holder_that_lost_its_lock_to_a_takeover_stops_before_anything_untouched(client):
    """The lock's own check still comes first: an object no later holder wrote is not written either,
    and the error (transient: nothing of this holder's overlapped the next holder's) says why."""
    s = store(client)
    with pytest.raises(LockLost, match="taken over by the-next-holder") as err, s.lock(LOCK) as held:
        take_over(s)
        held.write_atomic(REL, b"stale")
    assert not s.exists(REL) and is_transient(err.value)
