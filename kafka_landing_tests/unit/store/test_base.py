"""N9: every change a lock protects is fenced. Publishing an hour, freezing a slice, the load queue
and the BigQuery ledger make each create, replace or delete under a lock through the held lock
(`held.write_atomic`, `create_exclusive`, `move`, `delete`), which checks the lock first (recorded
here as a fence right before the commit), so a holder that lost the lock meanwhile stops before
its next commit. On a bucket the write itself is conditional too: a holder stalled between the
check and the write is refused (unit/store/test_gcs.py; on the emulator and end to end,
integration/test_store_contract.py)."""

from __future__ import annotations

import contextlib

import pytest

from kafka_landing.avro_landing.publish import StagedHour, publish
from kafka_landing.avro_landing.write import Staged
from kafka_landing.config import TopicConfig
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan
from kafka_landing.handoff.manifests import DeadLetters, LandedFile
from kafka_landing.naming import dead_letter_dir, done_file_path, hour_from_tag, table_hour_dir
from kafka_landing.store.base import HeldLock, LockLost
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.mem_log import DATA, HOUR0, NOW, MemLog, at

HOUR = "2026-11-20T13"
PLAN = SlicePlan("web", HOUR, "x", 0, 10, (PartitionSlice(0, 5, 7, 0, 7, "timestamp", "timestamp"),), ())
NO_DEAD = DeadLetters(rows=0, by_reason={}, files=())


class Recording(LocalStore):
    """A local folder that records lock entries and exits, fences and commits, in order."""

    def __init__(self, root):
        super().__init__(root)
        self.events: list[tuple[str, ...]] = []
        self.lose_after_fences: int | None = None  # the lock is lost after this many fences passed

    @contextlib.contextmanager
    def lock(self, rel):
        with super().lock(rel) as held:
            self.events.append(("enter", rel))
            try:
                yield _Probe(self, held)
            finally:
                self.events.append(("exit", rel))

    def _commit(self, op: str, rel: str) -> None:
        self.events.append(("commit", op, rel))

    def write_atomic(self, rel, data):
        self._commit("write", rel)
        super().write_atomic(rel, data)

    def create_exclusive(self, rel, data):
        self._commit("create", rel)
        return super().create_exclusive(rel, data)

    def move(self, src_rel, rel):
        self._commit("move", rel)
        super().move(src_rel, rel)

    def delete(self, rel):
        self._commit("delete", rel)
        super().delete(rel)


class _Probe(HeldLock):
    """The held lock, its check recorded: its writes are the base ones (the check, then the store's write)."""

    def __init__(self, store: Recording, held):
        self.store, self.held = store, held

    def fence(self) -> None:
        passed = sum(e[0] == "fence" for e in self.store.events)
        if self.store.lose_after_fences is not None and passed >= self.store.lose_after_fences:
            raise LockLost("lost (simulated)")
        self.held.fence()
        self.store.events.append(("fence",))


def unfenced(events, lock_prefix: str) -> list[tuple[str, ...]]:
    """Commits made while the innermost lock held is one of `lock_prefix` with anything but a
    fence just before them (reads in between are not recorded: they change nothing)."""
    held, prev, bad = [], None, []
    for e in events:
        if e[0] == "enter":
            held.append(e[1])
        elif e[0] == "exit":
            held.pop()
        elif e[0] == "commit" and held and held[-1].startswith(lock_prefix) and prev != "fence":
            bad.append(e)
        prev = e[0]
    return bad


def staged(store, table: str, name: str, attempt: str = "att") -> Staged:
    """A file of `attempt` staged for publishing as `name` of `table` in PLAN's hour (any store)."""
    rel = f"{table_hour_dir('w', table, hour_from_tag(HOUR))}/{name}"
    src = f"staging/web/hour={HOUR}/{attempt}/{table}-{name}"
    store.write_atomic(src, f"avro bytes of {attempt}".encode())
    return Staged(src, rel, LandedFile(rel, 1, 10, 0, 5, 5, 1), HOUR, table)


def _land_then_reland(store: Recording) -> None:
    """A first landing fed table `old` (and left a file the re-land does not list in `events`);
    the re-land feeds `events` only: moves, manifest, done file, retiring `old`, removals."""
    old = [staged(store, "old", "p0.avro")]
    publish(store, TopicConfig("web", "w", table="old"), StagedHour(PLAN, old, [], NO_DEAD, 2, "a1"))
    store.write_atomic(f"{table_hour_dir('w', 'events', hour_from_tag(HOUR))}/stale.avro", b"x")
    good = [staged(store, "events", "p0.avro"), staged(store, "events", "p1.avro")]
    store.events.clear()
    publish(store, TopicConfig("web", "w", table="events"), StagedHour(PLAN, good, [], NO_DEAD, 2, "a2"))


def test_every_commit_of_publish_is_fenced(tmp_path):
    store = Recording(tmp_path)
    _land_then_reland(store)
    commits = [e for e in store.events if e[0] == "commit"]
    kinds = {(op, rel.rsplit("/", 1)[-1]) for _, op, rel in commits}
    # The re-land made every kind of commit publish makes: the test would miss none.
    assert {("move", "p0.avro"), ("write", "_MANIFEST.json"), ("write", "_DONE.json"), ("delete", "stale.avro"),
            ("delete", "p0.avro")} <= kinds, kinds
    assert not unfenced(store.events, "locks/web/"), store.events
    assert store.read_json(done_file_path("w", "old", hour_from_tag(HOUR)))["retired"]


def test_a_publisher_that_lost_its_lock_stops_before_its_next_commit(tmp_path):
    store = Recording(tmp_path)
    good = [staged(store, "events", "p0.avro"), staged(store, "events", "p1.avro")]
    store.lose_after_fences = 1  # lost while moving: the second file and everything after stay unpublished
    with pytest.raises(LockLost):
        publish(store, TopicConfig("web", "w", table="events"), StagedHour(PLAN, good, [], NO_DEAD, 2, "a1"))
    hour_dir = table_hour_dir("w", "events", hour_from_tag(HOUR))
    assert store.list(hour_dir) == [f"{hour_dir}/p0.avro"]
    assert not store.exists(done_file_path("w", "events", hour_from_tag(HOUR)))
    assert not store.exists(dead_letter_dir("web", hour_from_tag(HOUR)))


def test_freezing_a_slice_is_fenced(tmp_path):
    store = Recording(tmp_path)
    cfg = TopicConfig("t", "w", table="events", grace_minutes=0, rows_per_task=10)
    log = MemLog({0: [(at(h, 5), DATA) for h in range(4)]})
    plan, froze = freeze_slice(store, log, cfg, HOUR0.plus(1), NOW)
    assert froze and [e for e in store.events if e[0] == "commit"]
    assert not unfenced(store.events, "slices/t/"), store.events
    store.lose_after_fences = 0
    with pytest.raises(LockLost):
        freeze_slice(store, log, cfg, HOUR0.plus(2), NOW)
    assert store.list("slices/t") == [f"slices/t/hour={HOUR0.plus(1)}.json"]


# --- the load queue and the BigQuery ledger ----------------------------------------------------

def test_every_commit_of_the_load_queue_is_fenced(tmp_path):
    """mark_pending (also what publish calls under the hour lock: the table lock is the innermost),
    refuse, give_up and clear_pending fence each marker (and refusal record) write and delete."""
    from kafka_landing.handoff.markers import (
        Marks,
        TableHour,
        clear_pending,
        content_sha,
        give_up,
        given_up_path,
        mark_pending,
        marker_path,
        refusal,
        refuse,
    )
    from kafka_landing.naming import refusal_path

    store = Recording(tmp_path)
    done, th = "tables/shop/orders/hour=2026-11-20T13/_DONE.json", TableHour("2026-11-20T13", "shop", "orders")
    marker, aside, refused = marker_path(th), given_up_path(th), refusal_path(th.kind, th.dataset, th.table, th.hour)

    def marks(content: bytes) -> Marks:
        return Marks({th.hour: content_sha(content)})

    mark_pending(store, done, b"A")
    assert give_up(store, th, marks(b"A"), content_sha(b"A"), "tried enough")
    refuse(store, th, marks(b"A"), "bad data")  # of the load given up on (its record beside the markers)
    assert refusal(store, th, marks(b"A")).why == "bad data"
    mark_pending(store, done, b"B")  # new content: the marker given up on and the refusal go
    assert refusal(store, th, marks(b"A")) is None
    refuse(store, th, marks(b"B"), "bad data")
    assert refusal(store, th, marks(b"B")).why == "bad data"
    assert give_up(store, th, marks(b"B"), content_sha(b"B"), "tried enough")
    mark_pending(store, done, b"C")
    assert give_up(store, th, marks(b"C"), content_sha(b"C"), "tried enough")
    mark_pending(store, done, b"D")
    store.write_atomic(aside, b"{}")  # outside the lock: a marker given up on beside the pending one
    assert clear_pending(store, done, content_sha(b"D"))  # removes both

    commits = [e for e in store.events if e[0] == "commit"]
    kinds = {(op, rel) for _, op, rel in commits}
    assert {("write", marker), ("write", aside), ("delete", marker), ("delete", aside),
            ("write", refused), ("delete", refused)} <= kinds, kinds
    assert not unfenced(store.events, "locks/pending_loads/"), store.events
    assert not store.exists(marker) and not store.exists(aside)


def test_a_publish_fences_its_pending_marker_under_the_table_lock(tmp_path):
    store = Recording(tmp_path)
    _land_then_reland(store)
    assert ("enter", "locks/pending_loads/w/events.lock") in store.events
    assert not unfenced(store.events, "locks/"), store.events


@pytest.mark.parametrize("lost_at", ["clear", "mark"])
def test_a_marker_change_whose_lock_was_lost_stops_before_it_commits(tmp_path, lost_at):
    """The flock's file is removed while clear_pending (mark_pending) holds it, as a sweep or a
    person would: someone else may lock the new file now, so the marker is neither deleted nor
    replaced (nor the marker given up on deleted)."""
    from kafka_landing.handoff.markers import TableHour, clear_pending, content_sha, given_up_path, mark_pending, marker_path

    done, th = "tables/shop/orders/hour=2026-11-20T13/_DONE.json", TableHour("2026-11-20T13", "shop", "orders")
    marker, aside = marker_path(th), given_up_path(th)

    class LosesItsLock(LocalStore):
        armed = False
        holding = False  # a call made before the lock is taken (clear_pending looks first) loses nothing

        @contextlib.contextmanager
        def lock(self, rel):
            with super().lock(rel) as held:
                self.holding = True
                try:
                    yield held
                finally:
                    self.holding = False

        def _lose(self):
            if self.armed and self.holding:
                (tmp_path / "locks/pending_loads/shop/orders.lock").unlink()
                self.armed = False

        def exists(self, rel):  # mark_pending and clear_pending both read before (or between) commits
            self._lose()
            return super().exists(rel)

        def read_bytes(self, rel):
            self._lose()
            return super().read_bytes(rel)

    store = LosesItsLock(tmp_path)
    mark_pending(store, done, b"A")
    store.write_atomic(aside, b'{"sha256": "old"}')
    before = {rel: store.read_bytes(rel) for rel in (marker, aside)}
    store.armed = True
    with pytest.raises(LockLost, match="orders.lock was removed"):
        if lost_at == "clear":
            clear_pending(store, done, content_sha(b"A"))
        else:
            mark_pending(store, done, b"B")
    assert not store.armed, "the lock was never lost: the test tests nothing"
    after = {rel: store.read_bytes(rel) for rel in (marker, aside)}
    if lost_at == "mark":  # lost after the marker was written (its fence passed), before the delete
        assert after[marker] != before[marker] and after[aside] == before[aside]
    else:
        assert after == before


class _GsRecording(Recording):
    """A recording local folder that calls itself gs://unit (what BigQuery loads from)."""

    def __init__(self, root):
        super().__init__(root)
        self.root = "gs://unit"

    def location(self, rel):
        return f"gs://unit/{self.check_rel(rel)}"


@pytest.fixture
def bq(tmp_path):
    from kafka_landing_tests.bigquery_fake import FakeBigQuery

    store, broken = _GsRecording(tmp_path), set()

    def read_object(uri):
        path = tmp_path / uri[len("gs://unit/"):]
        if uri in broken or not path.is_file():
            raise FileNotFoundError(uri)
        return path.read_bytes()

    fake = FakeBigQuery(read_object)
    fake.start()
    yield store, fake, broken
    fake.stop()


def _recording_warehouse(store, fake):
    """The warehouse, its BigQuery side effects (a load job started, a partition deleted) recorded as commits."""
    from kafka_landing.warehouse.bigquery.jobs import JobLimits
    from kafka_landing_tests.bigquery_support import bigquery_warehouse
    from kafka_landing_tests.unit.warehouse.bigquery.test_ledger import PROJECT

    wh = bigquery_warehouse(fake, store, PROJECT, limits=JobLimits(timeout_seconds=30))
    client = wh.client
    load, delete = client.load_table_from_uri, client.delete_table

    def load_table_from_uri(uris, destination, **kw):
        store._commit("bq-load", str(destination))
        return load(uris, destination, **kw)

    def delete_table(table, **kw):
        store._commit("bq-delete", str(table))
        return delete(table, **kw)

    client.load_table_from_uri, client.delete_table = load_table_from_uri, delete_table
    return wh


def test_every_commit_of_a_bigquery_load_is_fenced(bq):
    """Under the hour's ledger lock: the ledger's running job, the load job, the ledger's record, a
    failed job's running entry removed, an empty hour's partition delete: each right after a fence."""
    from kafka_landing.warehouse.load import LoadError, load_done_file
    from kafka_landing_tests.bigquery_support import NO_SPARK
    from kafka_landing_tests.unit.warehouse.bigquery.test_ledger import LEDGER, land

    store, fake, broken = bq
    wh = _recording_warehouse(store, fake)
    first = land(store, 0, ["o0", "o1"])
    broken.add(store.location(store.read_json(first)["files"][0]["path"]))
    with pytest.raises(LoadError, match="failed"):
        load_done_file(wh, store, first, NO_SPARK)  # the job fails: the ledger's running entry goes again
    assert not store.exists(LEDGER)
    broken.clear()
    load_done_file(wh, store, land(store, 1, ["o2", "o3"]), NO_SPARK)
    load_done_file(wh, store, land(store, 2, []), NO_SPARK)  # an empty re-land: the partition is deleted

    commits = [e for e in store.events if e[0] == "commit"]
    kinds = {(op, rel) for _, op, rel in commits}
    assert {("write", LEDGER), ("delete", LEDGER)} <= kinds, kinds
    assert {op for op, _ in kinds} >= {"bq-load", "bq-delete"}, kinds
    assert not unfenced(store.events, "locks/warehouse_loads/"), store.events
    assert store.read_json(LEDGER)["deleted_partition"]


def test_a_loader_that_lost_its_ledger_lock_starts_no_job(bq):
    from kafka_landing.warehouse.load import load_done_file
    from kafka_landing_tests.bigquery_support import NO_SPARK
    from kafka_landing_tests.unit.warehouse.bigquery.test_ledger import LEDGER, land

    store, fake, _ = bq
    wh = _recording_warehouse(store, fake)
    done = land(store, 0, ["o0", "o1"])
    store.lose_after_fences = 3  # the job is counted (a sweep, the count) and recorded running, then the lock is lost
    with pytest.raises(LockLost):
        load_done_file(wh, store, done, NO_SPARK)
    assert fake.jobs == {} and not any(e[1].startswith("bq-") for e in store.events if e[0] == "commit")
    assert "running_job" in store.read_json(LEDGER)  # what the next loader waits for: harmless, no such job
