"""The dry-run plan against an in-memory log: equal to freezing the hours in order, per-hour
errors instead of a failed plan, frozen/landed/loaded flags, and nothing written."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.config import TopicConfig
from kafka_landing.handoff.markers import content_sha
from kafka_landing.kafka_slices.dry_run import (
    ERROR,
    FROZEN,
    OPEN,
    PLANNED,
    TopicHistory,
    dry_run,
    format_table,
    hours_between,
)
from kafka_landing.kafka_slices.plan import PlanningError, PlanRules, UnknownTopicError, plan_slice
from kafka_landing.naming import done_file_path
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.mem_log import DATA, HOUR0, NOW, MemLog, at

CFG = TopicConfig(topic="t", dataset="ds", table="tbl", grace_minutes=0, rows_per_task=10)
NOTHING = TopicHistory(LocalStore("/nonexistent"), {})  # no slice frozen, no hour landed


def files(root) -> list:
    return sorted(p for p in root.rglob("*")) if root.exists() else []


def freeze_in_order(log, hours, frozen=None, errors=None):
    """What freezing each hour in turn freezes; an hour that fails to plan stays unfrozen."""
    frozen = dict(frozen or {})
    for h in hours:
        try:
            frozen[h] = plan_slice("t", h, NOW, log, frozen, PlanRules.of(CFG))
        except PlanningError as exc:
            if errors is None:
                raise
            errors[h] = str(exc)
    return frozen


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(-1, 5), st.integers(0, 59)), max_size=40),
       st.integers(0, 5), st.integers(0, 5), st.sets(st.integers(0, 5), max_size=3))
def test_dry_run_equals_freezing_in_order(recs, a, b, already):
    first, last = sorted((a, b))
    parts = {0: [], 1: []}
    for p, h, m in recs:
        parts[p].append((at(h, m), DATA))
    log = MemLog(parts)
    frozen = freeze_in_order(log, [HOUR0.plus(h) for h in sorted(already)], errors={})
    before = dict(frozen)
    rows = dry_run(CFG, HOUR0.plus(first), HOUR0.plus(last), NOW, log,
                   TopicHistory(LocalStore("/nonexistent-dry-run-root"), frozen))
    assert frozen == before  # the caller's mapping is not extended
    hours = [HOUR0.plus(h) for h in range(first, last + 1)]
    errors = {}
    expected = freeze_in_order(log, [h for h in hours if h not in before], before, errors)
    assert [r.hour for r in rows] == hours
    for r, h in zip(rows, hours):
        if h in errors:
            assert (r.state, r.plan, r.error) == (ERROR, None, errors[h])
        else:
            assert r.state == (FROZEN if h in before else PLANNED)
            assert r.plan.partitions == expected[h].partitions


def test_retention_gap_is_an_hour_error_and_later_hours_still_plan(tmp_path):
    log = MemLog({0: [(at(0, 5), DATA), (at(0, 6), DATA), (at(1, 5), DATA), (at(1, 6), DATA), (at(2, 5), DATA)]})
    frozen = freeze_in_order(log, [HOUR0])  # hour 0 is [0, 2)
    log.log_start = {0: 3}  # retention then deleted offset 2 of hour 1
    store = LocalStore(tmp_path / "l")
    rows = dry_run(CFG, HOUR0, HOUR0.plus(2), NOW, log, TopicHistory(store, frozen))
    assert [r.state for r in rows] == [FROZEN, ERROR, PLANNED]
    assert "retention" in rows[1].error and "partition 0" in rows[1].error and "[2, 3)" in rows[1].error
    assert (rows[2].plan.partitions[0].start, rows[2].plan.partitions[0].end) == (4, 5)
    text = format_table(rows)
    assert "deleted by retention" in text and "1 with errors" in text
    skipped = dry_run(CFG, HOUR0.plus(1), HOUR0.plus(1), NOW, log, TopicHistory(store, frozen), skip_retention_gaps=True)
    assert skipped[0].state == PLANNED and "retention gap [2, 3) skipped" in format_table(skipped)
    assert files(tmp_path / "l") == []


def test_a_frozen_hour_kafka_no_longer_holds_says_so_and_asks_kafka_once_per_partition(tmp_path):
    """Retention deleted hour 0 and part of hour 1 after both froze: the plan says, per
    partition, which of their offsets cannot be read again from Kafka; hour 2 it still holds."""
    log = MemLog({0: [(at(0, 5), DATA), (at(0, 6), DATA), (at(1, 5), DATA), (at(1, 6), DATA), (at(2, 5), DATA)],
                  1: [(at(0, 7), DATA), (at(2, 7), DATA)]})
    frozen = freeze_in_order(log, [HOUR0, HOUR0.plus(1), HOUR0.plus(2)])
    log.log_start = {0: 3, 1: 1}
    asked = []
    watermarks = log.watermarks
    log.watermarks = lambda topic, p: asked.append(p) or watermarks(topic, p)

    rows = dry_run(CFG, HOUR0, HOUR0.plus(2), NOW, log, TopicHistory(LocalStore(tmp_path / "l"), frozen))

    assert [r.gone for r in rows] == [((0, 0, 2), (1, 0, 1)), ((0, 2, 3),), ()]
    assert sorted(asked) == [0, 1]
    text = format_table(rows)
    assert "Kafka no longer holds [2, 3)" in text and "2 frozen hour(s) whose offsets Kafka no longer holds" in text
    log.partitions = lambda topic: None  # the topic deleted: every frozen offset is gone, and no watermark is asked
    rows = dry_run(CFG, HOUR0, HOUR0.plus(2), NOW, log, TopicHistory(LocalStore(tmp_path / "l"), frozen))
    assert [r.gone for r in rows] == [((0, 0, 2), (1, 0, 1)), ((0, 2, 4),), ((0, 4, 5), (1, 1, 2))]
    assert sorted(asked) == [0, 1]


def test_outlier_timestamp_is_an_hour_error():
    far = at(0, 10) + 10 * 3600_000
    log = MemLog({0: [(at(0, 5), DATA), (far, DATA), (at(0, 20), DATA), (at(1, 5), DATA)]})
    rows = dry_run(CFG, HOUR0, HOUR0.plus(1), NOW, log, NOTHING)
    assert rows[0].state == ERROR and "offset 1" in rows[0].error and "on_future_timestamp" in rows[0].error


def test_open_hours_are_shown_not_planned():
    log = MemLog({0: [(at(0, 5), DATA)]})
    now = HOUR0.plus(1).start + timedelta(minutes=30)
    rows = dry_run(CFG, HOUR0, HOUR0.plus(2), now, log, NOTHING)
    assert [r.state for r in rows] == [PLANNED, OPEN, OPEN]
    assert rows[1].plan is None and "still open" in rows[1].error


def test_hours_before_the_topics_first_hour_are_planned_and_flagged():
    log = MemLog({0: [(at(0, 5), DATA), (at(1, 5), DATA)]})
    rows = dry_run(CFG, HOUR0, HOUR0.plus(1), NOW, log, replace(NOTHING, first_hour=HOUR0.plus(1)))
    assert [(r.state, r.before_first_hour) for r in rows] == [(PLANNED, True), (PLANNED, False)]
    lines = format_table(rows).splitlines()
    assert "move first_hour earlier to land it" in next(line for line in lines if line.startswith(HOUR0))
    assert "first_hour" not in next(line for line in lines if line.startswith(HOUR0.plus(1)))
    assert "; 1 before the topic's first hour (no partitions: move first_hour earlier to land them)" in lines[-1]
    unflagged = dry_run(CFG, HOUR0, HOUR0.plus(1), NOW, log, replace(NOTHING, first_hour=HOUR0))
    assert not any(r.before_first_hour for r in unflagged) and "first hour" not in format_table(unflagged)


def test_unknown_topic_fails_the_plan():
    with pytest.raises(UnknownTopicError):
        dry_run(CFG, HOUR0, HOUR0, NOW, MemLog({}), NOTHING)


def test_landed_and_loaded_need_every_table_and_the_loaded_content(tmp_path):
    from kafka_landing.config import Route

    cfg = TopicConfig(topic="t", dataset="ds", route=Route("type", {"a": "ta"}, "tb"), grace_minutes=0)
    store = LocalStore(tmp_path / "l")
    log = MemLog({0: [(at(0, 5), DATA)]})
    store.write_atomic(done_file_path("ds", "ta", HOUR0), b'{"x": 1}')
    ledger = {}
    loaded = lambda ds, t, h: ledger.get((ds, t, h))  # noqa: E731
    row = lambda: dry_run(cfg, HOUR0, HOUR0, NOW, log, TopicHistory(store, {}, loaded))[0]  # noqa: E731
    assert (row().landed, row().loaded) == (False, False)  # tb has no done file yet
    store.write_atomic(done_file_path("ds", "tb", HOUR0), b'{"y": 2}')
    assert (row().landed, row().loaded) == (True, False)
    ledger[("ds", "ta", HOUR0)] = {"sha256": content_sha(b'{"x": 1}')}
    ledger[("ds", "tb", HOUR0)] = {"sha256": content_sha(b"older content")}
    assert row().loaded is False  # tb's load was of another content: a re-land is not loaded yet
    ledger[("ds", "tb", HOUR0)] = {"sha256": content_sha(b'{"y": 2}')}
    assert row().loaded is True


def test_range_errors():
    with pytest.raises(ValueError, match="swap"):
        hours_between(HOUR0.plus(1), HOUR0)
    with pytest.raises(ValueError, match="plan at most"):
        hours_between(HOUR0, HOUR0.plus(24 * 366))
    assert hours_between(HOUR0, HOUR0) == [HOUR0]
    assert hours_between(HOUR0, HOUR0.plus(2)) == ["2026-03-01T00", "2026-03-01T01", "2026-03-01T02"]


def test_the_plan_says_which_gone_hours_have_an_archive_and_which_are_stale_against_the_config(tmp_path):
    """Hour 0 was landed under the config of now, hour 1 under another routing, hour 2 never: with
    Kafka holding none of them, 0 and 1 come from their archive, 1 is stale, 2 is lost."""
    from kafka_landing.config import Route
    from kafka_landing.naming import dead_letter_manifest_path

    log = MemLog({0: [(at(0, 5), DATA), (at(1, 5), DATA), (at(2, 5), DATA)]})
    frozen = freeze_in_order(log, [HOUR0, HOUR0.plus(1), HOUR0.plus(2)])
    store = LocalStore(tmp_path / "l")
    before = replace(CFG, table=None, route=Route("type", {"a": "x"}, "rest"))
    store.write_json_atomic(dead_letter_manifest_path("t", HOUR0), {"shape": CFG.landing_shape})
    store.write_json_atomic(dead_letter_manifest_path("t", HOUR0.plus(1)), {"shape": before.landing_shape})
    log.partitions = lambda topic: None

    rows = dry_run(CFG, HOUR0, HOUR0.plus(2), NOW, log, TopicHistory(store, frozen))

    assert [(r.archived, r.stale) for r in rows] == [(True, False), (True, True), (False, False)]
    text = format_table(rows)
    assert "3 frozen hour(s) whose offsets Kafka no longer holds in part: 2 would be read from their archive" in text
    assert "1 landed under another routing or event time" in text and "no archive either: lost" in text
    # A manifest from before the shape was recorded: its tables say it.
    store.write_json_atomic(dead_letter_manifest_path("t", HOUR0), {"tables": [["ds", "other"]]})
    assert TopicHistory(store, frozen).archived_stale(CFG, HOUR0) == (True, True)
    store.write_json_atomic(dead_letter_manifest_path("t", HOUR0), {"tables": [["ds", "tbl"]]})
    assert TopicHistory(store, frozen).archived_stale(CFG, HOUR0) == (True, False)

