"""N9: every change a lock protects is fenced. Publishing an hour and freezing a slice call the
held lock's `fence()` right before each create, replace or delete they make under it, so a
holder that lost the lock meanwhile stops before its next commit (the stall itself, on a
bucket and a local folder, is tested in integration/test_store_contract.py)."""

from __future__ import annotations

import contextlib

import pytest

from kafka_landing.avro_landing.publish import publish
from kafka_landing.avro_landing.write import Staged
from kafka_landing.config import TopicConfig
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan
from kafka_landing.manifests import DeadLetters, LandedFile
from kafka_landing.naming import ONE_HOUR, dead_letter_dir, done_file_path, hour_from_tag, table_hour_dir
from kafka_landing.store.base import LockLost
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.unit.test_planning import BASE, DATA, NOW, MemLog, at

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


class _Probe:
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


def _staged(store: LocalStore, table: str, name: str) -> Staged:
    rel = f"{table_hour_dir('w', table, hour_from_tag(HOUR))}/{name}"
    src = f"staging/web/hour={HOUR}/att/{table}-{name}"
    store.write_atomic(src, b"avro bytes")
    return Staged(src, rel, LandedFile(rel, 1, 10, 0, 5, 5, 1), HOUR, table)


def _land_then_reland(store: Recording) -> None:
    """A first landing fed table `old` (and left a file the re-land does not list in `events`);
    the re-land feeds `events` only: moves, manifest, done file, retiring `old`, removals."""
    publish(store, TopicConfig("web", "w", table="old"), PLAN, [_staged(store, "old", "p0.avro")], [], NO_DEAD, 2, "a1")
    store.write_atomic(f"{table_hour_dir('w', 'events', hour_from_tag(HOUR))}/stale.avro", b"x")
    good = [_staged(store, "events", "p0.avro"), _staged(store, "events", "p1.avro")]
    store.events.clear()
    publish(store, TopicConfig("web", "w", table="events"), PLAN, good, [], NO_DEAD, 2, "a2")


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
    good = [_staged(store, "events", "p0.avro"), _staged(store, "events", "p1.avro")]
    store.lose_after_fences = 1  # lost while moving: the second file and everything after stay unpublished
    with pytest.raises(LockLost):
        publish(store, TopicConfig("web", "w", table="events"), PLAN, good, [], NO_DEAD, 2, "a1")
    hour_dir = table_hour_dir("w", "events", hour_from_tag(HOUR))
    assert store.list(hour_dir) == [f"{hour_dir}/p0.avro"]
    assert not store.exists(done_file_path("w", "events", hour_from_tag(HOUR)))
    assert not store.exists(dead_letter_dir("web", hour_from_tag(HOUR)))


def test_freezing_a_slice_is_fenced(tmp_path):
    store = Recording(tmp_path)
    cfg = TopicConfig("t", "w", table="events", grace_minutes=0, rows_per_task=10)
    log = MemLog({0: [(at(h, 5), DATA) for h in range(4)]})
    plan, froze = freeze_slice(store, log, cfg, BASE + ONE_HOUR, NOW)
    assert froze and [e for e in store.events if e[0] == "commit"]
    assert not unfenced(store.events, "slices/t/"), store.events
    store.lose_after_fences = 0
    with pytest.raises(LockLost):
        freeze_slice(store, log, cfg, BASE + ONE_HOUR * 2, NOW)
    assert store.list("slices/t") == [f"slices/t/hour={(BASE + ONE_HOUR).strftime('%Y-%m-%dT%H')}.json"]
