"""Planning against an in-memory log that answers like Kafka does: offsets_for_times
counts transaction markers and aborted records (stamped when written), a read_committed
reader skips them. Properties: hours tile the log whatever the timestamps, markers never
move a record out of its hour, and a far-future record is caught or landed where it sits."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.kafka_slices.plan import (
    FutureTimestampError,
    LogRewoundError,
    PlanRules,
    RetentionGapError,
    plan_slice,
)
from kafka_landing.naming import to_millis
from kafka_landing_tests.mem_log import ABORTED, DATA, HOUR0, MARKER, NOW, MemLog, at  # noqa: F401

HOURS = 6
RULES = PlanRules(grace_minutes=0, rows_per_task=10)


def plan_all(log: MemLog, order: list[int], **kw) -> dict:
    frozen = {}
    for h in order:
        hour = HOUR0.plus(h)
        frozen[hour] = plan_slice("t", hour, NOW, log, frozen, replace(RULES, **kw))
    return frozen


def hour_of(frozen: dict, p: int, offset: int) -> int | None:
    for hour, plan in frozen.items():
        s = plan.partition(p)
        if s and s.start <= offset < s.end:
            return hour.number - HOUR0.number
    return None


def assert_tiles(frozen: dict, p: int) -> None:
    ranges = [(frozen[h].partition(p).start, frozen[h].partition(p).end) for h in sorted(frozen) if frozen[h].partition(p)]
    for (s0, e0), (s1, e1) in zip(ranges, ranges[1:]):
        assert s0 <= e0 == s1 <= e1, f"gap or overlap: {ranges}"


# A log: transactions of data records stamped in past hours, in time order, each
# closed by a marker stamped at commit time (now); some aborted; some plain records.
batch = st.tuples(
    st.sampled_from(["commit", "abort", "plain"]),
    st.lists(st.integers(0, HOURS * 60 - 1), min_size=1, max_size=6),
)


def build(batches, marker_ts: int) -> list[tuple[int, str]]:
    minutes = sorted(m for _, ms in batches for m in ms)
    it = iter(minutes)
    log = []
    for kind, ms in batches:
        stamps = [at(0, next(it)) for _ in ms]
        if kind == "plain":
            log += [(ts, DATA) for ts in stamps]
        else:
            log += [(ts, DATA if kind == "commit" else ABORTED) for ts in stamps]
            log.append((marker_ts, MARKER))
    return log


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(batch, min_size=1, max_size=12), seed=st.integers(0, 2**16))
def test_transaction_markers_never_move_a_record_out_of_its_hour(batches, seed):
    """Markers are stamped at commit time, hours after the records they close: Kafka's
    offsets_for_times alone would end every hour at the first marker."""
    log = MemLog({0: build(batches, marker_ts=to_millis(NOW))})
    order = list(range(HOURS))
    random.Random(seed).shuffle(order)
    frozen = plan_all(log, order)
    assert_tiles(frozen, 0)
    for o, (ts, kind) in enumerate(log.parts[0]):
        if kind == DATA:
            assert hour_of(frozen, 0, o) == (ts - at(0)) // 3_600_000, f"offset {o} stamped {ts} in the wrong hour"


record = st.tuples(st.integers(0, 2), st.integers(-90, HOURS * 60 + 90), st.sampled_from([DATA, DATA, DATA, MARKER, ABORTED]))
far = st.sampled_from([at(0, HOURS * 60 + 600), to_millis(datetime(2030, 1, 1, tzinfo=timezone.utc)), at(-1000)])


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(record, max_size=40),
    outliers=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), far), max_size=3),
    seed=st.integers(0, 2**16),
    policy=st.sampled_from(["fail", "land"]),
)
def test_any_timestamps_tile_the_log(records, outliers, seed, policy):
    parts: dict[int, list] = {0: [], 1: [], 2: []}
    for p, minute, kind in records:
        parts[p].append((at(0, minute), kind))
    for p, pos, ts in outliers:
        parts[p].insert(min(pos, len(parts[p])), (ts, DATA))
    log = MemLog(parts)
    order = list(range(HOURS))
    random.Random(seed).shuffle(order)
    try:
        frozen = plan_all(log, order, on_future_timestamp=policy)
    except FutureTimestampError as exc:
        assert policy == "fail" and "max_future_minutes" in str(exc)
        return
    for p in parts:
        assert_tiles(frozen, p)


def test_a_far_future_record_fails_planning_by_default_and_names_it():
    # Hour 0: three records; a record stamped in 2030 sits between them; hour 1 and 2 follow.
    log = MemLog({0: [(at(0, 10), DATA), (to_millis(datetime(2030, 1, 1, tzinfo=timezone.utc)), DATA),
                      (at(0, 20), DATA), (at(1, 5), DATA), (at(2, 5), DATA)]})
    with pytest.raises(FutureTimestampError, match=r"topic 't' partition 0: offset 1 is stamped 2030-01-01T00:00:00\+00:00"):
        plan_all(log, [0])


def test_land_policy_lands_the_outlier_where_it_sits_and_records_it():
    log = MemLog({0: [(at(0, 10), DATA), (at(0, 15) + 2 * 3_600_000, DATA), (at(0, 20), DATA),
                      (at(1, 5), DATA), (at(2, 5), DATA)]})
    frozen = plan_all(log, [0, 1, 2], on_future_timestamp="land")
    assert [hour_of(frozen, 0, o) for o in range(5)] == [0, 0, 0, 1, 2]
    assert frozen[HOUR0].future_records[0]["offset"] == 1
    assert frozen[HOUR0].future_records[0]["action"] == "landed where it sits"


def test_an_idle_partition_waking_up_is_not_an_outlier():
    log = MemLog({0: [(at(0, 10), DATA), (at(5, 10), DATA), (at(5, 20), DATA)]})
    frozen = plan_all(log, [0, 1, 2, 3, 4, 5])
    assert [hour_of(frozen, 0, o) for o in range(3)] == [0, 5, 5]
    assert not any(p.future_records for p in frozen.values())


def test_a_late_record_is_not_an_outlier():
    """A record stamped hours late lands in the hour of its position, as always."""
    log = MemLog({0: [(at(0, 10), DATA), (at(1, 5), DATA), (at(0, 30) - 3 * 3_600_000, DATA), (at(1, 10), DATA)]})
    frozen = plan_all(log, [0, 1])
    assert [hour_of(frozen, 0, o) for o in range(4)] == [0, 1, 1, 1]


def test_a_partition_added_later_starts_at_its_log_start():
    log = MemLog({0: [(at(0, 10), DATA), (at(1, 10), DATA), (at(2, 10), DATA)]})
    frozen = plan_all(log, [0])
    log.parts[1] = [(at(0, 5), DATA), (at(-3, 0), DATA), (at(1, 20), DATA), (at(2, 20), DATA)]  # old stamps first
    hour = HOUR0.plus(1)
    frozen[hour] = plan_slice("t", hour, NOW, log, frozen, RULES)
    s = frozen[hour].partition(1)
    assert (s.start, s.end, s.start_from) == (0, 3, "added_later")


def test_a_partition_added_later_whose_head_retention_deleted_is_a_retention_gap():
    """A partition is created empty at offset 0: offsets retention (or DeleteRecords) removed before
    the first planning that sees it are lost like any other, an error unless skipping is asked for."""
    log = MemLog({0: [(at(0, 10), DATA), (at(1, 10), DATA), (at(2, 10), DATA)]})
    frozen = plan_all(log, [0])
    log.parts[1] = [(at(0, 50), DATA), (at(0, 55), DATA), (at(1, 5), DATA), (at(1, 20), DATA)]
    log.log_start[1] = 2
    hour = HOUR0.plus(1)
    with pytest.raises(RetentionGapError, match=r"partition 1: offsets \[0, 2\) of hour 2026-03-01T01"):
        plan_slice("t", hour, NOW, log, frozen, RULES)
    plan = plan_slice("t", hour, NOW, log, frozen, replace(RULES, skip_retention_gaps=True))
    assert plan.skipped == ({"partition": 1, "start": 0, "end": 2, "reason": "deleted by retention"},)
    assert (plan.partition(1).start, plan.partition(1).end) == (2, 4)


def test_a_log_that_ends_below_the_frozen_boundary_is_a_clear_error():
    """A broker without topic ids (before 2.8) still has the offsets to tell by, when the new log is shorter."""
    log = MemLog({0: [(at(0, m), DATA) for m in range(10)]})
    frozen = plan_all(log, [0, 1])
    log.topic_id = lambda topic: None
    log.parts[0] = [(at(2, 1), DATA)]  # deleted and re-created: the log ends below the frozen boundary
    with pytest.raises(LogRewoundError, match=r"topic 't' partition 0: frozen hours of this topic reach offset 10"):
        plan_slice("t", HOUR0.plus(2), NOW, log, frozen, RULES)


def test_a_re_created_topic_that_passed_the_frozen_boundary_is_a_clear_error():
    """Offsets cannot tell a re-created topic whose new log already passed the frozen boundary:
    its topic id (KIP-516) does. Without it, hour 2 would chain at offset 10 and [0, 10) never land."""
    log = MemLog({0: [(at(0, m), DATA) for m in range(10)]})
    frozen = plan_all(log, [0, 1])
    assert {p.topic_id for p in frozen.values()} == {"topic-id-1"}
    log.parts[0] = [(at(2, m), DATA) for m in range(25)]
    with pytest.raises(LogRewoundError, match=r"topic 't' was deleted and re-created: its topic id is now topic-id-2"):
        plan_slice("t", HOUR0.plus(2), NOW, log, frozen, PlanRules(grace_minutes=0, rows_per_task=100))


def test_plain_hours_read_no_record():
    """The doubtful-boundary reads are the exception: ordinary hours cost two ListOffsets only."""
    log = MemLog({0: [(at(h, m), DATA) for h in range(HOURS) for m in (5, 25, 45)]})
    plan_all(log, list(range(HOURS)))
    assert log.reads == 0


step = st.one_of(
    st.tuples(st.just("produce"), st.lists(st.tuples(
        st.integers(0, 2), st.integers(0, HOURS - 1),
        st.one_of(st.integers(-20, 79), st.sampled_from([-600, -60 * 24 * 30, 300, 60 * 24 * 365])),
        st.sampled_from([DATA, DATA, DATA, MARKER, ABORTED])), min_size=1, max_size=12)),
    st.tuples(st.just("freeze"), st.integers(0, HOURS - 1)),
)


@settings(max_examples=500, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=10), seed=st.integers(0, 2**16))
def test_hours_frozen_while_records_arrive_tile_the_log(steps, seed):
    """The real-broker property test's scenario, at hypothesis speed: records arrive between
    freezes, stamped back and forth, now and then far in the past or the future."""
    log = MemLog({0: [], 1: [], 2: []})
    frozen: dict = {}

    def freeze(h):
        hour = HOUR0.plus(h)
        if hour not in frozen:
            # Jitter here reaches 99 minutes; the far values are 5 hours and more.
            frozen[hour] = plan_slice("t", hour, NOW, log, frozen, PlanRules(
                grace_minutes=0, rows_per_task=7, on_future_timestamp="land", max_future_minutes=120))

    for s in steps:
        if s[0] == "produce":
            for p, h, m, kind in s[1]:
                log.parts[p].append((at(h, m), kind))
        else:
            freeze(s[1])
    rest = list(range(HOURS))
    random.Random(seed).shuffle(rest)
    for h in rest:
        freeze(h)
    for p in range(3):
        assert_tiles(frozen, p)
        first = frozen[HOUR0].partition(p).start
        data = [(o, ts) for o, (ts, kind) in enumerate(log.parts[p]) if kind == DATA]
        for (o, ts), after in zip(data, data[1:] + [None]):
            # An outlier by the documented rule (stamped far past the record after it) lands where it
            # sits, with that record, which may be before the first hour.
            outlier = after is not None and ts > after[1] + 120 * 60_000
            if at(0) <= ts < at(HOURS) and not outlier:
                assert o >= first, f"partition {p}: offset {o} stamped in the planned hours precedes the first slice"
