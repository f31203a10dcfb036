"""The body check (decode.BODY_CHECK, jvm/splice FastCheck): the bodies it vouches for land without
being decoded, so vouching must change nothing a landing shows. Over every Avro type and edge value
(test_value_fidelity's strategies), with bodies cut short, bytes flipped and bytes appended, and
with routing and event-time fields drawn: the same records land, to the same tables and event
hours, and every other record is a dead letter with the same reason, whether the check may vouch
or not. And a body whose sized array block lies about its size (which Avro's reader ignores and
Avro's skip trusts) is a dead letter saying so, not a record the splice writer would copy wrong."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from kafka_landing.avro_landing.decode import BAD_BLOCKS, LANDS, Vouch, decode_checked, frame_columns
from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.route import classify
from kafka_landing.avro_landing.write import write_good
from kafka_landing.config import Route
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.integration.test_decode import record_schema, topic_cfg
from kafka_landing_tests.integration.test_splice_writer import SETTINGS, _varint, raw_frame
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
    reason = f"corrupt body for schema id {SID}: an array or map block gives a byte size that is not the size of its items"
    assert [(got[o]["status"], got[o]["_reason"]) for o in range(len(bodies))] == \
        [(LANDS, None), (LANDS, None)] + [(BAD_BLOCKS, reason)] * 3
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
