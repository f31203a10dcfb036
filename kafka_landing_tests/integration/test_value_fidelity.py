"""Value fidelity as a property (issue 17 item 5), against the real broker, registry and Spark:
hypothesis builds an Avro record schema over every primitive, logical and complex type (nested
records, arrays of records, maps, unions with null, enums, fixed, decimals of precision 1-38 in
bytes and in fixed, the five date and time types, time-millis/micros, uuid) and valid values with
their edges (min/max int and long, NaN, +-inf, -0.0, empty strings and collections, 0001-01-01
and 9999-12-31, non-BMP text). The schema is registered, the records produced Confluent-framed,
the hour landed by Spark and loaded into the Iceberg warehouse; every value reads back from the
landing Avro file (fastavro) and the Iceberg table's data files (pyarrow) as produced, or its record
is a dead letter whose reason names its field.

Bodies are written from the raw types under the logical ones (the wire's own values), and each
value is compared in one canonical form per Avro type: floats by their float32 / float64 bits
(NaN as NaN, -0.0 keeps its sign; the warehouse widens float to double, exactly), timestamps as
UTC microseconds, dates as days, decimals as Decimal, enums and uuids as text, maps as dicts."""

from __future__ import annotations

import io
import math
import struct
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Context, Decimal

import fastavro
import pyarrow.parquet as pq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing_tests.integration.test_decode import (  # noqa: F401 - sr is a fixture
    Y1_MS,
    YEAR_10000_MS,
    assert_conserved,
    land,
    produce_values,
    record_schema,
    register,
    sr,
    topic_cfg,
)
from kafka_landing_tests.integration.test_decode_fidelity import raw_type

Y1_US, YEAR_10000_US = Y1_MS * 1000, YEAR_10000_MS * 1000
Y1_DAY, LAST_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31 in days since 1970-01-01
DAY_MS = 86_400_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
INT32, INT64 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)


def edged(edges, general):
    """Half the draws an edge value, half anything valid."""
    return st.one_of(st.sampled_from(edges), general)


# --- the leaf types: (Avro type, strategy of raw wire values) -------------------------------------

def fixed_max_precision(size: int) -> int:
    return len(str(2 ** (8 * size - 1) - 1)) - 1


def min_fixed_size(p: int) -> int:
    return next(n for n in range(1, 17) if fixed_max_precision(n) >= p)


def unscaled(p: int):
    top = 10**p - 1
    return edged([0, 1, -1, top, -top], st.integers(-top, top))


class Names:
    """Avro named types need unique names in one schema."""

    def __init__(self):
        self.n = 0

    def __call__(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"


FLOATS = [0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf]
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)


@st.composite
def leaf(draw, names: Names, kind: str | None = None):
    kind = kind or draw(st.sampled_from(LEAF_KINDS))
    if kind == "boolean":
        return kind, st.booleans()
    if kind == "int":
        return kind, edged(list(INT32) + [0, -1], st.integers(*INT32))
    if kind == "long":
        return kind, edged(list(INT64) + list(INT32) + [0], st.integers(*INT64))
    if kind == "float":
        return kind, edged(FLOATS + [3.4028234663852886e38, 1e-45], st.floats(width=32))
    if kind == "double":
        return kind, edged(FLOATS + [1.7976931348623157e308, 5e-324], st.floats())
    if kind == "string":
        return kind, edged(["", "𝄞", "é\x00😀"], TEXT)
    if kind == "bytes":
        return kind, edged([b"", b"\x00", b"\xff" * 3], st.binary(max_size=8))
    if kind == "enum":
        symbols = draw(st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True), min_size=1,
                                max_size=4, unique=True))
        return {"type": "enum", "name": names("E"), "symbols": symbols}, st.sampled_from(symbols)
    if kind == "fixed":
        size = draw(st.integers(0, 6))
        return {"type": "fixed", "name": names("F"), "size": size}, st.binary(min_size=size, max_size=size)
    if kind in ("decimal-bytes", "decimal-fixed"):
        p = draw(st.integers(1, 38))
        s = draw(st.integers(0, p))
        t = {"logicalType": "decimal", "precision": p, "scale": s}
        if kind == "decimal-bytes":
            return {"type": "bytes", **t}, unscaled(p)
        size = draw(st.integers(min_fixed_size(p), min(16, min_fixed_size(p) + 2)))
        return {"type": "fixed", "name": names("D"), "size": size, **t}, unscaled(p)
    if kind in ("timestamp-millis", "local-timestamp-millis"):
        return {"type": "long", "logicalType": kind}, edged([Y1_MS, YEAR_10000_MS - 1, 0, -1],
                                                            st.integers(Y1_MS, YEAR_10000_MS - 1))
    if kind in ("timestamp-micros", "local-timestamp-micros"):
        return {"type": "long", "logicalType": kind}, edged([Y1_US, YEAR_10000_US - 1, 0, -1],
                                                            st.integers(Y1_US, YEAR_10000_US - 1))
    if kind == "date":
        return {"type": "int", "logicalType": "date"}, edged([Y1_DAY, LAST_DAY, 0, -1], st.integers(Y1_DAY, LAST_DAY))
    if kind == "time-millis":
        return {"type": "int", "logicalType": kind}, edged([0, DAY_MS - 1], st.integers(0, DAY_MS - 1))
    if kind == "time-micros":
        return {"type": "long", "logicalType": kind}, edged([0, DAY_MS * 1000 - 1], st.integers(0, DAY_MS * 1000 - 1))
    if kind == "uuid":
        return {"type": "string", "logicalType": "uuid"}, st.uuids().map(str)
    raise AssertionError(kind)


LEAF_KINDS = ["boolean", "int", "long", "float", "double", "string", "bytes", "enum", "fixed", "decimal-bytes",
              "decimal-fixed", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
              "local-timestamp-micros", "date", "time-millis", "time-micros", "uuid"]


@st.composite
def any_type(draw, names: Names, depth: int):
    """A complex type (record, array, map, union with null) over smaller ones, or a leaf."""
    kind = draw(st.sampled_from(["leaf", "leaf", "record", "array", "map", "nullable"] if depth > 0 else ["leaf"]))
    if kind == "leaf":
        return draw(leaf(names))
    if kind == "record":
        fields = draw(st.lists(any_type(names, depth - 1), min_size=1, max_size=3))
        schema = {"type": "record", "name": names("R"), "fields": [
            {"name": f"g{i}", "type": t} for i, (t, _) in enumerate(fields)]}
        return schema, st.fixed_dictionaries({f"g{i}": v for i, (_, v) in enumerate(fields)})
    if kind == "array":
        # Arrays of records as often as arrays of anything else.
        items, values = draw(st.one_of(any_type(names, depth - 1), record_of(names, depth - 1)))
        return {"type": "array", "items": items}, st.lists(values, max_size=3)
    if kind == "map":
        values_t, values = draw(any_type(names, depth - 1))
        return {"type": "map", "values": values_t}, st.dictionaries(edged(["", "𝄞"], TEXT), values, max_size=3)
    t, values = draw(any_type(names, depth - 1))
    if isinstance(t, list):
        return t, values
    null_first = draw(st.booleans())
    # Avro: a union's default is of its first branch; null-first is the common producer's form.
    return (["null", t] if null_first else [t, "null"]), st.one_of(st.none(), values)


@st.composite
def record_of(draw, names: Names, depth: int):
    fields = draw(st.lists(leaf(names), min_size=1, max_size=3))
    schema = {"type": "record", "name": names("R"), "fields": [{"name": f"h{i}", "type": t}
                                                              for i, (t, _) in enumerate(fields)]}
    return schema, st.fixed_dictionaries({f"h{i}": v for i, (_, v) in enumerate(fields)})


@st.composite
def schema_and_records(draw):
    """One record schema: a field of every leaf type (with decimals at drawn precisions, bytes and
    fixed, more than once), then generated complex fields; and several records for it."""
    names = Names()
    fields = [draw(leaf(names, k)) for k in LEAF_KINDS]
    fields += [draw(leaf(names, k)) for k in ("decimal-bytes", "decimal-fixed", "decimal-bytes", "decimal-fixed")]
    fields += [draw(any_type(names, 3)) for _ in range(draw(st.integers(3, 6)))]
    schema = record_schema("Fid", [{"name": f"f{i}", "type": t} for i, (t, _) in enumerate(fields)])
    row = st.fixed_dictionaries({f"f{i}": v for i, (_, v) in enumerate(fields)})
    return schema, draw(st.lists(row, min_size=10, max_size=24))


# --- the wire: raw types under the logical ones, decimals as two's complement ---------------------

def raw_value(t, v):
    """The wire value of `v` (decimals: their unscaled integer) for the raw type."""
    if v is None:
        return None
    if isinstance(t, list):
        return raw_value(next(b for b in t if b != "null"), v)
    if isinstance(t, str):
        return v
    if t.get("logicalType") == "decimal":
        size = t.get("size") or (v.bit_length() + 8) // 8
        return v.to_bytes(size, "big", signed=True)
    if t["type"] == "record":
        return {f["name"]: raw_value(f["type"], v[f["name"]]) for f in t["fields"]}
    if t["type"] == "array":
        return [raw_value(t["items"], x) for x in v]
    if t["type"] == "map":
        return {k: raw_value(t["values"], x) for k, x in v.items()}
    return v


def body(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(raw_type(schema)), raw_value(schema, record))
    return buf.getvalue()


# --- one canonical form per Avro type: what was produced, and what a reader gives back ------------

def float_key(v, width: str):
    if not isinstance(v, float):
        return ("not a float", v)
    if math.isnan(v):
        return "NaN"
    return width, struct.unpack("<I" if width == "f" else "<Q", struct.pack("<" + width, v))[0]


def us(v) -> int | tuple:
    if not isinstance(v, datetime):
        return ("not a datetime", v)
    if v.tzinfo is not None:
        assert v.utcoffset() == timedelta(0), v
        v = v.replace(tzinfo=None)
    return (v - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def time_us(v) -> int | tuple:
    if isinstance(v, time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return ("not a time", v)


def expected(t, v):
    """The canonical form of the produced value `v`."""
    if v is None:
        return None
    if isinstance(t, list):
        return expected(next(b for b in t if b != "null"), v)
    if isinstance(t, str):
        return float_key(v, "f" if t == "float" else "d") if t in ("float", "double") else v
    lt, kind = t.get("logicalType"), t["type"]
    if lt == "decimal":
        return Decimal(v).scaleb(-t["scale"], Context(prec=80))
    if lt in ("timestamp-millis", "local-timestamp-millis"):
        return v * 1000
    if lt in ("timestamp-micros", "local-timestamp-micros", "date", "time-micros"):
        return v
    if lt == "time-millis":
        return v * 1000
    if lt == "uuid":
        return v.lower()
    if kind == "record":
        return {f["name"]: expected(f["type"], v[f["name"]]) for f in t["fields"]}
    if kind == "array":
        return [expected(t["items"], x) for x in v]
    if kind == "map":
        return {k: expected(t["values"], x) for k, x in v.items()}
    return v  # enum (its symbol), fixed (bytes)


def read_back(t, v, reader: str):
    """The canonical form of what `reader` ('avro' or 'iceberg') gave back for type `t`."""
    if v is None:
        return None
    if isinstance(t, list):
        return read_back(next(b for b in t if b != "null"), v, reader)
    if isinstance(t, str):
        if t in ("float", "double"):
            return float_key(v, "f" if t == "float" else "d")
        if t in ("int", "long"):
            return v if type(v) is int else ("not an int", v)
        return v
    lt, kind = t.get("logicalType"), t["type"]
    if lt == "decimal":
        return v if isinstance(v, Decimal) else ("not a Decimal", v)
    if lt in ("timestamp-millis", "local-timestamp-millis", "timestamp-micros", "local-timestamp-micros"):
        if isinstance(v, datetime) and reader == "iceberg" and lt.startswith("timestamp"):
            assert v.tzinfo is not None, f"{lt} reads back from Iceberg as a naive datetime: {v!r}"
        return us(v)
    if lt == "date":
        return (v - date(1970, 1, 1)).days if isinstance(v, date) else ("not a date", v)
    if lt in ("time-millis", "time-micros"):
        if isinstance(v, int):  # Spark has no time type: it keeps the wire's number
            return v * 1000 if lt == "time-millis" else v
        return time_us(v)
    if lt == "uuid":
        return str(v).lower()
    if kind == "record":
        return {f["name"]: read_back(f["type"], v.get(f["name"]), reader) for f in t["fields"]}
    if kind == "array":
        return [read_back(t["items"], x, reader) for x in v]
    if kind == "map":
        pairs = v.items() if isinstance(v, dict) else v  # pyarrow gives a map as (key, value) pairs
        return {k: read_back(t["values"], x, reader) for k, x in pairs}
    return v


def type_name(t) -> str:
    if isinstance(t, list):
        return "|".join(type_name(b) for b in t)
    if isinstance(t, str):
        return t
    return t.get("logicalType") and f"{t['logicalType']}({t.get('precision', '')},{t.get('scale', '')})" \
        or t["type"]


# --- the property ---------------------------------------------------------------------------------

# No shrinking: each example is a Spark landing; the failure message names field, type and value.
@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(case=schema_and_records())
def test_every_generated_value_lands_and_loads_as_produced_or_is_a_dead_letter_naming_its_field(
        case, make_topic, send, sr, registry, kafka, spark, tmp_path):
    schema, records = case
    topic = make_topic()
    sid = register(sr, topic, schema)
    produce_values(send, topic, [frame(sid, body(schema, r)) for r in records])
    run = tmp_path / uuid.uuid4().hex[:8]  # one store and one warehouse per example
    store = LocalStore(run / "landing")
    plan, result = land(spark, store, kafka, topic_cfg(topic), schema_fetcher(registry))
    landed, dead = assert_conserved(store, plan, result)

    fields = {f["name"]: f["type"] for f in schema["fields"]}
    for offset, d in dead.items():
        named = [n for n in fields if repr(n) in d["reason"]]
        assert named, f"offset {offset}: dead letter {d['reason']!r} names no field"

    wh = IcebergWarehouse(str(run / "wh"))
    if landed:
        wh.load_partition(store, result.done["t"], lambda: spark)
        # The files the table's current snapshot lists, read as they are (no load writes a delete
        # file): pyiceberg 0.12's own reader gives a null list<struct> back as [] (iceberg-python#3833).
        files = [task.file.file_path for task in wh.table("d", "t").scan().plan_files()]
        rows = {r["_kafka_offset"]: r for r in pq.read_table(files, partitioning=None).to_pylist()}
        assert sorted(rows) == sorted(landed), "every landed record is one warehouse row"
    else:
        rows = {}

    mismatches = []
    for offset, got in landed.items():
        for reader, row in (("avro", got), ("iceberg", rows[offset])):
            for name, t in fields.items():
                want, have = expected(t, records[offset][name]), read_back(t, row[name], reader)
                if want != have:
                    mismatches.append(f"{reader} offset {offset} field {name} {type_name(t)}: produced "
                                      f"{records[offset][name]!r} -> expected {want!r}, read {have!r}")
    assert not mismatches, "\n".join(mismatches[:20])
    assert len(landed) + len(dead) == len(records)
