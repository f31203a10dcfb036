"""Hours of table evo.<table> under every schema change a registry accepts: v1, v2 (BACKWARD from v1:
promotions, string -> bytes, a nested optional field, an enum symbol, a field made nullable, one with
a default removed, one added), v3 (long -> double), and one hour mixing v1 and v2 (`HOURS`), with edge
values; landing files written by hand with fastavro as landing writes them (`land_evolving`), and
what every reader must read back, the widest type of each field and the value as produced
(`check_rows`)."""

from __future__ import annotations

import copy
import io
from decimal import Decimal

import fastavro

from kafka_landing.avro_landing.avro_schemas import landing_schema
from kafka_landing.handoff.manifests import DoneFile, LandedFile
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.helpers import done_file

ADDR_V1 = {"type": "record", "name": "Addr", "fields": [{"name": "street", "type": "string"}]}
ADDR_V2 = {"type": "record", "name": "Addr", "fields": [
    {"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "string"], "default": None}]}


def _dec(p, s):
    return {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s}


V1 = {"type": "record", "name": "Pay", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": "int"},
    {"name": "score", "type": "float"},
    {"name": "price", "type": _dec(10, 2)},
    {"name": "note", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "int"}},
    {"name": "attrs", "type": {"type": "map", "values": "float"}},
    {"name": "addr", "type": ADDR_V1},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "qty", "type": "int"},
    {"name": "legacy", "type": "string", "default": "x"},
]}
# BACKWARD from v1: promotions, string -> bytes, a nested optional field, an enum symbol, a
# field made nullable, a field with a default removed, a new non-null field with a default.
V2 = copy.deepcopy(V1)
V2["fields"] = [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": "long"},
    {"name": "score", "type": "double"},
    {"name": "price", "type": _dec(12, 3)},
    {"name": "note", "type": "bytes"},
    {"name": "tags", "type": {"type": "array", "items": "long"}},
    {"name": "attrs", "type": {"type": "map", "values": "double"}},
    {"name": "addr", "type": ADDR_V2},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "qty", "type": ["null", "int"], "default": None},
    {"name": "region", "type": "string", "default": "eu"},
]
V3 = copy.deepcopy(V2)  # long -> double
V3["fields"][1] = {"name": "amount", "type": "double"}

ROWS = {
    1: (V1, {"id": 1, "amount": 2**31 - 1, "score": 1.5, "price": Decimal("12345678.90"), "note": "héllo",
             "tags": [1, -(2**31)], "attrs": {"a": 0.25}, "addr": {"street": "Main"}, "kind": "B", "qty": 3,
             "legacy": "old"}),
    2: (V2, {"id": 2, "amount": 2**40, "score": 0.1, "price": Decimal("123456789.123"), "note": b"\x00\xff",
             "tags": [2**40], "attrs": {}, "addr": {"street": "High", "zip": "123"}, "kind": "C", "qty": None,
             "region": "us"}),
    3: (V3, {"id": 3, "amount": 1.5, "score": -0.0, "price": Decimal("-0.001"), "note": b"",
             "tags": [], "attrs": {"z": float("inf")}, "addr": {"street": "", "zip": None}, "kind": "A", "qty": 7,
             "region": "eu"}),
    4: (V1, {"id": 4, "amount": -5, "score": -2.0, "price": Decimal("-99999999.99"), "note": "𝄞",
             "tags": [], "attrs": {"k": -1.0}, "addr": {"street": "Side"}, "kind": "A", "qty": 0, "legacy": "x"}),
    5: (V2, {"id": 5, "amount": -(2**63), "score": 3.0, "price": Decimal("0.000"), "note": b"b",
             "tags": [], "attrs": {}, "addr": {"street": "Low", "zip": None}, "kind": "B", "qty": 1,
             "region": "eu"}),
}
IDS = {id(V1): 1, id(V2): 2, id(V3): 3}
# hour -> the records it holds: v1, v2, v3, then one hour mixing v1 and v2
HOURS = {"2026-03-01T00": [1], "2026-03-01T01": [2], "2026-03-01T02": [3], "2026-03-01T03": [4, 5]}

# What every reader must return: the widest type of each field, the value as produced.
EXPECTED = {
    1: {"amount": float(2**31 - 1), "score": 1.5, "price": Decimal("12345678.900"), "note": "héllo".encode(),
        "tags": [1, -(2**31)], "addr": {"street": "Main", "zip": None}, "kind": "B", "qty": 3, "legacy": "old",
        "region": None},
    2: {"amount": float(2**40), "score": 0.1, "price": Decimal("123456789.123"), "note": b"\x00\xff",
        "tags": [2**40], "addr": {"street": "High", "zip": "123"}, "kind": "C", "qty": None, "legacy": None,
        "region": "us"},
    3: {"amount": 1.5, "score": -0.0, "price": Decimal("-0.001"), "note": b"", "tags": [],
        "addr": {"street": "", "zip": None}, "kind": "A", "qty": 7, "legacy": None, "region": "eu"},
    4: {"amount": -5.0, "score": -2.0, "price": Decimal("-99999999.990"), "note": "𝄞".encode(), "tags": [],
        "addr": {"street": "Side", "zip": None}, "kind": "A", "qty": 0, "legacy": "x", "region": None},
    5: {"amount": float(-(2**63)), "score": 3.0, "price": Decimal("0.000"), "note": b"b", "tags": [],
        "addr": {"street": "Low", "zip": None}, "kind": "B", "qty": 1, "legacy": None, "region": "eu"},
}
ATTRS = {1: {"a": 0.25}, 2: {}, 3: {"z": float("inf")}, 4: {"k": -1.0}, 5: {}}


def land_evolving(store: LocalStore, table: str, hour: str) -> DoneFile:
    """The hour's landing files (one per schema id) and its done file, as landing writes them."""
    files = []
    by_schema: dict[int, list[dict]] = {}
    schemas = {}
    for rid in HOURS[hour]:
        schema, rec = ROWS[rid]
        schemas[IDS[id(schema)]] = schema
        by_schema.setdefault(IDS[id(schema)], []).append(
            {**rec, "_kafka_topic": "t", "_kafka_partition": 0, "_kafka_offset": rid, "_kafka_timestamp": 0,
             "_kafka_key": None, "_kafka_headers": None})
    for sid, recs in sorted(by_schema.items()):
        schema = schemas[sid]
        rel = f"tables/evo/{table}/hour={hour}/t+0+evo+{table}+{sid}+{recs[0]['_kafka_offset']}.avro"
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(landing_schema(schema)), recs)
        store.write_atomic(rel, buf.getvalue())
        files.append(LandedFile(rel, len(recs), len(buf.getvalue()), 0, recs[0]["_kafka_offset"],
                                recs[-1]["_kafka_offset"], sid))
    return done_file("t", "evo", table, hour, files)


def check_rows(rows: list[dict]) -> None:
    """`rows` (every row of table evo.<table>, in any order) hold what every reader must read: EXPECTED."""
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id) == [1, 2, 3, 4, 5]
    for rid, want in EXPECTED.items():
        got = {k: by_id[rid][k] for k in want}
        assert got == want, (rid, got)
        assert dict(by_id[rid]["attrs"]) == ATTRS[rid], rid
