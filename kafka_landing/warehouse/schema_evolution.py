"""A table's schema as producers evolve theirs: one schema, the widest so far.

Every change a schema registry accepts between Avro writer schemas (BACKWARD,
FORWARD, FULL) merges into a type that holds every value of both sides:

    int, long                          -> long    (the table never holds int: int -> long costs nothing)
    float, double                      -> double  (likewise float -> double)
    int/long + float/double            -> double
    string + bytes                     -> binary  (a string's UTF-8 bytes)
    decimal(p1,s1) + decimal(p2,s2)    -> decimal(max integer digits + max scale, max scale), <= 38 digits
    a field on one side only           -> nullable (null where the other side lacks it)
    struct, array items, map values    -> merged field by field, by the same rules
    nullable on either side            -> nullable

Anything else (string -> long, a long that becomes a timestamp, a decimal wider
than 38 digits) has no such type: IncompatibleSchemaError, naming the field,
terminal. Works on Spark's StructType JSON (`StructType.jsonValue()`), so it stays
pure: no Dagster, no Spark import; every rule is a node of the one walk over two Spark types
(`spark_types.zip_types`).
"""

from __future__ import annotations

import re

from kafka_landing.errors import KafkaLandingError
from kafka_landing.warehouse.spark_types import ELEMENT, KEY, VALUE, Path, dotted, kind, zip_types

MAX_DECIMAL_DIGITS = 38  # Spark's and Parquet's widest decimal
_WIDEST = {"byte": "long", "short": "long", "integer": "long", "long": "long", "float": "double", "double": "double"}
_INTEGRAL = {"long"}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(-?\d+)\)$")


class IncompatibleSchemaError(KafkaLandingError, ValueError):
    """A schema change this warehouse cannot apply: terminal, the load fails once and is not retried."""


def table_type(t):
    """The type a table column holds for a value of Spark type `t`: integers as long, floating
    point as double, every field nullable, the same shape otherwise, so the usual promotions
    change nothing and every file of a table has one schema, nullability included."""
    return zip_types(t, t, _table_node)


def _table_node(path: Path, t, _same, inner: dict):
    if isinstance(t, str):
        return _WIDEST.get(t, t)
    if kind(t) == "struct":
        return {**t, "fields": [{**f, "type": inner[f["name"]], "nullable": True} for f in t["fields"]]}
    if kind(t) == "array":
        return {**t, "elementType": inner[ELEMENT], "containsNull": True}
    if kind(t) == "map":
        return {**t, "keyType": inner[KEY], "valueType": inner[VALUE], "valueContainsNull": True}
    return t


def _name(t) -> str:
    return t if isinstance(t, str) else t.get("type", "?")


def merge_type(old, new, path: str, where: str):
    """The narrowest type holding every value of `old` and of `new` (both already `table_type`);
    `path` names them in messages (a column's name, or "" for a table)."""
    return zip_types(old, new, lambda at, a, b, inner: _merge_node(at, a, b, inner, where), (path,) if path else ())


def _merge_node(path: Path, old, new, inner: dict, where: str):
    if old == new or new is None:  # a field gone from the new side: null there (its struct says so)
        return old
    if old is None:  # a field only the new side has: null in older data
        return new
    if isinstance(old, str) and isinstance(new, str):
        return _merge_primitive(old, new, dotted(path), where)
    if kind(old) == "struct" and kind(new) == "struct":
        theirs = {f["name"]: f for f in new["fields"]}
        mine = {f["name"] for f in old["fields"]}
        fields = [{**f, "type": inner[f["name"]], "nullable": _nullable(f, theirs.get(f["name"]))}
                  for f in old["fields"]]
        return {**old, "fields": fields + [{**f, "nullable": True} for f in new["fields"] if f["name"] not in mine]}
    if kind(old) == "array" and kind(new) == "array":
        return {"type": "array", "elementType": inner[ELEMENT],
                "containsNull": bool(old.get("containsNull", True) or new.get("containsNull", True))}
    if kind(old) == "map" and kind(new) == "map":
        return {"type": "map", "keyType": inner[KEY], "valueType": inner[VALUE],
                "valueContainsNull": bool(old.get("valueContainsNull", True) or new.get("valueContainsNull", True))}
    raise _refused(dotted(path), old, new, where)


def _nullable(mine: dict, theirs: dict | None) -> bool:
    """A field both sides have is nullable if either side's is; one only the old side has is."""
    return True if theirs is None else bool(mine.get("nullable", True) or theirs.get("nullable", True))


def _merge_primitive(old: str, new: str, path: str, where: str) -> str:
    a, b = _WIDEST.get(old), _WIDEST.get(new)
    if a and b:
        return "long" if a in _INTEGRAL and b in _INTEGRAL else "double"
    if {old, new} == {"string", "binary"}:
        return "binary"
    da, db = _DECIMAL.match(old), _DECIMAL.match(new)
    if da and db:
        (p1, s1), (p2, s2) = ((int(m.group(1)), int(m.group(2))) for m in (da, db))
        scale = max(s1, s2)
        digits = max(p1 - s1, p2 - s2) + scale
        if digits > MAX_DECIMAL_DIGITS:
            raise IncompatibleSchemaError(
                f"{where}: field {path!r} changed from {old} to {new}: holding both needs decimal({digits},{scale}), "
                f"wider than the {MAX_DECIMAL_DIGITS} digits a table column holds. Nothing was loaded; keep the "
                "producer's precision and scale within that, or land the new values in a new field",
                nothing_loaded=True)
        return f"decimal({digits},{scale})"
    raise _refused(path, old, new, where)


def _refused(path: str, old, new, where: str) -> IncompatibleSchemaError:
    return IncompatibleSchemaError(
        f"{where}: field {path!r} changed type from {_name(old)} to {_name(new)}, which no table column can hold "
        "both of (a schema registry accepts this only with compatibility NONE, or as a logical type added to or "
        "removed from a field). Nothing was loaded; the table and the landing files are as they were. Restore the "
        "field's type in the producer's schema and re-land the hours since, or move the new values to a new field",
        nothing_loaded=True)


def merge_schemas(table: dict | None, new: dict, where: str) -> tuple[dict, list[str]]:
    """(the table's schema after loading `new`, the fields it gained, nested ones as a.b).
    `where` names the load in error messages (table, hour, schema ids)."""
    new = table_type(new)
    if table is None:
        return new, []
    merged = merge_type(table, new, "", where)
    return merged, zip_types(table, merged, _gained_node)


def _gained_node(path: Path, old, new, inner: dict) -> list[str]:
    """The fields `new` has and `old` lacks, in `new`'s order; none inside a field that is new itself."""
    if old is None:  # a field only `new` has
        return [dotted(path)]
    if kind(new) == "struct" and kind(old) == "struct":
        return [g for f in new["fields"] for g in inner[f["name"]]]
    return [g for step, got in inner.items() if step != KEY for g in got]
