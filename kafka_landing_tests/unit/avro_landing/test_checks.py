"""`every_offset_has_a_record`: offsets without a record are transaction markers, aborted records
or compaction on topics that have them, and records lost on any other topic, where the check
fails naming the ranges the reader saw."""

from __future__ import annotations

from dataclasses import replace

from kafka_landing.avro_landing.checks import EVERY_OFFSET, every_offset_check
from kafka_landing.avro_landing.job import LandingResult
from kafka_landing.config import TopicConfig
from kafka_landing.handoff.manifests import DeadLetters
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan

CFG = TopicConfig("web", "w", table="events")
PLAN = SlicePlan("web", "2026-11-20T13", "x", 0, 10, (PartitionSlice(0, 0, 100, 0, 100, "timestamp", "timestamp"),),
                 ())


def result(without: int, shown=(), seen: int | None = None, compacted: bool = False) -> LandingResult:
    return LandingResult(done={}, dead_letters=DeadLetters(rows=0, by_reason={}, files=()), records_read=100 - without,
                         seconds=1.0, compacted=compacted, offsets_without_record=without, gaps_seen=seen,
                         gaps_shown=tuple(shown))


def test_a_plain_topic_with_offsets_without_a_record_fails_naming_them():
    got = every_offset_check(result(5, [(0, 10, 1), (0, 40, 4)], seen=5), CFG, PLAN)
    assert (got.check_name, got.passed) == (EVERY_OFFSET, False)
    assert "web 2026-11-20T13" in got.description and "5 offset(s)" in got.description
    assert "partition 0 offset 10, partition 0 offsets 40..43" in got.description
    assert "transactional: true" in got.description
    assert got.metadata["offsets_seen_without_record"].value == 5


def test_only_what_it_saw_is_named_and_more_is_said_to_exist():
    got = every_offset_check(result(9, [(0, 10, 1)]), CFG, PLAN)
    assert not got.passed and "(partition 0 offset 10 ...)" in got.description


def test_markers_of_a_transactional_topic_and_a_compacted_topics_holes_pass():
    assert every_offset_check(result(5, [(0, 10, 5)]), replace(CFG, transactional=True), PLAN).passed
    assert every_offset_check(result(5, compacted=True), CFG, PLAN).passed
    assert every_offset_check(result(0), CFG, PLAN).passed
