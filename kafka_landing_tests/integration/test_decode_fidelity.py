"""Every value lands as the producer wrote it, or its record is a dead letter naming the field
(issue 17 item 3), against the real broker, registry and Spark: decimals whose unscaled value is
wider than their declared precision, dates and times outside years 1-9999, a fixed of the wrong
size; and the edge dates and times read back from the Iceberg warehouse by every reader the
docs show. Bodies are encoded by hand (the raw types under the logical ones), so any value
can be written."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Context, Decimal
from pathlib import Path

import fastavro
import pandas as pd
import pytest

from kafka_landing.avro_landing import body_rules
from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing_tests.integration.test_decode import (  # noqa: F401 - sr is a fixture
    Y1_MS,
    YEAR_10000_MS,
    assert_conserved,
    avro_body,
    land,
    produce_values,
    record_schema,
    register,
    sr,
    topic_cfg,
)

Y1_US, YEAR_10000_US = Y1_MS * 1000, YEAR_10000_MS * 1000
Y1_DAY, LAST_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31 in days since 1970-01-01


def raw_type(t):
    """The same Avro type without its logical types: what the wire holds, any value writable."""
    if isinstance(t, list):
        return [raw_type(b) for b in t]
    if not isinstance(t, dict):
        return t
    out = {k: v for k, v in t.items() if k not in ("logicalType", "precision", "scale")}
    if out.get("type") == "record":
        out["fields"] = [{**f, "type": raw_type(f["type"])} for f in out["fields"]]
    elif out.get("type") == "array":
        out["items"] = raw_type(out["items"])
    elif out.get("type") == "map":
        out["values"] = raw_type(out["values"])
    return out if len(out) > 1 else out["type"]


def landed_file_schema(store, result) -> dict:
    (done,) = result.done.values()
    with open(Path(store.location(done.files[0].path)), "rb") as f:
        return fastavro.reader(f).writer_schema


# --- decimals: the unscaled value within the declared precision, or a dead letter -----------------

def dec(p: int, s: int, fixed: tuple[str, int] | None = None) -> dict:
    base = {"type": "bytes"} if fixed is None else {"type": "fixed", "name": fixed[0], "size": fixed[1]}
    return {**base, "logicalType": "decimal", "precision": p, "scale": s}


DECIMALS = record_schema("Dec", [
    {"name": "n", "type": "int"},
    {"name": "amount", "type": dec(18, 2)},
    {"name": "tiny", "type": dec(1, 0)},
    {"name": "fee", "type": dec(10, 2, ("Fee", 12))},
    {"name": "cents", "type": dec(18, 2, ("Cents", 8))},  # 8 bytes: never wider than 64 bits
    {"name": "mid", "type": dec(20, 2)},
    {"name": "big", "type": dec(38, 0)},
    {"name": "line", "type": record_schema("Line", [{"name": "price", "type": dec(9, 0)}, {"name": "qty", "type": "int"}])},
    {"name": "parts", "type": {"type": "array", "items": dec(18, 4)}},
    {"name": "rates", "type": {"type": "map", "values": dec(18, 6, ("Rate", 16))}},
    {"name": "tip", "type": ["null", dec(12, 2)], "default": None},
    {"name": "choice", "type": ["null", "string", dec(15, 3, ("Choice", 10))], "default": None},
    {"name": "refund", "type": "Fee"},  # a second field of the fixed decimal defined above, by name
])
SCALES = {"amount": 2, "tiny": 0, "fee": 2, "cents": 2, "mid": 2, "big": 0, "tip": 2, "choice": 3, "refund": 2}
SIZES = {"fee": 12, "cents": 8, "choice": 10, "refund": 12}


def twos(v: int, size: int | None = None) -> bytes:
    """Avro's decimal bytes: big-endian two's complement, minimal or of the given size."""
    return v.to_bytes(size or (v.bit_length() + 8) // 8, "big", signed=True)


GOOD_DECIMALS = {"amount": 12345, "tiny": 7, "fee": -999, "cents": 1, "mid": 10**19, "big": -(10**30),
                 "line": {"price": 42, "qty": 3}, "parts": [1, -2], "rates": {"a": 1_500_000}, "tip": None,
                 "choice": 5, "refund": 0}
MAX_DECIMALS = {"amount": 10**18 - 1, "tiny": -9, "fee": 10**10 - 1, "cents": -(10**18 - 1), "mid": -(10**20 - 1),
                "big": 10**38 - 1, "line": {"price": -(10**9 - 1), "qty": 0}, "parts": [10**18 - 1, -(10**18 - 1)],
                "rates": {"x": 10**18 - 1}, "tip": -(10**12 - 1), "choice": 10**15 - 1, "refund": -(10**10 - 1)}


def decimal_body(values: dict, padded: int | None = None) -> dict:
    """The raw record for unscaled `values`; `padded`: every bytes decimal sign-extended to that
    many bytes (valid Avro: the same value in a longer two's complement)."""
    def b(name, v):
        return twos(v, SIZES.get(name, padded))
    line = values["line"]
    return {
        **{k: b(k, values[k]) for k in ("amount", "tiny", "fee", "cents", "mid", "big", "refund")},
        "line": {"price": twos(line["price"], padded), "qty": line["qty"]},
        "parts": [twos(v, padded) for v in values["parts"]],
        "rates": {k: twos(v, 16) for k, v in values["rates"].items()},
        "tip": None if values["tip"] is None else twos(values["tip"], padded),
        "choice": None if values["choice"] is None else b("choice", values["choice"]),
    }


def as_landed(values: dict) -> dict:
    """What fastavro reads back from the landing file for `values` (decimals scaled)."""
    def d(v, s):
        return Decimal(v).scaleb(-s, Context(prec=60))  # exact: 38 digits are more than the default 28
    return {**{k: d(values[k], s) if values[k] is not None else None for k, s in SCALES.items()},
            "line": {"price": d(values["line"]["price"], 0), "qty": values["line"]["qty"]},
            "parts": [d(v, 4) for v in values["parts"]], "rates": {k: d(v, 6) for k, v in values["rates"].items()}}


def test_decimals_wider_than_their_precision_are_dead_letters_naming_the_field(
        make_topic, send, sr, registry, kafka, spark, store):
    """Spark builds a decimal of precision <= 18 from the low 64 bits of the unscaled value: 2**64 + 5
    as decimal(18,2) would land as 0.05. Any value wider than its precision, top-level or nested, in
    bytes or fixed, is a dead letter naming the field; values within it land exactly, whatever the
    length of their two's complement."""
    topic = make_topic()
    sid = register(sr, topic, DECIMALS)
    raw = raw_type(DECIMALS)
    wrap = 2**64 + 5

    def bad(**change):
        return {**GOOD_DECIMALS, **change}

    cases = [  # (unscaled values, field named by the dead letter or None, padding of the bytes)
        (GOOD_DECIMALS, None, None),
        (MAX_DECIMALS, None, None),
        (GOOD_DECIMALS, None, 16),
        (bad(amount=wrap), "amount", None),  # would land as 0.05
        (bad(amount=-(2**64) + 1234), "amount", None),
        (bad(amount=10**18), "amount", None),
        (bad(amount=2**200), "amount", None),  # wider than Spark's 38 digits too
        (bad(tiny=wrap), "tiny", None),  # would land as 5
        (bad(tiny=10), "tiny", None),
        (bad(fee=2**64 + 12345), "fee", None),  # fixed(12): would land as 123.45
        (bad(mid=10**20), "mid", None),
        (bad(big=10**38), "big", None),
        (bad(line={"price": -(2**64) + 999, "qty": 1}), "line", None),  # nested record: would land as 999
        (bad(parts=[1, 2**64 + 1]), "parts", None),  # array element
        (bad(rates={"a": 1, "b": 2**64 + 1}), "rates", None),  # map value, fixed(16)
        (bad(tip=wrap), "tip", None),  # ["null", decimal]
        (bad(choice=wrap), "choice", None),  # ["null", "string", fixed decimal]: a union member
        (bad(refund=-(2**64) + 1), "refund", None),  # the fixed decimal by reference
        (bad(amount=wrap, tip=wrap), "amount", None),  # the first in the body's order
    ]
    values = [frame(sid, avro_body(raw, {"n": i, **decimal_body(v, pad)})) for i, (v, _, pad) in enumerate(cases)]
    produce_values(send, topic, values)
    plan, result = land(spark, store, kafka, topic_cfg(topic), schema_fetcher(registry))
    landed, dead = assert_conserved(store, plan, result)

    expected_dead = {i: body_rules.reason(13, field, sid) for i, (_, field, _) in enumerate(cases) if field}
    assert {o: d["reason"] for o, d in dead.items()} == expected_dead
    assert {o: d["value"] for o, d in dead.items()} == {o: values[o] for o in expected_dead}
    assert sorted(landed) == [0, 1, 2]
    for o in landed:
        row = {k: landed[o][k] for k in as_landed(cases[o][0])}
        assert row == as_landed(cases[o][0]), o
    # The landing file keeps the producer's declared decimal types.
    fields = {f["name"]: f["type"] for f in landed_file_schema(store, result)["fields"]}
    assert (fields["amount"]["precision"], fields["amount"]["scale"]) == (18, 2)
    assert (fields["fee"]["type"], fields["fee"]["size"], fields["fee"]["precision"]) == ("fixed", 12, 10)
    assert fields["line"]["fields"][0]["type"]["precision"] == 9
    assert fields["rates"]["values"]["precision"] == 18


# --- dates and times: within years 1-9999 (the warehouse's range), or a dead letter ---------------

TIMES = record_schema("Tm", [
    {"name": "n", "type": "int"},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "lts_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ev", "type": record_schema("Ev", [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "on", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None}])},
    {"name": "days", "type": {"type": "array", "items": {"type": "int", "logicalType": "date"}}},
    {"name": "seen", "type": {"type": "map", "values": {"type": "long", "logicalType": "local-timestamp-millis"}}},
    {"name": "when", "type": ["null", "string", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
])
MID_MS = 1_700_000_000_123
GOOD_TIMES = {"ts_ms": MID_MS, "ts_us": MID_MS * 1000 + 456, "lts_ms": MID_MS, "lts_us": MID_MS * 1000 + 7,
              "day": 19_000, "ev": {"at": MID_MS * 1000, "on": 19_001}, "days": [1, 2], "seen": {"a": MID_MS},
              "when": MID_MS}
FIRST_TIMES = {"ts_ms": Y1_MS, "ts_us": Y1_US, "lts_ms": Y1_MS, "lts_us": Y1_US, "day": Y1_DAY,
               "ev": {"at": Y1_US, "on": Y1_DAY}, "days": [Y1_DAY], "seen": {"a": Y1_MS}, "when": Y1_MS}
LAST_TIMES = {"ts_ms": YEAR_10000_MS - 1, "ts_us": YEAR_10000_US - 1, "lts_ms": YEAR_10000_MS - 1,
              "lts_us": YEAR_10000_US - 1, "day": LAST_DAY, "ev": {"at": YEAR_10000_US - 1, "on": LAST_DAY},
              "days": [LAST_DAY, Y1_DAY], "seen": {"z": YEAR_10000_MS - 1}, "when": YEAR_10000_MS - 1}
EPOCH = datetime(1970, 1, 1)


def as_python(values: dict) -> dict:
    """The values as fastavro reads them back from a landing file."""
    def ts(us, tz=True):
        t = EPOCH + timedelta(microseconds=us)
        return t.replace(tzinfo=timezone.utc) if tz else t

    def day(d):
        return date(1970, 1, 1) + timedelta(days=d)
    return {"ts_ms": ts(values["ts_ms"] * 1000), "ts_us": ts(values["ts_us"]),
            "lts_ms": ts(values["lts_ms"] * 1000, False), "lts_us": ts(values["lts_us"], False),
            "day": day(values["day"]), "ev": {"at": ts(values["ev"]["at"]), "on": day(values["ev"]["on"])},
            "days": [day(d) for d in values["days"]], "seen": {k: ts(v * 1000, False) for k, v in values["seen"].items()},
            "when": ts(values["when"] * 1000)}


def test_dates_and_times_outside_years_1_to_9999_are_dead_letters_naming_the_field(
        make_topic, send, sr, registry, kafka, spark, store):
    """BigQuery and Python hold 0001-01-01 .. 9999-12-31T23:59:59.999999: a date or time outside
    (either side, any of the five logical types, top-level or nested) is a dead letter naming the
    field, and the edges themselves land exactly."""
    topic = make_topic()
    sid = register(sr, topic, TIMES)
    raw = raw_type(TIMES)

    def bad(**change):
        return {**GOOD_TIMES, **change}

    outside = "holds a date or time out of range (before year 1 or after 9999)"
    cases = [(GOOD_TIMES, None), (FIRST_TIMES, None), (LAST_TIMES, None)]
    for name, unit in (("ts_ms", 1), ("ts_us", 1000), ("lts_ms", 1), ("lts_us", 1000)):
        cases += [(bad(**{name: Y1_MS * unit - 1}), f"field {name!r} {outside}"),
                  (bad(**{name: YEAR_10000_MS * unit}), f"field {name!r} {outside}")]
    cases += [
        (bad(ts_us=-(2**63)), f"field 'ts_us' {outside}"),
        (bad(lts_us=2**63 - 1), f"field 'lts_us' {outside}"),
        # Too large for Spark's microseconds too: refused before any decode, by the same rule.
        (bad(ts_ms=2**62), f"field 'ts_ms' {outside}"),
        (bad(lts_ms=-(2**62)), f"field 'lts_ms' {outside}"),
        (bad(day=Y1_DAY - 1), f"field 'day' {outside}"),
        (bad(day=LAST_DAY + 1), f"field 'day' {outside}"),
        (bad(day=-(2**31)), f"field 'day' {outside}"),
        (bad(ev={"at": Y1_US - 1, "on": None}), f"field 'ev' {outside}"),
        (bad(ev={"at": 0, "on": LAST_DAY + 1}), f"field 'ev' {outside}"),
        (bad(days=[1, Y1_DAY - 1]), f"field 'days' {outside}"),
        (bad(seen={"a": 1, "b": YEAR_10000_MS}), f"field 'seen' {outside}"),
        (bad(when=Y1_MS - 1), f"field 'when' {outside}"),
        (bad(when=2**62), f"field 'when' {outside}"),
    ]
    values = [frame(sid, avro_body(raw, {"n": i, **v})) for i, (v, _) in enumerate(cases)]
    produce_values(send, topic, values)
    plan, result = land(spark, store, kafka, topic_cfg(topic), schema_fetcher(registry))
    landed, dead = assert_conserved(store, plan, result)
    assert {o: d["reason"] for o, d in dead.items()} == {i: why for i, (_, why) in enumerate(cases) if why}
    assert sorted(landed) == [0, 1, 2]
    for o in landed:
        expected = as_python(cases[o][0])
        assert {k: landed[o][k] for k in expected} == expected, o


def test_a_fixed_of_the_wrong_size_is_a_corrupt_body(make_topic, send, sr, registry, kafka, spark, store):
    """The wire holds no size: a fixed written shorter than its schema says misaligns the body. It is a
    dead letter naming the first rule the misaligned bytes break, never a value read from the bytes
    of the next field."""
    topic = make_topic()
    schema = record_schema("Fx", [{"name": "code", "type": dec(10, 2, ("Code", 12))}, {"name": "tag", "type": "string"}])
    last = record_schema("Fl", [{"name": "tag", "type": "string"}, {"name": "code", "type": dec(10, 2, ("Code", 12))}])
    sid, last_id = register(sr, topic, schema), register(sr, topic, last)

    def body(s, size, v=12345):
        wire = record_schema(s["name"], [{"name": f["name"], "type": (
            {"type": "fixed", "name": "Code", "size": size} if f["name"] == "code" else f["type"])} for f in s["fields"]])
        return avro_body(wire, {"code": twos(v, size), "tag": "ok"})

    values = [frame(sid, body(schema, 12)), frame(sid, body(schema, 9)), frame(sid, body(schema, 11)),
              frame(last_id, body(last, 12)), frame(last_id, body(last, 9))]
    produce_values(send, topic, values)
    plan, result = land(spark, store, kafka, topic_cfg(topic), schema_fetcher(registry))
    landed, dead = assert_conserved(store, plan, result)
    assert {o: d["reason"] for o, d in dead.items()} == {
        1: body_rules.reason(13, "code", sid),  # 9 bytes of code and 3 of the tag read as 12 digits too many
        2: body_rules.reason(2, "tag", sid),  # the tag's length is read from the code's last byte
        4: body_rules.reason(1, "code", last_id)}
    assert {o: (r["code"], r["tag"]) for o, r in landed.items()} == {0: (Decimal("123.45"), "ok"),
                                                                     3: (Decimal("123.45"), "ok")}


# --- the Iceberg warehouse: the edge dates and times read back by every reader -------------------

EDGE_TIMES = record_schema("Edge", [
    {"name": "n", "type": "int"},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lts_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "lts_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
])
EDGES = {  # n -> (raw values, what every reader must show)
    0: ((Y1_MS, Y1_US, Y1_MS, Y1_US, Y1_DAY),
        ("0001-01-01T00:00:00.000000",) * 4 + ("0001-01-01",)),
    1: ((YEAR_10000_MS - 1, YEAR_10000_US - 1, YEAR_10000_MS - 1, YEAR_10000_US - 1, LAST_DAY),
        ("9999-12-31T23:59:59.999000", "9999-12-31T23:59:59.999999", "9999-12-31T23:59:59.999000",
         "9999-12-31T23:59:59.999999", "9999-12-31")),
    2: ((MID_MS, MID_MS * 1000 + 456, MID_MS, MID_MS * 1000 + 7, 19_000),
        ("2023-11-14T22:13:20.123000", "2023-11-14T22:13:20.123456", "2023-11-14T22:13:20.123000",
         "2023-11-14T22:13:20.123007", "2022-01-08")),
}
EDGE_COLUMNS = ["ts_ms", "ts_us", "lts_ms", "lts_us", "day"]


def _iso(v) -> str:
    if isinstance(v, datetime):
        assert v.tzinfo is None or v.utcoffset() == timedelta(0), v
        return v.replace(tzinfo=None).isoformat(timespec="microseconds")
    return v.isoformat()


def test_the_iceberg_warehouse_reads_back_years_1_and_9999_in_pandas_duckdb_and_spark(
        make_topic, send, sr, registry, kafka, spark, store, tmp_path):
    """Spark's legacy INT96 timestamps read back in nanoseconds (pandas, pyarrow): 9999-12-31 came
    back as 1816. The warehouse's timestamps are TIMESTAMP_MICROS, exact in every reader."""
    topic = make_topic()
    sid = register(sr, topic, EDGE_TIMES)
    raw = raw_type(EDGE_TIMES)
    values = [frame(sid, avro_body(raw, {"n": n, **dict(zip(EDGE_COLUMNS, v))})) for n, (v, _) in EDGES.items()]
    produce_values(send, topic, values)
    cfg = topic_cfg(topic)
    plan, result = land(spark, store, kafka, cfg, schema_fetcher(registry))
    landed, dead = assert_conserved(store, plan, result)
    assert not dead
    wh = IcebergWarehouse(str(tmp_path / "wh"))
    wh.load_partition(store, result.done["t"], lambda: spark)
    arrow = wh.table("d", "t").scan().to_arrow()  # the docs' read: pyiceberg, then pandas or DuckDB on its Arrow
    expected = {n: dict(zip(EDGE_COLUMNS, shown)) for n, (_, shown) in EDGES.items()}

    df = arrow.to_pandas()
    assert {int(r["n"]): {c: _iso(pd.Timestamp(r[c]).to_pydatetime()) if c != "day" else _iso(r[c])
                          for c in EDGE_COLUMNS} for _, r in df.iterrows()} == expected

    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    rows = con.sql(f"select n, {', '.join(EDGE_COLUMNS)} from arrow").fetchall()
    assert {r[0]: {c: _iso(v) for c, v in zip(EDGE_COLUMNS, r[1:])} for r in rows} == expected

    fmt = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"
    back = wh.spark_table(spark, "d", "t")
    rows = back.selectExpr("n", *[f"date_format({c}, \"{fmt}\")" if c != "day" else "cast(day as string)"
                                  for c in EDGE_COLUMNS]).collect()
    assert {r[0]: dict(zip(EDGE_COLUMNS, r[1:])) for r in rows} == expected
