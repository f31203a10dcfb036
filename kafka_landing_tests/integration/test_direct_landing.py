"""Landing without rows (avro_landing/direct.py, jvm/splice DirectLanding) against the decoding way,
on the real broker, registry and Spark: the same frozen hour landed both ways must publish the same
done files, the same records in every file (fastavro), the same dead letters with the same reasons.
Hypothesis draws the schema over every Avro type and edge value with a routing field or none
(test_body_check's cases), the Kafka keys, headers and timestamps, and mixes in what only the
decoding way handles: bad framing, another schema id, damaged bodies. Where the direct way cannot be
sure of a body it must say so and leave the landing to the decoding way, with nothing of its own
left behind; where it is sure of every body it must be the way taken."""

from __future__ import annotations

import io
import json
import struct
import uuid
from datetime import timedelta
from pathlib import Path

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.avro_landing import body_rules, direct, job
from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.job import HoursToLand, Sources, land_hours
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.config import Route
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.naming import Hour, to_millis
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import content_key
from kafka_landing_tests.integration.test_body_check import cases
from kafka_landing_tests.integration.test_decode import HOUR, record_schema, register, topic_cfg  # noqa: F401
from kafka_landing_tests.integration.test_decode import sr  # noqa: F401 - a fixture
from kafka_landing_tests.integration.test_splice_writer import SETTINGS, _varint, canon
from kafka_landing_tools.demo.generate import produce

STRAIGHT = "straight from Kafka"
DECODING = "the decoding way"
OTHER = record_schema("Other", [{"name": "n", "type": "long"}])


def _read(store: LocalStore, rel: str) -> tuple[dict, list]:
    """A file's header metadata (schema, codec, Spark's key) and its records, comparable (canon)."""
    with open(Path(store.location(rel)), "rb") as f:
        reader = fastavro.reader(f)
        return reader.metadata, [canon(r) for r in reader]


def landed_both_ways(spark, kafka, registry, tmp_path, cfg, sid: int) -> dict[bool, tuple]:
    """{direct: (result, store, log)} of the frozen HOUR landed once each way, the likely id `sid`."""
    out = {}
    for way in (True, False):
        store = LocalStore(str(tmp_path / f"{uuid.uuid4().hex[:6]}_{way}"))
        with kafka.log_view() as log:
            plan, _ = freeze_slice(store, log, cfg, Hour(HOUR), utcnow())
        said: list[str] = []
        result = land_hours(Sources(lambda: spark, kafka.spark_options(), schema_fetcher(registry)), store,
                            HoursToLand(cfg, [plan], "a", likely_ids=(sid,)), log=said.append, direct=way)[plan.hour]
        assert not isinstance(result, Exception), f"landing {'directly' if way else 'the decoding way'}: {result}"
        out[way] = (result, store, said)
    return out


def assert_same_landing(both: dict) -> int:
    """Both ways published the same hour: done files, records file by file, dead letters by reason
    and record. Returns the records landed."""
    (a, sa, _), (b, sb, _) = both[True], both[False]
    assert sorted(a.done) == sorted(b.done), "other tables"
    for table in a.done:
        assert content_key(a.done[table]) == content_key(b.done[table]), f"table {table}: other done files"
        for fa, fb in zip(a.done[table].files, b.done[table].files):
            assert _read(sa, fa.path) == _read(sb, fb.path), f"{fa.path}: other records"
    assert a.dead_letters.by_reason == b.dead_letters.by_reason, "other dead letters"
    dead_a = [r for f in a.dead_letters.files for r in _read(sa, f.path)]
    dead_b = [r for f in b.dead_letters.files for r in _read(sb, f.path)]
    assert dead_a == dead_b
    assert a.records_read == b.records_read == a.rows + a.dead_letters.rows
    assert not list(Path(sa.location("staging")).rglob("*.avro")), "staged files left behind"
    return a.rows


@st.composite
def hours_of_records(draw):
    """A drawn case (schema, bodies, routing) with Kafka keys, headers and timestamps, mostly clean
    bodies, and perhaps bad framing and another schema id among them."""
    schema, damaged, route, event = draw(cases())
    clean = draw(st.booleans()) or draw(st.booleans())  # three in four: every body as produced
    bodies = [b for how, b in damaged if how == "as produced" or not clean]
    key = st.one_of(st.none(), st.binary(max_size=8))
    header = st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4)))
    kafka_cols = st.tuples(key, st.one_of(st.none(), st.lists(header, min_size=1, max_size=3)),
                           st.integers(0, 3_599_999))
    columns = draw(st.lists(kafka_cols, min_size=len(bodies), max_size=len(bodies)))
    extras = draw(st.lists(st.sampled_from(["null value", "short", "bad magic", "other id"]), max_size=3))
    return schema, bodies, route, columns, extras, clean, event


@settings(max_examples=8, **SETTINGS)
@given(case=hours_of_records())
def test_landing_directly_publishes_what_the_decoding_way_publishes(case, make_topic, bootstrap, sr, registry,
                                                                     kafka, spark, tmp_path):
    """With the drawn event time field as the topic's, half of the time: files split by event hour."""
    schema, bodies, route, columns, extras, clean, event = case
    topic = make_topic()
    sid, other = register(sr, topic, schema), register(sr, topic, OTHER)
    values = [frame(sid, b) for b in bodies]
    values += [{"null value": None, "short": b"\x00\x01", "bad magic": b"\x01" + frame(sid, b"")[1:],
                "other id": frame(other, _varint(7))}[e] for e in extras]
    columns = columns + [(None, None, 0)] * len(extras)
    base = to_millis(HOUR)
    produce(bootstrap, [(topic, 0, base + ts, k, v, h, None, None, None) for v, (k, h, ts) in zip(values, columns)])
    cfg = topic_cfg(topic, **({"route": route} if route else {}), **({"event_time_field": event} if event else {}))
    both = landed_both_ways(spark, kafka, registry, tmp_path, cfg, sid)
    assert values, "a case of no record checks nothing"
    assert_same_landing(both)
    said = both[True][2]
    assert any(STRAIGHT in m for m in said), "the direct way was not tried"
    # Sure of every body: when each is as produced and no type is one the check leaves to the decode
    # (an event time of epoch milliseconds may be out of range, which the decode names).
    if clean and "time-mi" not in json.dumps(schema) and event is None:
        assert not [m for m in said if DECODING in m], f"the direct way gave up on bodies it can be sure of: {said}"


def test_a_body_with_lying_block_sizes_is_counted_directly_and_a_dead_letter_saying_so(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """The direct way lands the honest bodies and counts the lying one as a dead letter of the id,
    which the dead-letter job then writes with the decode's reason: the same as the decoding way."""
    writer = record_schema("Blocks", [{"name": "xs", "type": {"type": "array", "items": "long"}},
                                      {"name": "s", "type": "string"}])
    items, tail = _varint(5) + _varint(6), _varint(0) + _varint(2) + b"ok"
    bodies = [_varint(2) + items + tail, _varint(-2) + _varint(len(items)) + items + tail,
              _varint(-2) + _varint(len(items) + 1) + items + tail]
    topic = make_topic()
    sid = register(sr, topic, writer)
    produce(bootstrap, [(topic, 0, to_millis(HOUR) + i, None, frame(sid, b), None, None, None, None)
                        for i, b in enumerate(bodies)])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic), sid)
    assert assert_same_landing(both) == 2
    assert both[True][0].dead_letters.by_reason == {
        f"corrupt body for schema id {sid}: an array or map block gives a byte size that is not the size of its "
        "items (field 'xs')": 1}
    said = both[True][2]
    assert [m for m in said if STRAIGHT in m] and not [m for m in said if DECODING in m], said


def test_a_body_cut_short_is_not_read_past_its_end_into_what_follows_in_the_batch(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """The operator reads each value where Kafka's client holds it, inside the fetched batch: a body
    whose string runs past its end must be judged on its own bytes, never on what follows it (all
    printable here, so a read past the end would land them as the string). Its own record's header
    (count, key, value: 31 bytes) follows the value in the batch."""
    writer = record_schema("Cut", [{"name": "s", "type": "string"}])
    topic = make_topic()
    sid = register(sr, topic, writer)
    cut = _varint(30) + b"abc"  # says 30 bytes, holds 3: the other 27 would be the header's
    whole = [_varint(30) + b"x" * 30 for _ in range(4)]
    produce(bootstrap, [(topic, 0, to_millis(HOUR) + i, b"k" * 20, frame(sid, b), [("h" * 8, b"y" * 20)], None, None,
                         None) for i, b in enumerate([cut, *whole])])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic), sid)
    assert assert_same_landing(both) == 4
    assert both[True][0].dead_letters.rows == 1


EVENTS = record_schema("Event", [{"name": "id", "type": "long"}, {"name": "ts", "type": ["null", "long"]}])


def _event_body(i: int, ts: int | None) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(EVENTS), {"id": i, "ts": ts})
    return out.getvalue()


def test_a_topic_split_by_event_hour_lands_directly_a_file_per_event_hour(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """Event times (epoch milliseconds, or none) over three hours, interleaved, in two partitions:
    the direct way lands them, a file per frozen task and event hour, as the decoding way does."""
    topic = make_topic(partitions=2)
    sid = register(sr, topic, EVENTS)
    base = to_millis(HOUR)
    times = [base - 7_200_000 + (i % 3) * 3_600_000 + i if i % 5 else None for i in range(40)]
    produce(bootstrap, [(topic, i % 2, base + i, None, frame(sid, _event_body(i, ts)), None, None, None, None)
                        for i, ts in enumerate(times)])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic, event_time_field="ts"), sid)
    assert assert_same_landing(both) == 40
    said = both[True][2]
    assert [m for m in said if STRAIGHT in m] and not [m for m in said if DECODING in m], said
    files = both[True][0].done["t"].files
    assert sorted({f.event_hour for f in files}, key=str) == sorted(
        {None, *(str(Hour(HOUR + timedelta(hours=k - 2))) for k in range(3))}, key=str)
    assert len(files) == 2 * 4, "a file per partition and event hour (three hours, and none)"


def test_records_over_more_event_hours_than_a_task_keeps_open_land_the_decoding_way(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """A frozen task whose records name more event hours than MAX_EVENT_FILES (mis-stamped, a year
    of backfill in one hour): the direct way removes what it wrote and says why; the decoding way
    writes them one event hour after the other."""
    topic = make_topic()
    sid = register(sr, topic, EVENTS)
    n = direct.contract.MAX_EVENT_FILES + 2
    produce(bootstrap, [(topic, 0, to_millis(HOUR) + i, None, frame(sid, _event_body(i, to_millis(HOUR) - i * 3_600_000)),
                         None, None, None, None) for i in range(n)])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic, event_time_field="ts"), sid)
    assert assert_same_landing(both) == n
    assert [m for m in both[True][2] if f"more than {n - 2} event hours" in m and DECODING in m]
    assert len({f.event_hour for f in both[True][0].done["t"].files}) == n


def test_every_schema_id_of_the_hour_lands_directly_the_likely_one_first(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """A producer that evolved its schema within the hour (a field added with a default): the
    likely id, then the other id the hours hold, each landed the direct way (one more read of the
    offsets, no Spark row per record), as the decoding way lands them."""
    topic = make_topic(partitions=2)
    v1 = register(sr, topic, EVENTS)
    v2_schema = record_schema("Event", [*EVENTS["fields"], {"name": "note", "type": "string", "default": ""}])
    v2 = register(sr, topic, v2_schema)
    base = to_millis(HOUR)
    values = []
    for i in range(30):
        if i % 3:
            values.append(frame(v1, _event_body(i, base + i)))
        else:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, fastavro.parse_schema(v2_schema), {"id": i, "ts": base + i, "note": f"n{i}"})
            values.append(frame(v2, out.getvalue()))
    produce(bootstrap, [(topic, i % 2, base + i, None, v, None, None, None, None) for i, v in enumerate(values)])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic), v1)
    assert assert_same_landing(both) == 30
    said = both[True][2]
    assert [m for m in said if f"schema id {v1} {STRAIGHT}" in m] and [m for m in said if f"schema id {v2} {STRAIGHT}" in m]
    assert not [m for m in said if DECODING in m or "writing the records" in m], said
    assert {f.schema_id for f in both[True][0].done["t"].files} == {v1, v2}


def test_a_body_it_is_not_sure_of_leaves_the_landing_to_the_decoding_way(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """A routing value of a type the strict walk does not cast as Spark does (a double) is left to
    the decode: the direct way stops, removes what it wrote, and the decoding way lands the hour."""
    writer = record_schema("Priced", [{"name": "x", "type": "double"}])
    topic = make_topic()
    sid = register(sr, topic, writer)
    produce(bootstrap, [(topic, 0, to_millis(HOUR) + i, None, frame(sid, struct.pack("<d", i / 2)), None, None, None,
                         None) for i in range(5)])
    cfg = topic_cfg(topic, route=Route(field="x", tables={"1.5": "halves"}, default="other"))
    both = landed_both_ways(spark, kafka, registry, tmp_path, cfg, sid)
    assert assert_same_landing(both) == 5
    said = both[True][2]
    assert [m for m in said if STRAIGHT in m] and [m for m in said if DECODING in m]


def test_an_engine_without_the_direct_way_lands_the_decoding_way(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path, monkeypatch):
    """A Spark engine whose jar is older than the direct way (its format unknown to Spark) says so in
    the log and lands the decoding way."""
    writer = record_schema("Plain", [{"name": "n", "type": "long"}])
    topic = make_topic()
    sid = register(sr, topic, writer)
    produce(bootstrap, [(topic, 0, to_millis(HOUR + timedelta(seconds=i)), None, frame(sid, _varint(i)), None, None,
                         None, None) for i in range(3)])
    monkeypatch.setattr(direct, "DIRECT_FORMAT", "kafka-landing-direct-from-the-future")
    monkeypatch.setattr(job, "DIRECT_FORMAT", "kafka-landing-direct-from-the-future")
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic), sid)
    assert assert_same_landing(both) == 3
    assert [m for m in both[True][2] if "has no direct landing" in m]


def test_bodies_that_asked_avro_for_gigabytes_are_dead_letters_and_the_warm_engine_stays_up(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """The review's poison bodies (S4): a 6-byte array of nulls claiming 2^31 items and a 5-byte
    bytes value claiming a gigabyte made Avro's reader allocate them, and the OutOfMemoryError killed
    the engine every topic shares. On the warm server, both ways: the hour's other records land, the
    poison records are dead letters naming their rule, and the engine still answers."""
    writer = record_schema("Poison", [{"name": "n", "type": {"type": "array", "items": "null"}},
                                      {"name": "b", "type": "bytes"}])
    topic = make_topic()
    sid = register(sr, topic, writer)
    good = _varint(2) + _varint(0) + _varint(2) + b"ok"
    bodies = [good, bytes.fromhex("eeffffff0f00") + _varint(0), good, _varint(0) + bytes.fromhex("eeffffff0f"), good]
    produce(bootstrap, [(topic, 0, to_millis(HOUR) + i, None, frame(sid, b), None, None, None, None)
                        for i, b in enumerate(bodies)])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic), sid)
    assert assert_same_landing(both) == 3
    assert both[True][0].dead_letters.by_reason == {body_rules.reason(4, "n", sid): 1, body_rules.reason(2, "b", sid): 1}
    assert spark.range(5).count() == 5, "the engine is still up"
