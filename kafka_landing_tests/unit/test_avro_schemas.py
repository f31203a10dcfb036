"""Which writer schemas can land, and the schema rewrites that tell a value out of range
from a corrupt body. Pure JSON in, JSON out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.avro_landing import avro_schemas
from kafka_landing.avro_landing.avro_schemas import SchemaError, check_landable, parse

DEMO = sorted((Path(avro_schemas.__file__).parents[1] / "demo" / "schemas").glob("*.avsc"))
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
