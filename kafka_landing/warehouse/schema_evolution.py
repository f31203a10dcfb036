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
pure: no Dagster, no Spark import.
"""

from __future__ import annotations

import re

from kafka_landing.errors import KafkaLandingError

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
    if isinstance(t, str):
        return _WIDEST.get(t, t)
    kind = t.get("type")
    if kind == "struct":
        return {**t, "fields": [{**f, "type": table_type(f["type"]), "nullable": True} for f in t["fields"]]}
    if kind == "array":
        return {**t, "elementType": table_type(t["elementType"]), "containsNull": True}
    if kind == "map":
        return {**t, "keyType": table_type(t["keyType"]), "valueType": table_type(t["valueType"]),
                "valueContainsNull": True}
    return t


def _name(t) -> str:
    return t if isinstance(t, str) else t.get("type", "?")


def merge_type(old, new, path: str, where: str):
    """The narrowest type holding every value of `old` and of `new` (both already `table_type`)."""
    if old == new:
        return old
    if isinstance(old, str) and isinstance(new, str):
        return _merge_primitive(old, new, path, where)
    if isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type"):
        kind = old["type"]
        if kind == "struct":
            return _merge_struct(old, new, path, where)
        if kind == "array":
            return {"type": "array", "elementType": merge_type(old["elementType"], new["elementType"], f"{path}[]", where),
                    "containsNull": bool(old.get("containsNull", True) or new.get("containsNull", True))}
        if kind == "map":
            key = merge_type(old["keyType"], new["keyType"], f"{path}{{key}}", where)
            return {"type": "map", "keyType": key,
                    "valueType": merge_type(old["valueType"], new["valueType"], f"{path}{{}}", where),
                    "valueContainsNull": bool(old.get("valueContainsNull", True) or new.get("valueContainsNull", True))}
    raise _refused(path, old, new, where)


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


def _merge_struct(old: dict, new: dict, path: str, where: str) -> dict:
    theirs = {f["name"]: f for f in new["fields"]}
    fields = []
    for f in old["fields"]:
        other = theirs.get(f["name"])
        if other is None:  # gone from the new side: null there
            fields.append({**f, "nullable": True})
            continue
        sub = f"{path}.{f['name']}" if path else f["name"]
        fields.append({**f, "type": merge_type(f["type"], other["type"], sub, where),
                       "nullable": bool(f.get("nullable", True) or other.get("nullable", True))})
    mine = {f["name"] for f in old["fields"]}
    fields += [{**f, "nullable": True} for f in new["fields"] if f["name"] not in mine]  # null in older data
    return {**old, "fields": fields}


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
    return merged, _gained(table, merged, "")


def _gained(old, new, path: str) -> list[str]:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return []
    kind = new.get("type")
    if kind == "struct" and old.get("type") == "struct":
        before = {f["name"]: f for f in old["fields"]}
        out = []
        for f in new["fields"]:
            sub = f"{path}.{f['name']}" if path else f["name"]
            out += [sub] if f["name"] not in before else _gained(before[f["name"]]["type"], f["type"], sub)
        return out
    if kind == "array" and old.get("type") == "array":
        return _gained(old["elementType"], new["elementType"], f"{path}[]")
    if kind == "map" and old.get("type") == "map":
        return _gained(old["valueType"], new["valueType"], f"{path}{{}}")
    return []
