"""kafka_slices against the real broker: tiling, freezing, retention, clear errors."""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError
from kafka_landing.kafka_slices.freeze import freeze_slice, frozen_slice, load_frozen
from kafka_landing.kafka_slices.plan import (
    FutureTimestampError,
    HourNotClosedError,
    LogRewoundError,
    RetentionGapError,
    UnknownTopicError,
    check_still_in_kafka,
)
from kafka_landing.naming import ONE_HOUR, Hour, floor_hour, slice_manifest_path, to_millis
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.conftest import utcnow

HOURS = 5

# A scenario is a list of steps: produce a batch of records (partition, hour
# index, minute within or just outside the hour, so timestamps go back and
# forth), or freeze an hour. Late records produced after their hour was frozen
# must land in a later hour, never in none or two.
produce_step = st.tuples(
    st.just("produce"),
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, HOURS - 1),
                  # minutes within or just outside the hour, and now and then far past or far future
                  st.one_of(st.integers(-20, 79), st.sampled_from([-600, -60 * 24 * 30, 300, 60 * 24 * 365]))),
        min_size=1, max_size=12,
    ),
)
freeze_step = st.tuples(st.just("freeze"), st.integers(0, HOURS - 1))
scenario = st.lists(st.one_of(produce_step, freeze_step), min_size=1, max_size=10)


def not_outliers(sent: list, lo_ms: int, hi_ms: int, max_future_ms: int) -> dict[int, set[int]]:
    """Offsets stamped in [lo_ms, hi_ms) that are not outliers by the documented rule
    (stamped more than max_future past the record after them): those must be planned."""
    out: dict[int, set[int]] = {}
    by_part: dict[int, list] = {}
    for s in sorted(sent, key=lambda s: (s.partition, s.offset)):
        by_part.setdefault(s.partition, []).append(s)
    for p, recs in by_part.items():
        for s, after in zip(recs, recs[1:] + [None]):
            outlier = after is not None and s.timestamp_ms > after.timestamp_ms + max_future_ms
            if lo_ms <= s.timestamp_ms < hi_ms and not outlier:
                out.setdefault(p, set()).add(s.offset)
    return out


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
        stamped_inside = produced_offsets.get(p, ())  # a partition may get no record in them
        assert min(stamped_inside, default=first) >= first, "a produced offset precedes the first slice"


# The same property runs at hypothesis speed against an in-memory log in unit/kafka_slices/test_plan.py;
# here 8 scenarios on the real broker (each a topic, records and hours planned in random order)
# keep the suite under 20 minutes.
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=scenario, order_seed=st.integers(0, 2**16))
def test_hourly_slices_tile_every_offset_exactly_once(make_topic, send, kafka, tmp_path_factory, steps, order_seed):
    topic = make_topic(partitions=3, config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    store = LocalStore(tmp_path_factory.mktemp("tiling"))
    # Far-future records land where they sit (recorded); the default policy, fail, is tested below.
    # Jitter here reaches 99 minutes; the far values are 5 hours and more.
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0, rows_per_task=7,
                      on_future_timestamp="land", max_future_minutes=120)
    base = floor_hour(utcnow()) - ONE_HOUR * (HOURS + 2)
    now = utcnow()
    sent = []
    first = {}
    with kafka.log_view() as log:
        for step in steps:
            if step[0] == "produce":
                recs = [(topic, p, to_millis(base + ONE_HOUR * h + timedelta(minutes=m)), None, b"x") for p, h, m in step[1]]
                sent += send(recs)
            else:
                hour = base + ONE_HOUR * step[1]
                plan, _ = freeze_slice(store, log, cfg, Hour(hour), now)
                first.setdefault(hour, plan)
                assert plan == first[hour], "a frozen slice changed"
        rest = [base + ONE_HOUR * i for i in range(HOURS)]
        random.Random(order_seed).shuffle(rest)
        for hour in rest:
            plan, _ = freeze_slice(store, log, cfg, Hour(hour), now)
            assert plan == first.setdefault(hour, plan)
    plans = load_frozen(store, topic)
    assert sorted(plans) == [Hour(base).plus(i) for i in range(HOURS)]
    check_tiling(plans, not_outliers(sent, to_millis(base), to_millis(base + ONE_HOUR * HOURS), 120 * 60_000))
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
        plan0, frozen = freeze_slice(store, log, cfg, Hour(h0), utcnow())
        assert frozen and (plan0.partitions[0].start, plan0.partitions[0].end) == (0, 3)
        assert plan0.partitions[0].end_from == "log_end"  # idle: nothing later yet
        # A late record for h0 and one for h0+1 arrive after h0 was frozen.
        send([(topic, 0, to_millis(h0 + timedelta(minutes=30)), None, b"late"),
              (topic, 0, to_millis(h0 + ONE_HOUR + timedelta(minutes=5)), None, b"y")])
        again, frozen_again = freeze_slice(store, log, cfg, Hour(h0), utcnow())
        assert again == plan0 and not frozen_again
        plan1, _ = freeze_slice(store, log, cfg, Hour(h0 + ONE_HOUR), utcnow())
    assert (plan1.partitions[0].start, plan1.partitions[0].end) == (3, 5)
    assert plan1.partitions[0].start_from == "chained"


def test_open_hour_is_refused(kafka, make_topic, store):
    topic = make_topic()
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=10)
    current = floor_hour(utcnow())
    with kafka.log_view() as log, pytest.raises(HourNotClosedError, match="still open"):
        freeze_slice(store, log, cfg, Hour(current), utcnow())
    # The previous hour is open too until its grace period has passed.
    with kafka.log_view() as log, pytest.raises(HourNotClosedError, match="grace"):
        freeze_slice(store, log, cfg, Hour(current - ONE_HOUR), current + timedelta(minutes=5))


def test_unknown_topic_is_a_clear_error(kafka, store):
    cfg = TopicConfig(topic="no_such_topic_here", dataset="d", table="t", grace_minutes=0)
    with kafka.log_view() as log, pytest.raises(UnknownTopicError, match="no_such_topic_here"):
        freeze_slice(store, log, cfg, Hour(floor_hour(utcnow()) - ONE_HOUR * 2), utcnow())


def test_offsets_deleted_by_retention_are_a_clear_error(make_topic, send, kafka, admin, store):
    topic = make_topic(partitions=1)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    h0 = floor_hour(utcnow()) - ONE_HOUR * 5
    send([(topic, 0, to_millis(h0 + ONE_HOUR * h + timedelta(minutes=m)), None, b"x") for h in range(3) for m in range(10)])
    with kafka.log_view() as log:
        freeze_slice(store, log, cfg, Hour(h0), utcnow())  # offsets [0, 10)
    # Retention deletes everything before offset 15, the middle of the next hour.
    admin.delete_records([TopicPartition(topic, 0, 15)])[TopicPartition(topic, 0, 15)].result(timeout=30)
    with kafka.log_view() as log:
        with pytest.raises(RetentionGapError, match=rf"{topic}.*partition 0: offsets \[10, 15\)"):
            freeze_slice(store, log, cfg, Hour(h0 + ONE_HOUR), utcnow())
        assert load_frozen(store, topic).keys() == {Hour(h0)}, "a failed plan froze nothing"
        # Skipping is an explicit, recorded choice.
        plan, _ = freeze_slice(store, log, cfg, Hour(h0 + ONE_HOUR), utcnow(), skip_retention_gaps=True)
    assert (plan.partitions[0].start, plan.partitions[0].end) == (15, 20)
    assert plan.skipped == ({"partition": 0, "start": 10, "end": 15, "reason": "deleted by retention"},)


def _outlier_topic(make_topic, send, h0):
    """Records in hour 0, one stamped in 2030 among them, then records of hours 0, 1 and 2."""
    topic = make_topic(partitions=1, config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    far = to_millis(datetime(2030, 1, 1, tzinfo=timezone.utc))
    stamps = [to_millis(h0 + timedelta(minutes=10)), far, to_millis(h0 + timedelta(minutes=20)),
              to_millis(h0 + ONE_HOUR + timedelta(minutes=5)), to_millis(h0 + 2 * ONE_HOUR + timedelta(minutes=5))]
    send([(topic, 0, ts, None, b"x") for ts in stamps])
    return topic


def test_a_far_future_record_fails_the_hour_naming_it(make_topic, send, kafka, store):
    h0 = floor_hour(utcnow()) - ONE_HOUR * 5
    topic = _outlier_topic(make_topic, send, h0)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    with kafka.log_view() as log, pytest.raises(FutureTimestampError) as failed:
        freeze_slice(store, log, cfg, Hour(h0), utcnow())
    message = str(failed.value)
    for part in (topic, "partition 0", "offset 1", "2030-01-01T00:00:00", "on_future_timestamp: land",
                 "log.message.timestamp.after.max.ms"):
        assert part in message, (part, message)
    assert not load_frozen(store, topic), "nothing was frozen"


def test_a_far_future_record_lands_where_it_sits_by_policy(make_topic, send, kafka, store):
    h0 = floor_hour(utcnow()) - ONE_HOUR * 5
    topic = _outlier_topic(make_topic, send, h0)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0, on_future_timestamp="land")
    with kafka.log_view() as log:
        plans = [freeze_slice(store, log, cfg, Hour(h0 + ONE_HOUR * i), utcnow())[0] for i in range(3)]
    # Without the policy's care, hours 1 and 2 would be empty until 2030.
    assert [(p.partitions[0].start, p.partitions[0].end) for p in plans] == [(0, 3), (3, 4), (4, 5)]
    assert plans[0].future_records[0]["offset"] == 1
    assert plans[0].future_records[0]["timestamp"].startswith("2030-01-01")


def test_partitions_added_later_land_their_early_records(make_topic, send, kafka, admin, store):
    topic = make_topic(partitions=1)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    h0 = floor_hour(utcnow()) - ONE_HOUR * 5
    send([(topic, 0, to_millis(h0 + ONE_HOUR * h + timedelta(minutes=5)), None, b"x") for h in range(4)])
    with kafka.log_view() as log:
        freeze_slice(store, log, cfg, Hour(h0), utcnow())
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    # Old-stamped records in the new partitions: before h0, inside h0, and in h1.
    send([(topic, p, to_millis(h0 + timedelta(minutes=m)), None, b"new") for p in (1, 2) for m in (-300, 30, 70)])
    with kafka.log_view() as log:
        plan1, _ = freeze_slice(store, log, cfg, Hour(h0 + ONE_HOUR), utcnow())
        plan2, _ = freeze_slice(store, log, cfg, Hour(h0 + 2 * ONE_HOUR), utcnow())
    for p in (1, 2):
        s = plan1.partition(p)
        assert (s.start, s.end, s.start_from) == (0, 3, "added_later"), s
        assert plan2.partition(p).start == 3
    assert (plan1.partition(0).start, plan1.partition(0).end) == (1, 2)


def test_a_re_created_topic_fails_clearly(make_topic, send, kafka, admin, store):
    topic = make_topic(partitions=1)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    h0 = floor_hour(utcnow()) - ONE_HOUR * 5
    send([(topic, 0, to_millis(h0 + timedelta(minutes=m)), None, b"x") for m in range(0, 60, 6)]
         + [(topic, 0, to_millis(h0 + ONE_HOUR + timedelta(minutes=5)), None, b"x")])
    with kafka.log_view() as log:
        freeze_slice(store, log, cfg, Hour(h0), utcnow())  # offsets [0, 10)
    admin.delete_topics([topic])[topic].result(timeout=30)
    for _ in range(60):  # deletion is asynchronous
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
            break
        except Exception:
            time.sleep(0.5)
    # More records than the frozen hour reached: the offsets alone would chain on at 10 and lose [0, 10).
    send([(topic, 0, to_millis(h0 + ONE_HOUR + timedelta(minutes=m)), None, b"y") for m in range(10, 55, 3)])
    with kafka.log_view() as log, pytest.raises(LogRewoundError) as failed:
        freeze_slice(store, log, cfg, Hour(h0 + ONE_HOUR), utcnow())
    assert f"topic {topic!r} was deleted and re-created: its topic id is now" in str(failed.value)
    assert not store.exists(slice_manifest_path(topic, Hour(h0).plus(1)))
    # Landing the hour frozen from the old topic fails too, before anything is read.
    with kafka.log_view() as log, pytest.raises(LandingError, match="was deleted and re-created"):
        check_still_in_kafka(log, frozen_slice(store, topic, Hour(h0)))
