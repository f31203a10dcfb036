"""How a run of hours is read from Kafka: ranges cut only between frozen tasks, every task's
offsets read once, nothing outside the tasks read."""

from __future__ import annotations

import io

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.avro_files import AvroFileError, offset_range_in
from kafka_landing.kafka_slices.plan import HourTask, PlanningError, read_segments


@st.composite
def hours_of_tasks(draw) -> list[HourTask]:
    """Tasks of consecutive hours on a few partitions, sometimes with a gap between two hours
    (slices that were not chained), each hour's partition range cut into frozen tasks."""
    tasks = []
    for p in range(draw(st.integers(1, 4))):
        offset = draw(st.integers(0, 1000))
        for h in range(draw(st.integers(1, 6))):
            offset += draw(st.sampled_from([0, 0, 0, 7]))  # a gap now and then
            size, per_task = draw(st.integers(0, 60)), draw(st.integers(1, 25))
            for start in range(offset, offset + size, per_task):
                tasks.append(HourTask(f"2026-01-01T{h:02d}", p, start, min(start + per_task, offset + size)))
            offset += size
    return tasks


@settings(max_examples=300, deadline=None)
@given(hours_of_tasks(), st.integers(1, 8))
def test_every_task_is_read_once_whole_and_nothing_else(tasks, parallelism):
    reads = read_segments(tasks, parallelism)
    wanted = {(t.partition, o) for t in tasks for o in range(t.start, t.end)}
    got = [(p, o) for r in reads for p, (s, e) in r.items() for o in range(s, e)]
    assert len(got) == len(set(got)), "an offset is read twice"
    assert set(got) == wanted, "exactly the tasks' offsets are read"
    cuts = {(t.partition, t.start) for t in tasks} | {(t.partition, t.end) for t in tasks}
    for r in reads:
        for p, (s, e) in r.items():
            assert s < e
            assert (p, s) in cuts and (p, e) in cuts, "a range starts and ends on task boundaries"


def _runs(tasks: list[HourTask], partition: int) -> list[int]:
    """How many tasks each contiguous run of the partition's tasks holds."""
    runs: list[int] = []
    last = None
    for t in sorted((t for t in tasks if t.partition == partition), key=lambda t: t.start):
        if last is not None and last == t.start:
            runs[-1] += 1
        else:
            runs.append(1)
        last = t.end
    return runs


@given(hours_of_tasks(), st.integers(1, 10))
def test_contiguous_tasks_of_a_partition_are_as_few_reads_as_the_task_limit_allows_when_parallelism_is_one(
        tasks, per_read):
    reads = read_segments(tasks, 1, tasks_per_read=per_read)
    needed = {p: sum(-(-n // per_read) for n in _runs(tasks, p)) for p in {t.partition for t in tasks}}
    assert len(reads) == (max(needed.values()) if needed else 0)


@settings(max_examples=300, deadline=None)
@given(hours_of_tasks(), st.integers(1, 8), st.integers(1, 10))
def test_no_read_holds_more_tasks_than_the_limit(tasks, parallelism, per_read):
    """A Spark task keeps a landing file open per frozen task it read: their number is bounded."""
    reads = read_segments(tasks, parallelism, tasks_per_read=per_read)
    held = [sum(1 for t in tasks if t.partition == p and s <= t.start and t.end <= e)
            for r in reads for p, (s, e) in r.items()]
    assert sum(held) == len(tasks)
    assert max(held, default=0) <= per_read


def test_parallelism_splits_a_single_partition_between_tasks():
    tasks = [HourTask("2026-01-01T00", 0, s, s + 10) for s in range(0, 100, 10)]
    reads = read_segments(tasks, 4)
    assert [r[0] for r in reads] == [(0, 30), (30, 60), (60, 90), (90, 100)]


def test_overlapping_tasks_are_refused_naming_the_partition_and_offset():
    with pytest.raises(PlanningError, match="partition 2: tasks overlap at offset 5"):
        read_segments([HourTask("2026-01-01T00", 2, 0, 10), HourTask("2026-01-01T01", 2, 5, 12)], 1)


SCHEMA = fastavro.parse_schema({"type": "record", "name": "r", "fields": [
    {"name": "x", "type": "string"}, {"name": "_kafka_offset", "type": "long"}]})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=400), st.sampled_from(["null", "deflate", "snappy"]),
       st.integers(30, 4000))
def test_offset_range_reads_rows_and_the_first_and_last_offsets(offsets, codec, sync_interval):
    buf = io.BytesIO()
    fastavro.writer(buf, SCHEMA, [{"x": "v" * (o % 50), "_kafka_offset": o} for o in offsets], codec=codec,
                    sync_interval=sync_interval)
    buf.seek(0)
    assert offset_range_in(buf, "f.avro") == (len(offsets), offsets[0], offsets[-1])


def test_offset_range_of_a_truncated_file_fails_naming_it():
    buf = io.BytesIO()
    fastavro.writer(buf, SCHEMA, [{"x": "a" * 100, "_kafka_offset": i} for i in range(500)], sync_interval=500)
    with pytest.raises(AvroFileError, match="f.avro"):
        offset_range_in(io.BytesIO(buf.getvalue()[:-40]), "f.avro")
