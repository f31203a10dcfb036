"""The body check (decode.BODY_CHECK, jvm/splice FastCheck): the bodies it vouches for land without
being decoded, so vouching must change nothing a landing shows. Over every Avro type and edge value
(test_value_fidelity's strategies), with bodies cut short, bytes flipped and bytes appended, and
with routing and event-time fields drawn: the same records land, to the same tables and event
hours, and every other record is a dead letter with the same reason, whether the check may vouch
or not. And a body whose sized array block lies about its size (which Avro's reader ignores and
Avro's skip trusts) is a dead letter saying so, not a record the splice writer would copy wrong."""

from __future__ import annotations

import json
import uuid
from unittest import mock

import fastavro
import fastavro.read
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from kafka_landing.avro_landing import avro_schemas, body_rules
from kafka_landing.avro_landing.contract import DEAD, LANDS
from kafka_landing.avro_landing.decode import Vouch, decode_checked, frame_columns
from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.route import classify
from kafka_landing.avro_landing.write import write_good
from kafka_landing.avro_types import strip_logical_types
from kafka_landing.config import Route
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.integration.test_decode import record_schema, topic_cfg
from kafka_landing_tests.integration.test_splice_writer import SETTINGS, _varint, avro_tools_records, raw_frame
from kafka_landing_tests.integration.test_value_fidelity import body, schema_and_records

SID = 11
ROUTABLE = ("string", "int", "long", "boolean")
EVENT_TIMES = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")


def _leaf(t):
    """A union of null and one type: that type; else the type as it is."""
    if isinstance(t, list) and len(t) == 2 and "null" in t:
        return next(b for b in t if b != "null")
    return t


def _routable(t) -> bool:
    t = _leaf(t)
    return t in ROUTABLE or (isinstance(t, dict) and t.get("type") == "enum")


def _event_time(t) -> bool:
    t = _leaf(t)
    return t == "long" or (isinstance(t, dict) and t.get("type") == "long" and t.get("logicalType") in EVENT_TIMES)


def _route_value(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


@st.composite
def cases(draw):
    """A schema of some of the drawn fields, its records' bodies (some damaged), a routing field
    (or none) with tables for some of its values, and an event time field (or none)."""
    schema, records = draw(schema_and_records())
    fields = draw(st.lists(st.sampled_from(schema["fields"]), min_size=1, max_size=len(schema["fields"]),
                           unique_by=lambda f: f["name"]))
    schema = record_schema("Fid", fields)
    records = [{f["name"]: r[f["name"]] for f in fields} for r in records]
    bodies = [body(schema, r) for r in records]
    damaged = []
    for b in bodies:
        how = draw(st.sampled_from(["as produced"] * 3 + ["cut", "flipped", "appended"]))
        if how == "cut":
            b = b[:draw(st.integers(0, max(0, len(b) - 1)))]
        elif how == "flipped" and b:
            i = draw(st.integers(0, len(b) - 1))
            b = b[:i] + bytes([b[i] ^ draw(st.integers(1, 255))]) + b[i + 1:]
        elif how == "appended":
            b = b + draw(st.binary(min_size=1, max_size=4))
        damaged.append((how, b))
    routable = [f["name"] for f in fields if _routable(f["type"])]
    route = None
    if routable and draw(st.booleans()):
        name = draw(st.sampled_from(routable))
        values = sorted({_route_value(r[name]) for r in records if r[name] is not None})
        # At least one value (the config refuses a route of no tables), perhaps none a record holds.
        chosen = draw(st.lists(st.sampled_from(values), unique=True, min_size=1, max_size=3)) if values else ["none"]
        route = Route(field=name, tables={v: f"t{i}" for i, v in enumerate(chosen)}, default="other")
    timed = [f["name"] for f in fields if _event_time(f["type"])]
    event = draw(st.sampled_from(timed)) if timed and draw(st.booleans()) else None
    return schema, damaged, route, event


def classified(spark, schema: dict, bodies: list[bytes], route: Route | None, event: str | None,
               vouch: bool) -> dict[int, dict]:
    """{offset: (reason, table, event hour, check status)} of one decode and routing of the bodies."""
    cfg = topic_cfg("t", **({"route": route} if route else {}), **({"event_time_field": event} if event else {}))
    rows = [("t", 0, offset, 1_700_000_000_000, None, None, frame(SID, b)) for offset, b in enumerate(bodies)]
    framed = frame_columns(raw_frame(spark, rows))
    decoded = decode_checked(framed, SID, schema, "t", Vouch(route and route.field, event) if vouch else None)
    out = classify(decoded, cfg, "t", SID, schema, [])
    ehour = F.col("_kl_ehour") if "_kl_ehour" in out.columns else F.lit(None).cast("string")
    got = out.select("_kafka_offset", "_reason", "_kl_table", ehour.alias("ehour"),
                     F.col("_kl_check").getField("status").alias("status")).collect()
    return {r["_kafka_offset"]: r.asDict() for r in got}


@settings(max_examples=30, **SETTINGS)
@given(case=cases())
def test_vouching_changes_nothing_a_landing_shows(case, spark):
    schema, damaged, route, event = case
    bodies = [b for _, b in damaged]
    vouched = classified(spark, schema, bodies, route, event, vouch=True)
    decoded = classified(spark, schema, bodies, route, event, vouch=False)
    assert bodies, "a case of no record checks nothing"
    assert len(vouched) == len(decoded) == len(bodies)
    assert all(r["status"] != LANDS for r in decoded.values()), "it vouched though it may not"
    def shown(rows):
        return {o: {k: v for k, v in r.items() if k != "status"} for o, r in rows.items()}

    assert shown(vouched) == shown(decoded), "vouching changed a reason, a table or an event hour"
    # The check must vouch for the records it can: every body as produced that lands, when no type
    # in the schema is one it leaves to the decode step (times of day) and the routing field is not
    # the event time field (it reads a field once).
    plain = [o for o, (how, _) in enumerate(damaged) if how == "as produced" and decoded[o]["_reason"] is None]
    if plain and "time-mi" not in json.dumps(schema) and not (route and route.field == event):
        assert [o for o in plain if vouched[o]["status"] != LANDS] == [], "bodies as produced left to the decode"


def test_a_sized_block_that_lies_about_its_size_is_a_dead_letter_saying_so(spark, tmp_path):
    """Avro lets an array come in blocks that give their byte size. The decode step (Avro's reader)
    ignores the size; Avro's skip, which finds where a spliced record ends, trusts it. A size that
    is not the size of the items makes the two read different records: a dead letter, with a reason
    that says so. The honest blocks around it land."""
    writer = record_schema("Blocks", [{"name": "xs", "type": {"type": "array", "items": "long"}},
                                      {"name": "s", "type": "string"}])
    items = _varint(5) + _varint(6)
    tail = _varint(0) + _varint(2) + b"ok"
    bodies = [
        _varint(2) + items + tail,  # plain
        _varint(-2) + _varint(len(items)) + items + tail,  # a sized block, honest
        _varint(-2) + _varint(len(items) + 1) + items + tail,  # says one byte more than its items take
        _varint(-2) + _varint(len(items) - 1) + items + tail,  # one byte less
        _varint(-2) + _varint(-3) + items + tail,  # a negative size
    ]
    got = classified(spark, writer, bodies, None, None, vouch=True)
    reason = (f"corrupt body for schema id {SID}: an array or map block gives a byte size that is not the size of its "
              "items (field 'xs')")
    assert [(got[o]["status"], got[o]["_reason"]) for o in range(len(bodies))] == \
        [(LANDS, None), (LANDS, None)] + [(DEAD, reason)] * 3
    # The splice writer gets only the honest ones, and writes the records they hold.
    cfg = topic_cfg("t")
    rows = [("t", 0, offset, 1_700_000_000_000, None, None, frame(SID, b)) for offset, b in enumerate(bodies)]
    out = classify(decode_checked(frame_columns(raw_frame(spark, rows)), SID, writer, "t", Vouch()), cfg, "t", SID,
                   writer, [])
    staged = write_good(out, cfg, SID, writer, LocalStore(str(tmp_path)), "staging")
    assert [(s.file.rows, s.file.first_offset, s.file.last_offset) for s in staged] == [(2, 0, 1)]


def test_a_string_that_is_not_utf8_is_left_to_the_decode_wherever_its_bad_byte_is(spark):
    """The check reads a string's bytes eight at a time while they are ASCII: one byte that is not,
    at any place of a string of any length (in a word of eight or in the bytes after the last one),
    must leave the body to the decode, which makes it a dead letter. Bytes of valid UTF-8 beyond
    ASCII land as they are."""
    writer = record_schema("Text", [{"name": "s", "type": "string"}])
    bad = [b"a" * i + b"\xff" + b"a" * (n - i - 1) for n in (1, 7, 8, 9, 15, 16, 17, 24) for i in range(n)]
    good = [b"a" * i + "\u00e9".encode() + b"a" * (16 - i) for i in range(17)]
    strings = bad + good
    bodies = [_varint(len(s)) + s for s in strings]
    vouched = classified(spark, writer, bodies, None, None, vouch=True)
    decoded = classified(spark, writer, bodies, None, None, vouch=False)
    assert len(bad) == 97 and len(vouched) == len(bodies)
    assert [o for o in range(len(bad)) if vouched[o]["status"] == LANDS or vouched[o]["_reason"] is None] == []
    assert [vouched[o]["_reason"] for o in range(len(bad), len(bodies))] == [None] * len(good)
    assert {o: r["_reason"] for o, r in vouched.items()} == {o: r["_reason"] for o, r in decoded.items()}


# --- the strict walk's rules, one body each ----------------------------------------------------------

def _long(n: int) -> bytes:
    return _varint(n)


def _fields(*fields) -> dict:
    return record_schema("Rule", [{"name": n, "type": t} for n, t in fields])


TIME_MS = {"type": "int", "logicalType": "time-millis"}
TIME_US = {"type": "long", "logicalType": "time-micros"}
DEC = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}
UUID = {"type": "string", "logicalType": "uuid"}
DAY = {"type": "int", "logicalType": "date"}
NULLS = {"type": "array", "items": "null"}
LONGS = {"type": "array", "items": "long"}
# (what, schema, body, the rule it breaks and the field, or None: it lands)
RULE_CASES = [
    ("S1: a lying block beside an array of zero-width items", _fields(("a", LONGS), ("b", NULLS)),
     _long(-1) + _long(4) + _long(1) + _long(0) + _long(100) + _long(0), (3, "a")),
    ("S1 with a byte after it", _fields(("a", LONGS), ("b", NULLS)),
     _long(-1) + _long(4) + _long(1) + _long(0) + _long(100) + _long(0) + b"\x00", (3, "a")),
    ("100 nulls in one byte of count", _fields(("b", NULLS)), _long(100) + _long(0), None),
    ("zero-width items in a sized block of size 0", _fields(("b", NULLS)), _long(-100) + _long(0) + _long(0), None),
    ("S4: 2^31 nulls in 6 bytes", _fields(("n", NULLS)), bytes.fromhex("eeffffff0f00"), (4, "n")),
    ("S4: bytes of 2^30 in 5 bytes", _fields(("n", "bytes")), bytes.fromhex("eeffffff0f"), (2, "n")),
    ("a negative string length", _fields(("s", "string")), _long(-3) + b"abc", (2, "s")),
    ("S2: a boolean byte 2", _fields(("f", "boolean")), b"\x02", (6, "f")),
    ("S2: an int varint with bits past 32", _fields(("i", "int")), bytes.fromhex("818080801f"), (7, "i")),
    ("a long varint with bits past 64", _fields(("l", "long")), b"\xff" * 9 + b"\x02", (7, "l")),
    ("a long varint of 11 bytes", _fields(("l", "long")), b"\x80" * 10 + b"\x00", (7, "l")),
    ("an int padded with zero groups", _fields(("i", "int")), b"\x82\x80\x00", None),
    # A string's or bytes' length is a long to every reader: padded past an int's 5 bytes, it still reads.
    ("a string length padded to 10 bytes", _fields(("s", "string")), b"\x86" + b"\x80" * 8 + b"\x00abc", None),
    ("a bytes length padded to 6 bytes", _fields(("b", "bytes")), b"\x84\x80\x80\x80\x80\x00xy", None),
    ("S3: a time-millis of 25 h", _fields(("t", TIME_MS)), _long(90_000_000), (11, "t")),
    ("a time-millis of 24 h", _fields(("t", TIME_MS)), _long(86_400_000), (11, "t")),
    ("a time-millis a millisecond before midnight", _fields(("t", TIME_MS)), _long(86_399_999), None),
    ("a negative time-micros", _fields(("t", TIME_US)), _long(-1), (11, "t")),
    ("a byte after the record", _fields(("i", "int")), _long(1) + b"\x00", (8, None)),
    ("a decimal of no bytes", _fields(("d", DEC)), _long(0), (15, "d")),
    ("a decimal wider than its precision", _fields(("d", DEC)), _long(2) + (10_000).to_bytes(2, "big"), (13, "d")),
    ("an enum index out of range", _fields(("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]})), _long(2),
     (5, "e")),
    ("a union index out of range", _fields(("u", ["null", "int"])), _long(2), (5, "u")),
    ("a body cut short", _fields(("i", "int"), ("s", "string")), _long(1), (1, "s")),
    ("a map block that lies", _fields(("m", {"type": "map", "values": "int"})),
     _long(-1) + _long(9) + _long(1) + b"k" + _long(1) + _long(0), (3, "m")),
    ("a date after 9999", _fields(("d", DAY)), _long(2_932_897), (10, "d")),
    ("a uuid that is not one", _fields(("u", UUID)), _long(3) + b"abc", (12, "u")),
    ("a string that is not UTF-8", _fields(("s", "string")), _long(2) + b"\xc3\x28", (9, "s")),
]


@pytest.mark.parametrize("vouch", [True, False], ids=["vouching", "decoding"])
def test_every_rule_refuses_its_body_before_any_decode_and_the_rest_read_alike_everywhere(vouch, spark, tmp_path):
    """Each rule of the strict walk (body_rules.py) turns its body into a dead letter with the rule's
    reason, on both ways, without the decode ever running on it: the 6-byte bodies that asked Avro's
    reader for gigabytes (S4) leave the warm engine up. The bodies that land are written by the splice
    writer and read the same by fastavro, Avro's Java reader and Spark."""
    for what, schema, b, expected in RULE_CASES:
        got = classified(spark, schema, [b], None, None, vouch=vouch)[0]
        want = None if expected is None else body_rules.reason(expected[0], expected[1], SID)
        assert (got["status"] == DEAD, got["_reason"]) == (expected is not None, want), what
        if expected is None and vouch:  # the walked body is written whole either way: read once
            cfg = topic_cfg("t")
            rows = [("t", 0, 0, 1_700_000_000_000, None, None, frame(SID, b))]
            out = classify(decode_checked(frame_columns(raw_frame(spark, rows)), SID, schema, "t",
                                          Vouch() if vouch else None), cfg, "t", SID, schema, [])
            store = LocalStore(str(tmp_path / uuid.uuid4().hex[:8]))
            (staged,) = write_good(out, cfg, SID, schema, store, "staging")
            path = store.location(staged.src)
            raw = strip_logical_types(avro_schemas.landing_schema(schema))  # as avro-tools prints them
            with open(path, "rb") as fh, mock.patch.dict(fastavro.read.LOGICAL_READERS, clear=True):
                by_fastavro = [{k: v for k, v in r.items() if not k.startswith("_")} for r in fastavro.reader(fh)]
            by_java = [{k: v for k, v in json.loads(line).items() if not k.startswith("_")}
                       for line in avro_tools_records(path)]
            by_spark = [{k: v for k, v in r.asDict(recursive=True).items() if not k.startswith("_")}
                        for r in spark.read.format("avro").option("avroSchema", json.dumps(raw)).load(path).collect()]
            def as_printed(rows):  # avro-tools prints bytes one character per byte
                return [{k: bytes(v).decode("latin-1") if isinstance(v, (bytes, bytearray)) else v for k, v in r.items()}
                        for r in rows]

            assert len(by_fastavro) == 1 and as_printed(by_fastavro) == by_java == as_printed(by_spark), what
    assert spark.range(3).count() == 3, "the engine is still up"


def test_the_walk_and_the_decoding_ways_value_checks_agree(spark):
    """The decoding way's own checks of decoded values (route.VALUE_CHECKS, the uuid form) refuse
    what the strict walk refuses, in the same words: decoded by Avro's reader with no walk before
    it, each body gets the reason the walk gives."""
    schema = _fields(("s", "string"), ("days", {"type": "array", "items": DAY}), ("at", {
        "type": "long", "logicalType": "timestamp-micros"}), ("u", UUID), ("m", {"type": "map", "values": "string"}))

    def body_of(s=b"ok", days=(1,), at=0, u=b"123e4567-e89b-12d3-a456-426614174000", m=b"v"):
        return (_long(len(s)) + s + (_long(len(days)) + b"".join(_long(d) for d in days) if days else b"") + _long(0)
                + _long(at) + _long(len(u)) + u + _long(1) + _long(1) + b"k" + _long(len(m)) + m + _long(0))

    bodies = [body_of(), body_of(s=b"\xff"), body_of(days=(1, -719_163)), body_of(at=253_402_300_800_000_000),
              body_of(u=b"not-a-uuid"), body_of(m=b"\xed\xa0\x80")]
    walked = classified(spark, schema, bodies, None, None, vouch=False)
    rows = [("t", 0, offset, 1_700_000_000_000, None, None, frame(SID, b)) for offset, b in enumerate(bodies)]
    framed = frame_columns(raw_frame(spark, rows))
    unwalked = framed.withColumn("_rec", from_avro(F.col("_body"), json.dumps(schema), {"mode": "PERMISSIVE"}))
    checked = classify(unwalked, topic_cfg("t"), "t", SID, schema, [])
    by_values = {r["_kafka_offset"]: r["_reason"] for r in checked.select("_kafka_offset", "_reason").collect()}
    assert by_values[0] is None and len([r for r in by_values.values() if r]) == len(bodies) - 1
    assert by_values == {o: r["_reason"] for o, r in walked.items()}
