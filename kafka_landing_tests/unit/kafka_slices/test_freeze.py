"""Freezing one hour costs reads proportional to the hour, not to the topic's history (N12):
the neighbours planning needs are found from the manifest names and only they are read.
And what is read is enough: planning against it gives the plan planning against every
frozen hour gives, whatever order hours are frozen in and whenever partitions are added."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.config import TopicConfig
from kafka_landing.kafka_slices.freeze import freeze_slice, load_frozen
from kafka_landing.kafka_slices.plan import PlanningError, PlanRules, frozen_for_planning, plan_slice
from kafka_landing.naming import slice_manifest_path
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.mem_log import DATA, HOUR0, MemLog, at

FROZEN_HOURS = 200
NOW = HOUR0.plus(FROZEN_HOURS + 10).start
RULES = PlanRules(grace_minutes=0, rows_per_task=10)


class CountingStore(LocalStore):
    """Counts reads of slice manifests that exist (a miss is the cheap 'is it frozen yet?' check)."""

    def __init__(self, root):
        super().__init__(root)
        self.manifest_reads: list[str] = []

    def read_bytes(self, rel):
        data = super().read_bytes(rel)  # FileNotFoundError for a miss: not counted
        if rel.startswith("slices/"):
            self.manifest_reads.append(rel)
        return data


def _history(tmp_path, frozen_hours, log):
    store = CountingStore(tmp_path)
    frozen = {}
    for h in frozen_hours:
        hour = HOUR0.plus(h)
        frozen[hour] = plan_slice("t", hour, NOW, log, frozen, RULES)
        store.write_atomic(slice_manifest_path("t", hour), json.dumps(frozen[hour].to_dict()).encode())
    store.manifest_reads.clear()
    return store


CFG = TopicConfig(topic="t", dataset="d", table="x", grace_minutes=0, rows_per_task=10)


def test_freezing_the_next_hour_reads_at_most_two_manifests(tmp_path):
    log = MemLog({p: [(at(h, 5 + p), DATA) for h in range(FROZEN_HOURS + 5)] for p in range(3)})
    store = _history(tmp_path, range(FROZEN_HOURS), log)
    plan, froze = freeze_slice(store, log, CFG, HOUR0.plus(FROZEN_HOURS), NOW)
    assert froze and plan.partition(0).start_from == "chained"
    assert len(store.manifest_reads) <= 2, f"read {len(store.manifest_reads)} manifests"


def test_freezing_an_hour_in_a_gap_reads_at_most_two_manifests(tmp_path):
    log = MemLog({p: [(at(h, 5 + p), DATA) for h in range(FROZEN_HOURS + 5)] for p in range(3)})
    store = _history(tmp_path, [h for h in range(FROZEN_HOURS) if h != 100], log)
    plan, froze = freeze_slice(store, log, CFG, HOUR0.plus(100), NOW)
    assert froze and (plan.partition(1).start_from, plan.partition(1).end_from) == ("chained", "chained")
    assert sorted(store.manifest_reads) == [slice_manifest_path("t", HOUR0.plus(h)) for h in (99, 101)]


HOURS = 8


@settings(max_examples=300, deadline=None)
@given(
    order=st.permutations(range(HOURS)),
    add_after=st.lists(st.integers(0, HOURS), min_size=0, max_size=2),
    no_id_until=st.integers(0, HOURS),
    probe=st.integers(0, HOURS - 1),
    seed=st.integers(0, 2**16),
)
def test_planning_against_what_freeze_reads_equals_planning_against_everything(order, add_after, no_id_until,
                                                                               probe, seed):
    """Hours frozen in any order, partitions added between freezes (so an older hour frozen later
    knows more partitions than a newer hour frozen earlier), the first freezes from a broker
    without topic ids: every hour planned against the subset is the hour planned against all."""
    rnd = random.Random(seed)
    log = MemLog({0: [(at(h, rnd.randrange(60)), DATA) for h in range(HOURS) for _ in range(rnd.randrange(3))]})
    for p in log.parts:
        log.parts[p].sort()
    real_id = log.topic_id
    frozen: dict = {}
    for i, h in enumerate(order):
        if i in add_after:
            p = len(log.parts)
            log.parts[p] = sorted((at(x, rnd.randrange(60)), DATA) for x in range(HOURS) for _ in range(rnd.randrange(3)))
        log.topic_id = (lambda topic: None) if i < no_id_until else real_id
        hour = HOUR0.plus(h)
        if h == probe or rnd.random() < 0.3:  # plan the probe (and some others) both ways first
            _same_both_ways(log, frozen, hour)
        frozen[hour] = plan_slice("t", hour, NOW, log, frozen, replace(RULES, rows_per_task=3))
    # and every hour again, as if unfrozen, against all the others
    for h in range(HOURS):
        hour = HOUR0.plus(h)
        _same_both_ways(log, {k: v for k, v in frozen.items() if k != hour}, hour)


def _same_both_ways(log, frozen, hour):
    reads = []

    def read(h):
        reads.append(h)
        return frozen[h]

    partitions = log.partitions("t") or []
    subset = frozen_for_planning(sorted(frozen), hour, partitions, log.topic_id("t"), read)
    assert set(subset) <= set(frozen) and len(reads) == len(set(reads))
    try:
        full = plan_slice("t", hour, NOW, log, frozen, replace(RULES, rows_per_task=3))
    except PlanningError as exc:
        full = type(exc)
    try:
        part = plan_slice("t", hour, NOW, log, subset, replace(RULES, rows_per_task=3))
    except PlanningError as exc:
        part = type(exc)
    assert part == full


def test_a_re_created_topic_is_caught_past_neighbours_frozen_without_an_id(tmp_path):
    """Neighbours frozen by a broker without topic ids say nothing: reading goes on to one that does."""
    log = MemLog({0: [(at(h, 5), DATA) for h in range(12)]})
    frozen = {}
    for h in range(10):
        if h >= 3:
            log.topic_id = lambda topic: None
        hour = HOUR0.plus(h)
        frozen[hour] = plan_slice("t", hour, NOW, log, frozen, RULES)
    del log.topic_id
    log.topic_ids = 2  # re-created: the new id differs from hours 0-2's
    frozen.pop(HOUR0.plus(6))
    subset = frozen_for_planning(sorted(frozen), HOUR0.plus(6), [0], log.topic_id("t"), frozen.__getitem__)
    assert any(p.topic_id is not None for p in subset.values())


def test_load_frozen_still_loads_everything(tmp_path):
    log = MemLog({0: [(at(h, 5), DATA) for h in range(6)]})
    store = _history(tmp_path, range(5), log)
    assert len(load_frozen(store, "t")) == 5
