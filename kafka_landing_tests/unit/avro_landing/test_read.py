"""The archive's segments: each read range of the run gets exactly the files holding its records,
found by bisection (a year of hours holds millions of files), as the plain scan finds them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.avro_landing.archive import ArchiveHour
from kafka_landing.avro_landing.contract import FIELD_SEP, ITEM_SEP, NO_SCHEMA_ID, NUMBER_SEP
from kafka_landing.avro_landing.read import archive_segments
from kafka_landing.handoff.manifests import DeadLetters, LandedFile
from kafka_landing.kafka_slices.plan import HourTask, read_segments
from kafka_landing.store.local import LocalStore

HOUR = "2026-11-20T13"


@st.composite
def hours(draw):
    """Frozen tasks of two partitions, landing files inside tasks (one per table), dead-letter files
    spanning a partition's tasks."""
    tasks, files, dead = [], [], []
    for p in (0, 1):
        at = draw(st.integers(0, 50))
        for _ in range(draw(st.integers(0, 6))):
            size = draw(st.integers(1, 20))
            tasks.append(HourTask(HOUR, p, at, at + size))
            for table in ("a", "b")[:draw(st.integers(0, 2))]:
                first = draw(st.integers(at, at + size - 1))
                last = draw(st.integers(first, at + size - 1))
                files.append(LandedFile(f"tables/d/{table}/hour={HOUR}/{p}-{first}", last - first + 1, 1, p, first, last, 5))
            at += size
        if tasks and draw(st.booleans()):
            ends = [t for t in tasks if t.partition == p]
            if ends:
                first = draw(st.integers(ends[0].start, ends[-1].end - 1))
                last = draw(st.integers(first, ends[-1].end - 1))
                dead.append(LandedFile(f"dead_letters/t/hour={HOUR}/{p}-{first}", 1, 1, p, first, last))
    return tasks, files, dead


@settings(max_examples=200, deadline=None)
@given(hours(), st.integers(1, 8))
def test_each_segment_gets_the_files_that_hold_its_records(drawn, parallelism):
    tasks, files, dead = drawn
    store = LocalStore("/nowhere")
    archive = ArchiveHour(None, tuple(files), tuple(dead), DeadLetters(0, {}, tuple(dead)), "a")  # type: ignore[arg-type]
    option = archive_segments(store, [archive], tasks, parallelism)
    got = {}
    for item in filter(None, option.split(ITEM_SEP)):
        fields = item.split(FIELD_SEP)
        got[tuple(map(int, fields[0].split(NUMBER_SEP)))] = sorted(zip(map(int, fields[1::2]), fields[2::2]))
    want = {}
    for segment in read_segments(tasks, parallelism):
        for p, (start, end) in segment.items():
            want[(p, start, end)] = sorted(
                [(5, store.location(f.path)) for f in files if f.partition == p and start <= f.first_offset < end]
                + [(NO_SCHEMA_ID, store.location(f.path)) for f in dead
                   if f.partition == p and f.first_offset < end and f.last_offset >= start])
    assert got == want
