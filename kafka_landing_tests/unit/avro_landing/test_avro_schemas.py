"""Which writer schemas can land, and the schema rewrites that tell a value out of range
from a corrupt body. Pure JSON in, JSON out."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.avro_landing import avro_schemas
from kafka_landing.avro_landing.avro_schemas import SchemaError, check_landable, parse
from kafka_landing.spark_setup import spark_readable
from kafka_landing_tools.demo import generate

DEMO = sorted(generate.SCHEMAS.glob("*.avsc"))
assert DEMO, "the demo schemas moved: this test would check nothing"


def rec(fields, name="R", **kw):
    return {"type": "record", "name": name, "fields": fields, **kw}


def dec(precision, scale=2):
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


@pytest.mark.parametrize("path", DEMO, ids=lambda p: p.name)
def test_the_demo_schemas_land(path):
    assert parse(path.read_text())["type"] == "record"


@pytest.mark.parametrize("text, match", [
    ("not json {", "not valid JSON"),
    ('"string"', r'is "string", not a record'),
    ('["null", "string"]', "not a record"),
    ('{"type": "enum", "name": "E", "symbols": ["A"]}', r'is "enum", not a record'),
    ('{"type": "record", "name": "R"}', "no valid 'fields'"),
])
def test_what_is_not_a_record_cannot_land(text, match):
    with pytest.raises(SchemaError, match=match):
        parse(text)


@pytest.mark.parametrize("schema, match", [
    (rec([{"name": "_kafka_offset", "type": "long"}]), "field '_kafka_offset' clashes"),
    (rec([{"name": "_KAFKA_whatever", "type": "long"}]), "field '_KAFKA_whatever' clashes"),
    (rec([{"name": "_kl_Part", "type": "long"}]), "field '_kl_Part' clashes"),
    (rec([{"name": avro_schemas.OK_MARKER, "type": "boolean"}]), "clashes"),
    (rec([{"name": "Id", "type": "long"}, {"name": "iD", "type": "long"}]), "fields 'Id' and 'iD' differ only in case"),
    (rec([{"name": "o", "type": {"type": "array", "items": rec([{"name": "x", "type": "int"}, {"name": "X", "type": "int"}], "In")}}]),
     r"fields 'x' and 'X' of 'o\[\]' differ only in case"),
    (rec([{"name": "m", "type": ["null", {"type": "map", "values": dec(39)}]}]), r"field 'm\{\}' is decimal\(39, 2\)"),
    (rec([{"name": "next", "type": ["null", "R"]}]), "field 'next' holds record 'R' inside itself"),
    (rec([{"name": "kids", "type": {"type": "array", "items": "x.R"}}], namespace="x"), "field 'kids\\[\\]' holds record 'x.R'"),
])
def test_schemas_that_cannot_land_name_the_field(schema, match):
    with pytest.raises(SchemaError, match=match):
        check_landable(schema)
    with pytest.raises(SchemaError, match=match):
        parse(json.dumps(schema))


def test_what_can_land():
    check_landable(rec([{"name": "kafka_offset", "type": "long"}, {"name": "a_kafka_b", "type": "long"},
                        {"name": "d", "type": dec(38)}, {"name": "o", "type": rec([{"name": "id", "type": "int"}], "O")},
                        {"name": "p", "type": "O"}]))  # the same record twice is not recursion


LOGICAL = st.sampled_from([
    {"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "int", "logicalType": "date"}, dec(6, 3), {"type": "string", "logicalType": "uuid"},
    {"type": "int", "logicalType": "time-millis"}, {"type": "long", "logicalType": "time-micros"},
])
PLAIN = st.sampled_from(["long", "int", "string", "boolean", "double"])


def types(depth=2):
    leaf = st.one_of(LOGICAL, PLAIN)
    if depth == 0:
        return leaf
    sub = types(depth - 1)
    return st.one_of(leaf, st.builds(lambda t: ["null", t], sub), st.builds(lambda t: {"type": "array", "items": t}, sub),
                     st.builds(lambda t: {"type": "map", "values": t}, sub))


@st.composite
def schemas(draw):
    n = draw(st.integers(1, 5))
    return rec([{"name": f"f{i}", "type": draw(types())} for i in range(n)], name="S")


def _no_logical(t) -> bool:
    return "logicalType" not in json.dumps(t)


@given(schemas())
def test_stripping_logical_types_keeps_the_wire_format(schema):
    stripped = avro_schemas.strip_logical_types(schema)
    assert _no_logical(stripped)
    assert avro_schemas.strip_logical_types(stripped) == stripped
    assert len(avro_schemas.logical_types(schema)) == json.dumps(schema).count("logicalType")
    fastavro.parse_schema(stripped)  # still a valid schema
    one = avro_schemas.with_field_stripped(schema, "f0")
    assert _no_logical(one["fields"][0]["type"]) and one["fields"][1:] == schema["fields"][1:]


def test_a_value_out_of_range_decodes_with_the_field_stripped():
    schema = rec([{"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}, {"name": "d", "type": dec(4)}])
    raw = rec([{"name": "t", "type": "long"}, {"name": "d", "type": "bytes"}])
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(raw), {"t": 2**62, "d": (10**9).to_bytes(5, "big")})
    stripped = avro_schemas.strip_logical_types(schema)
    assert stripped == raw
    assert fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), fastavro.parse_schema(stripped))["t"] == 2**62
    with pytest.raises(OverflowError):  # as a timestamp the same bytes cannot be read
        fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), fastavro.parse_schema(schema))
    assert avro_schemas.logical_types(schema) == ["timestamp-millis", "decimal(4,2)"]


def fixed_dec(name, size, precision, scale=2):
    return {"type": "fixed", "name": name, "size": size, "logicalType": "decimal", "precision": precision, "scale": scale}


def test_decimals_that_spark_would_wrap_are_read_wider():
    """Spark keeps a decimal of precision <= 18 in the low 64 bits of its unscaled value: such decimals
    are read as wide as their bytes allow, wherever they are; nothing else changes."""
    schema = rec([
        {"name": "a", "type": dec(18)}, {"name": "tiny", "type": dec(1, 0)}, {"name": "wide", "type": dec(30)},
        {"name": "f12", "type": fixed_dec("F12", 12, 10)}, {"name": "f8", "type": fixed_dec("F8", 8, 18)},
        {"name": "f9", "type": fixed_dec("F9", 9, 5)}, {"name": "f20", "type": fixed_dec("F20", 20, 18)},
        {"name": "again", "type": "F12"},  # a reference: widened where the fixed is defined
        {"name": "bad_scale", "type": dec(2, 5)},  # not a valid decimal: Avro reads plain bytes, left so
        {"name": "bad_fixed", "type": fixed_dec("F4", 4, 18)},  # 4 bytes cannot declare 18 digits: left so
        {"name": "in", "type": rec([{"name": "d", "type": dec(9)}], name="In")},
        {"name": "arr", "type": {"type": "array", "items": dec(12)}},
        {"name": "map", "type": {"type": "map", "values": fixed_dec("F16", 16, 18, 6)}},
        {"name": "u", "type": ["null", "string", dec(7)]},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ])
    wide = avro_schemas.widened_decimals(schema)
    types = {f["name"]: f["type"] for f in wide["fields"]}
    assert types["a"] == dec(38) and types["tiny"] == dec(38, 0) and types["wide"] == dec(30)
    assert types["f12"] == fixed_dec("F12", 12, 28) and types["f8"] == fixed_dec("F8", 8, 18)
    assert types["f9"] == fixed_dec("F9", 9, 21) and types["f20"] == fixed_dec("F20", 20, 38)
    assert types["again"] == "F12" and types["bad_scale"] == dec(2, 5) and types["bad_fixed"] == fixed_dec("F4", 4, 18)
    assert types["in"]["fields"][0]["type"] == dec(38) and types["arr"]["items"] == dec(38)
    assert types["map"]["values"] == fixed_dec("F16", 16, 38, 6) and types["u"] == ["null", "string", dec(38, 2)]
    assert types["t"] == schema["fields"][-1]["type"]
    assert avro_schemas.strip_logical_types(wide) == avro_schemas.strip_logical_types(schema), "the same wire format"
    assert avro_schemas.widened_decimals(wide) == wide
    assert schema["fields"][0]["type"] == dec(18), "the writer schema is not changed"
    plain = rec([{"name": "n", "type": "long"}, {"name": "f8", "type": fixed_dec("F8", 8, 18)}, {"name": "w", "type": dec(20)}])
    assert avro_schemas.widened_decimals(plain) == plain, "nothing can wrap: decoded as declared"
    # A dead letter names a field's logical types, those of the named types it refers to included.
    assert avro_schemas.field_logical_types(schema, "again") == ["decimal(10,2)"]
    assert avro_schemas.field_logical_types(schema, "u") == ["decimal(7,2)"]
    node = rec([{"name": "v", "type": dec(4)}, {"name": "next", "type": ["null", "Node"]}], name="Node")
    assert avro_schemas.field_logical_types(rec([{"name": "n", "type": node}, {"name": "m", "type": "Node"}]), "m") == [
        "decimal(4,2)"]


def test_the_digits_a_fixed_holds():
    """Avro's rule, floor(log10(2**(8n - 1) - 1)), as Avro Java computes it."""
    assert [avro_schemas.fixed_decimal_max_precision(n) for n in range(1, 18)] == [
        math.floor(math.log10(2) * (8 * n - 1)) for n in range(1, 18)] == [
        2, 4, 6, 9, 11, 14, 16, 18, 21, 23, 26, 28, 31, 33, 35, 38, 40]


@given(schemas())
def test_what_spark_reads_is_the_same_wire_format_without_the_time_of_day_types(schema):
    """Spark 4.2 reads time-micros as its TIME type and then refuses every query of it: Spark reads
    records with the time-of-day logical types removed (their numbers), every other one kept."""
    readable = spark_readable(schema)
    assert not {"time-millis", "time-micros"} & set(avro_schemas.logical_types(readable))
    assert [lt for lt in avro_schemas.logical_types(schema) if lt not in ("time-millis", "time-micros")] \
        == avro_schemas.logical_types(readable)
    assert avro_schemas.strip_logical_types(readable) == avro_schemas.strip_logical_types(schema)
    fastavro.parse_schema(readable)


def test_the_decoding_reader_reads_a_time_of_day_as_its_number():
    schema = rec([{"name": "t", "type": {"type": "long", "logicalType": "time-micros"}},
                  {"name": "m", "type": ["null", {"type": "int", "logicalType": "time-millis"}]},
                  {"name": "d", "type": dec(4)}])
    reader = avro_schemas.marked_reader_schema(schema)
    assert [f["type"] for f in reader["fields"][:3]] == ["long", ["null", "int"], dec(4)]
