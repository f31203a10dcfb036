"""ROUTE: each decoded record to its table (by a field's value, with a default), its event
hour where the topic splits files by one, and the values readers of the files would refuse.
Whatever cannot be routed is a dead letter naming the field, never a failed hour."""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DateType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from kafka_landing.avro_landing import avro_schemas, body_rules
from kafka_landing.avro_landing.contract import LANDS, TABLE_KEY
from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError

EPOCH_MS_YEAR_1 = -62_135_596_800_000  # 0001-01-01T00:00:00Z
EPOCH_MS_YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z: hour tags have four-digit years


def _complex_kind(dtype) -> str | None:
    for t, name in ((StructType, "a record"), (ArrayType, "an array"), (MapType, "a map")):
        if isinstance(dtype, t):
            return name
    return None


def table_of(cfg: TopicConfig, value: F.Column) -> F.Column:
    """The table of a routing value (a string; null: the default)."""
    pairs = [F.lit(x) for kv in sorted(cfg.route.tables.items()) for x in kv]
    return F.coalesce(F.create_map(*pairs)[value], F.lit(cfg.route.default))


def hour_of(ts: F.Column) -> F.Column:
    """The hour tag of a timestamp within years 1-9999."""
    return F.date_format(F.date_trunc("hour", ts), "yyyy-MM-dd'T'HH")


def route_column(cfg: TopicConfig, writer: dict, rec_type: StructType,
                 warnings: list[str]) -> tuple[F.Column, F.Column | None]:
    """(table, why the record cannot be routed or None). The routing value is the field's value as a
    string; for a union of several types, the branch the record holds. A record, array or map
    cannot be routed by: such records become dead letters naming the field."""
    if cfg.route is None:
        return F.lit(cfg.table), None
    name = cfg.route.field
    if name not in rec_type.names:
        warnings.append(f"routing field {name!r} is not in the schema: all its records go to {cfg.route.default!r}")
        return F.lit(cfg.route.default), None
    col, dtype = F.col("_rec").getField(name), rec_type[name].dataType
    avro_type = avro_schemas.field_type(writer, name)
    if isinstance(avro_type, list) and sum(b != "null" for b in avro_type) > 1 and isinstance(dtype, StructType):
        members = [(col.getField(m.name), m.dataType) for m in dtype.fields]  # Spark's member0, member1, ...
    else:
        members = [(col, dtype)]
    values = [c.cast("string") for c, t in members if _complex_kind(t) is None]
    value = F.coalesce(*values) if values else F.lit(None).cast("string")
    table = table_of(cfg, value)
    why = [F.when(c.isNotNull(), F.lit(f"routing field {name!r} is {_complex_kind(t)}, not a value to route by"))
           for c, t in members if _complex_kind(t)]
    return table, (F.coalesce(*why) if why else None)


def event_hour_column(cfg: TopicConfig, rec_type: StructType, where: str, schema_id: int,
                      warnings: list[str]) -> tuple[F.Column | None, F.Column | None]:
    """(event hour tag, why the record has none or None). An event time before year 1 or after
    9999 (or a long too large for epoch milliseconds) names no hour a file can carry: such a
    record is a dead letter naming the field, never a failed hour."""
    if not cfg.event_time_field:
        return None, None
    name = cfg.event_time_field
    if name not in rec_type.names:
        warnings.append(f"event time field {name!r} is not in the schema: files are not split by event hour")
        return F.lit(None).cast("string"), None
    raw, dtype = F.col("_rec").getField(name), rec_type[name].dataType
    if isinstance(dtype, LongType):  # epoch milliseconds
        ok = raw.between(EPOCH_MS_YEAR_1, EPOCH_MS_YEAR_10000 - 1)
        ts = F.timestamp_millis(F.when(ok, raw))  # never overflows: only in-range values reach it
    elif isinstance(dtype, TimestampType):
        ok = F.unix_micros(raw).between(EPOCH_MS_YEAR_1 * 1000, EPOCH_MS_YEAR_10000 * 1000 - 1)
        ts = raw
    elif isinstance(dtype, TimestampNTZType):
        ok = raw.between(F.lit("0001-01-01 00:00:00").cast("timestamp_ntz"),
                         F.lit("9999-12-31 23:59:59.999999").cast("timestamp_ntz"))
        ts = raw
    else:
        raise LandingError(
            f"{where}: event time field {name!r} of schema id {schema_id} has type "
            f"{dtype.simpleString()}, not a timestamp or a long of epoch milliseconds. Nothing of this hour was "
            "published: point event_time_field of the topic config at a timestamp field, or remove it."
        )
    hour = hour_of(F.when(ok, ts))
    why = F.when(raw.isNotNull() & ~ok, F.lit(f"event time field {name!r} is out of range (before year 1 or after 9999)"))
    return hour, why


def _utf8_leaf(col: F.Column, dtype) -> F.Column | None:
    return ~F.is_valid_utf8(col) if isinstance(dtype, StringType) else None


def _time_leaf(col: F.Column, dtype) -> F.Column | None:
    if isinstance(dtype, TimestampType):
        return ~F.unix_micros(col).between(EPOCH_MS_YEAR_1 * 1000, EPOCH_MS_YEAR_10000 * 1000 - 1)
    if isinstance(dtype, TimestampNTZType):
        return ~col.between(F.lit("0001-01-01 00:00:00").cast("timestamp_ntz"),
                            F.lit("9999-12-31 23:59:59.999999").cast("timestamp_ntz"))
    if isinstance(dtype, DateType):
        return ~col.between(F.lit("0001-01-01").cast("date"), F.lit("9999-12-31").cast("date"))
    return None


def _anywhere(col: F.Column, dtype, leaf) -> F.Column | None:
    """True (never null) when `leaf` holds for a value anywhere inside `col` (records, arrays, map
    keys and values, in the JVM); None when the type holds nothing `leaf` applies to."""
    no = F.lit(False)

    def in_array(array: F.Column, element_type) -> F.Column | None:
        if _anywhere(F.lit(None), element_type, leaf) is None:  # nothing to check inside
            return None
        return F.coalesce(F.exists(array, lambda x: _anywhere(x, element_type, leaf)), no)

    if isinstance(dtype, StructType):
        parts = [_anywhere(col.getField(f.name), f.dataType, leaf) for f in dtype.fields]
    elif isinstance(dtype, ArrayType):
        parts = [in_array(col, dtype.elementType)]
    elif isinstance(dtype, MapType):
        parts = [in_array(F.map_keys(col), dtype.keyType), in_array(F.map_values(col), dtype.valueType)]
    else:
        found = leaf(col, dtype)
        parts = [None if found is None else F.coalesce(found, no)]
    parts = [p for p in parts if p is not None]
    return reduce(operator.or_, parts) if parts else None


# Values Spark decodes and writes but readers of the files refuse (BigQuery takes dates and
# times within years 1-9999 and UTF-8 strings only, fastavro likewise): one such value would fail
# the load of a whole hour, so it is a dead letter instead. The strict walk refuses these bodies
# before any decode, by the same rules in the same words (body_rules.py); these checks of the
# decoded values are the decoding way's own, and a test holds the two to each other
# (integration/test_body_check.py).
VALUE_CHECKS = (
    (_utf8_leaf, body_rules.NOT_UTF8),
    (_time_leaf, body_rules.TIME_RANGE),
)


# RFC 4122's form of a UUID: what fastavro (and every reader that honours the logical type) reads
# a uuid string as, and refuses a file over when a value is not one.
UUID_FORM = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
NOT_A_UUID = body_rules.NOT_UUID


def _not_a_uuid(col: F.Column, t, dtype, named: dict, seen: frozenset = frozenset()) -> F.Column | None:
    """True (never null) when a string under the logical type uuid anywhere inside `col` (of Avro
    type `t`, Spark type `dtype`) is not a UUID; None when `t` holds no uuid string. Spark decodes
    a uuid as a plain string, so the Avro type says where they are."""
    no = F.lit(False)
    if isinstance(t, str) and t in named and t not in seen:  # a reference to a defined type
        return _not_a_uuid(col, named[t], dtype, named, seen | {t})
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) == 1:
            return _not_a_uuid(col, branches[0], dtype, named, seen)
        if not isinstance(dtype, StructType) or len(dtype.fields) != len(branches):
            return None  # a union Spark merges (int and long, float and double): no string in it
        parts = [_not_a_uuid(col.getField(f.name), b, f.dataType, named, seen) for f, b in zip(dtype.fields, branches)]
    elif not isinstance(t, dict):
        return None
    elif isinstance(t.get("type"), (dict, list)):
        return _not_a_uuid(col, t["type"], dtype, named, seen)
    elif t.get("type") == "string" and t.get("logicalType") == "uuid":
        return F.coalesce(~col.rlike(UUID_FORM), no)
    elif t.get("type") in ("record", "error") and isinstance(dtype, StructType):
        seen = seen | ({t["name"]} if isinstance(t.get("name"), str) else set())
        parts = [_not_a_uuid(col.getField(f["name"]), f["type"], dtype[f["name"]].dataType, named, seen)
                 for f in t.get("fields") or [] if f["name"] in dtype.names]
    elif t.get("type") == "array" and isinstance(dtype, ArrayType):
        inner = _not_a_uuid(F.lit(None), t.get("items"), dtype.elementType, named, seen)
        parts = [None if inner is None else F.coalesce(F.exists(
            col, lambda x: _not_a_uuid(x, t.get("items"), dtype.elementType, named, seen)), no)]
    elif t.get("type") == "map" and isinstance(dtype, MapType):
        inner = _not_a_uuid(F.lit(None), t.get("values"), dtype.valueType, named, seen)
        parts = [None if inner is None else F.coalesce(F.exists(
            F.map_values(col), lambda x: _not_a_uuid(x, t.get("values"), dtype.valueType, named, seen)), no)]
    else:
        return None
    parts = [p for p in parts if p is not None]
    return reduce(operator.or_, parts) if parts else None


def classify(decoded: DataFrame, cfg: TopicConfig, where: str, schema_id: int, writer: dict,
             warnings: list[str]) -> DataFrame:
    """Decoded records with their table (`_kl_table`), event hour (`_kl_ehour`, if the topic splits by
    one) and `_reason`, null for a record that lands and otherwise why not, naming the field."""
    rec_type = decoded.schema["_rec"].dataType
    table, route_why = route_column(cfg, writer, rec_type, warnings)
    ehour, ehour_why = event_hour_column(cfg, rec_type, where, schema_id, warnings)
    if "_kl_check" in decoded.columns:  # bodies the body check vouched for were not decoded: what it read
        check = F.col("_kl_check")
        vouched = check.getField("status") == F.lit(LANDS)
        if cfg.route is not None and cfg.route.field in rec_type.names:
            table = F.when(vouched, table_of(cfg, check.getField("route"))).otherwise(table)
        if ehour is not None and cfg.event_time_field in rec_type.names:
            ehour = F.when(vouched, hour_of(F.timestamp_micros(check.getField("event")))).otherwise(ehour)
    out = decoded.withColumn(TABLE_KEY, table)
    if ehour is not None:
        out = out.withColumn(avro_schemas.EVENT_HOUR_KEY, ehour)
    value_why = [F.when(bad, F.lit(f"field {f.name!r} {what}"))
                 for f in rec_type.fields if f.name != avro_schemas.OK_MARKER
                 for leaf, what in VALUE_CHECKS
                 if (bad := _anywhere(F.col("_rec").getField(f.name), f.dataType, leaf)) is not None]
    named = avro_schemas.named_types(writer)
    uuid_why = [F.when(bad, F.lit(f"field {f['name']!r} {NOT_A_UUID}")) for f in writer["fields"]
                if f["name"] in rec_type.names
                and (bad := _not_a_uuid(F.col("_rec").getField(f["name"]), f["type"], rec_type[f["name"]].dataType,
                                        named)) is not None]
    why = [c for c in (ehour_why, *value_why, *uuid_why, route_why) if c is not None]
    if why:
        out = out.withColumn("_reason", F.coalesce(F.col("_reason"), *why))
    return out
