"""Which writer schemas can land, and the schemas Spark decodes with. Pure JSON in, JSON out."""

from __future__ import annotations

import json
import math

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.avro_landing import avro_schemas
from kafka_landing.avro_landing.avro_schemas import SchemaError, check_landable, parse
from kafka_landing.avro_types import strip_logical_types
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


def logical_types(t) -> list[str]:
    """The logical types inside an Avro type, in order, e.g. ['timestamp-millis', 'decimal(4,2)']."""
    if isinstance(t, list):
        return [x for b in t for x in logical_types(b)]
    if not isinstance(t, dict):
        return []
    found = []
    if "logicalType" in t:
        lt = t["logicalType"]
        found.append(f"{lt}({t.get('precision')},{t.get('scale', 0)})" if lt == "decimal" else str(lt))
    kind = t.get("type")
    if kind in ("record", "error"):
        found += [x for f in t.get("fields") or [] for x in logical_types(f.get("type"))]
    elif kind == "array":
        found += logical_types(t.get("items"))
    elif kind == "map":
        found += logical_types(t.get("values"))
    elif isinstance(kind, (dict, list)):
        found += logical_types(kind)
    return found


@given(schemas())
def test_stripping_logical_types_keeps_the_wire_format(schema):
    stripped = strip_logical_types(schema)
    assert _no_logical(stripped)
    assert strip_logical_types(stripped) == stripped
    assert len(logical_types(schema)) == json.dumps(schema).count("logicalType")
    fastavro.parse_schema(stripped)  # still a valid schema


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
    assert not {"time-millis", "time-micros"} & set(logical_types(readable))
    assert [lt for lt in logical_types(schema) if lt not in ("time-millis", "time-micros")] \
        == logical_types(readable)
    assert strip_logical_types(readable) == strip_logical_types(schema)
    fastavro.parse_schema(readable)


def test_the_decoding_reader_reads_a_time_of_day_as_its_number():
    schema = rec([{"name": "t", "type": {"type": "long", "logicalType": "time-micros"}},
                  {"name": "m", "type": ["null", {"type": "int", "logicalType": "time-millis"}]},
                  {"name": "d", "type": dec(4)}])
    reader = avro_schemas.marked_reader_schema(schema)
    assert [f["type"] for f in reader["fields"][:3]] == ["long", ["null", "int"], dec(4)]
