"""kafka_slices against the real broker: tiling, freezing, retention, clear errors."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from confluent_kafka import TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.naming import ONE_HOUR, floor_hour, to_millis
from kafka_landing.planning import HourNotClosedError, RetentionGapError, UnknownTopicError
from kafka_landing.slices import freeze_slice, load_frozen
from kafka_landing.landing_store import LandingStore
from kafka_landing.topic_config import TopicConfig
from kafka_landing_tests.conftest import utcnow

HOURS = 5

# A scenario is a list of steps: produce a batch of records (partition, hour
# index, minute within or just outside the hour, so timestamps go back and
# forth), or freeze an hour. Late records produced after their hour was frozen
# must land in a later hour, never in none or two.
produce_step = st.tuples(
    st.just("produce"),
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, HOURS - 1), st.integers(-20, 79)),
        min_size=1, max_size=12,
    ),
)
freeze_step = st.tuples(st.just("freeze"), st.integers(0, HOURS - 1))
scenario = st.lists(st.one_of(produce_step, freeze_step), min_size=1, max_size=10)


def check_tiling(plans: dict, produced_offsets: dict[int, set[int]]) -> None:
    hours = sorted(plans)
    for p in range(3):
        ranges = [(plans[h].partition(p).start, plans[h].partition(p).end) for h in hours]
        for (s0, e0), (s1, e1) in zip(ranges, ranges[1:]):
            assert s0 <= e0 and s1 <= e1, ranges
            assert e0 == s1, f"partition {p}: gap or overlap between consecutive hours: {ranges}"
        covered = [o for s, e in ranges for o in range(s, e)]
        assert len(covered) == len(set(covered)), "an offset is in two hours"
        first, last = ranges[0][0], ranges[-1][1]
        assert set(covered) == set(range(first, last))
        # No record stamped inside the planned hours precedes the first slice.
        assert all(first <= o for o in produced_offsets.get(p, ())), "a produced offset precedes the first slice"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=scenario, order_seed=st.integers(0, 2**16))
def test_hourly_slices_tile_every_offset_exactly_once(make_topic, send, kafka, tmp_path_factory, steps, order_seed):
    topic = make_topic(partitions=3)
    store = LandingStore(tmp_path_factory.mktemp("tiling"))
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0, rows_per_task=7)
    base = floor_hour(utcnow()) - ONE_HOUR * (HOURS + 2)
    now = utcnow()
    produced: dict[int, set[int]] = {}
    first = {}
    with kafka.log_view() as log:
        for step in steps:
            if step[0] == "produce":
                recs = [(topic, p, to_millis(base + ONE_HOUR * h + timedelta(minutes=m)), None, b"x") for p, h, m in step[1]]
                for s in send(recs):
                    if s.timestamp_ms >= to_millis(base):
                        produced.setdefault(s.partition, set()).add(s.offset)
            else:
                hour = base + ONE_HOUR * step[1]
                plan, _ = freeze_slice(store, log, cfg, hour, now)
                first.setdefault(hour, plan)
                assert plan == first[hour], "a frozen slice changed"
        rest = [base + ONE_HOUR * i for i in range(HOURS)]
        random.Random(order_seed).shuffle(rest)
        for hour in rest:
            plan, _ = freeze_slice(store, log, cfg, hour, now)
            assert plan == first.setdefault(hour, plan)
    plans = load_frozen(store, topic)
    assert sorted(plans) == sorted(base + ONE_HOUR * i for i in range(HOURS))
    check_tiling(plans, produced)
    for plan in plans.values():  # the task split covers the slice exactly
        for ps in plan.partitions:
            tasks = [t for t in plan.tasks if t.partition == ps.partition]
            assert sum(t.end - t.start for t in tasks) == ps.records
            assert all(t.end - t.start <= cfg.rows_per_task for t in tasks)


def test_records_after_freeze_go_to_the_next_hour(make_topic, send, kafka, store):
    topic = make_topic(partitions=1)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    h0 = floor_hour(utcnow()) - ONE_HOUR * 4
    send([(topic, 0, to_millis(h0 + timedelta(minutes=m)), None, b"x") for m in (1, 2, 3)])
    with kafka.log_view() as log:
        plan0, frozen = freeze_slice(store, log, cfg, h0, utcnow())
        assert frozen and (plan0.partitions[0].start, plan0.partitions[0].end) == (0, 3)
        assert plan0.partitions[0].end_from == "log_end"  # idle: nothing later yet
        # A late record for h0 and one for h0+1 arrive after h0 was frozen.
        send([(topic, 0, to_millis(h0 + timedelta(minutes=30)), None, b"late"),
              (topic, 0, to_millis(h0 + ONE_HOUR + timedelta(minutes=5)), None, b"y")])
        again, frozen_again = freeze_slice(store, log, cfg, h0, utcnow())
        assert again == plan0 and not frozen_again
        plan1, _ = freeze_slice(store, log, cfg, h0 + ONE_HOUR, utcnow())
    assert (plan1.partitions[0].start, plan1.partitions[0].end) == (3, 5)
    assert plan1.partitions[0].start_from == "chained"


def test_open_hour_is_refused(kafka, make_topic, store):
    topic = make_topic()
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=10)
    current = floor_hour(utcnow())
    with kafka.log_view() as log, pytest.raises(HourNotClosedError, match="still open"):
        freeze_slice(store, log, cfg, current, utcnow())
    # The previous hour is open too until its grace period has passed.
    with kafka.log_view() as log, pytest.raises(HourNotClosedError, match="grace"):
        freeze_slice(store, log, cfg, current - ONE_HOUR, current + timedelta(minutes=5))


def test_unknown_topic_is_a_clear_error(kafka, store):
    cfg = TopicConfig(topic="no_such_topic_here", dataset="d", table="t", grace_minutes=0)
    with kafka.log_view() as log, pytest.raises(UnknownTopicError, match="no_such_topic_here"):
        freeze_slice(store, log, cfg, floor_hour(utcnow()) - ONE_HOUR * 2, utcnow())


def test_offsets_deleted_by_retention_are_a_clear_error(make_topic, send, kafka, admin, store):
    topic = make_topic(partitions=1)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    h0 = floor_hour(utcnow()) - ONE_HOUR * 5
    send([(topic, 0, to_millis(h0 + ONE_HOUR * h + timedelta(minutes=m)), None, b"x") for h in range(3) for m in range(10)])
    with kafka.log_view() as log:
        freeze_slice(store, log, cfg, h0, utcnow())  # offsets [0, 10)
    # Retention deletes everything before offset 15, the middle of the next hour.
    admin.delete_records([TopicPartition(topic, 0, 15)])[TopicPartition(topic, 0, 15)].result(timeout=30)
    with kafka.log_view() as log:
        with pytest.raises(RetentionGapError, match=rf"{topic}.*partition 0: offsets \[10, 15\)"):
            freeze_slice(store, log, cfg, h0 + ONE_HOUR, utcnow())
        assert load_frozen(store, topic).keys() == {h0}, "a failed plan froze nothing"
        # Skipping is an explicit, recorded choice.
        plan, _ = freeze_slice(store, log, cfg, h0 + ONE_HOUR, utcnow(), skip_retention_gaps=True)
    assert (plan.partitions[0].start, plan.partitions[0].end) == (15, 20)
    assert plan.skipped == ({"partition": 0, "start": 10, "end": 15, "reason": "deleted by retention"},)
