"""Table schema evolution: new optional columns are added; anything else that
changes is refused with the field and the schema ids named.

Works on Spark's StructType JSON (`StructType.jsonValue()`), so it stays pure:
no Dagster, no Spark import.
"""

from __future__ import annotations

from kafka_landing.errors import KafkaLandingError


class IncompatibleSchemaError(KafkaLandingError, ValueError):
    """A schema change this warehouse cannot apply: terminal, the load fails once and is not retried."""


def _type_name(t) -> str:
    return t if isinstance(t, str) else t.get("type", "?")


def merge_schemas(table: dict | None, new: dict, where: str) -> tuple[dict, list[str]]:
    """(the table's schema after loading `new`, the columns added). `where` names the
    load in error messages (table, hour, schema ids)."""
    if table is None:
        return new, []
    old_fields = {f["name"]: f for f in table["fields"]}
    new_fields = {f["name"]: f for f in new["fields"]}
    merged, added = [], []
    for name, old in old_fields.items():
        if name not in new_fields:
            if not old["nullable"]:
                raise IncompatibleSchemaError(f"{where}: required field {name!r} is missing from the new data")
            merged.append(old)
            continue
        cur = new_fields[name]
        if cur["type"] != old["type"]:
            raise IncompatibleSchemaError(
                f"{where}: field {name!r} changed type from {_type_name(old['type'])} to {_type_name(cur['type'])}"
                + ("" if _type_name(old["type"]) != _type_name(cur["type"]) else " (its nested fields differ)")
            )
        merged.append({**old, "nullable": old["nullable"] or cur["nullable"]})
    for name, cur in new_fields.items():
        if name in old_fields:
            continue
        if not cur["nullable"]:
            raise IncompatibleSchemaError(f"{where}: new field {name!r} is required; only optional fields can be added")
        merged.append(cur)
        added.append(name)
    return {"type": "struct", "fields": merged}, added
