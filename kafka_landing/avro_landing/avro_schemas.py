"""The Avro schemas landing writes: the producer's writer schema extended by the
Kafka metadata columns, the reader schema that tells a decoded record from a
corrupt one, and the dead-letter schema. Pure: JSON in, JSON out."""

from __future__ import annotations

import copy
import json

from kafka_landing.avro_landing.contract import EVENT_HOUR_KEY, STAGED_KEYS
from kafka_landing.errors import KafkaLandingError
from kafka_landing.spark_setup import spark_readable

META_PREFIX = "_kafka_"
OK_MARKER = "__kafka_landing_decoded"

KAFKA_HEADER = {
    "type": "record", "name": "KafkaHeader", "namespace": "kafka_landing",
    "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"], "default": None}],
}

META_FIELDS = [
    {"name": "_kafka_topic", "type": "string", "doc": "Kafka topic the record was read from."},
    {"name": "_kafka_partition", "type": "int", "doc": "Kafka partition."},
    {"name": "_kafka_offset", "type": "long", "doc": "Kafka offset."},
    {"name": "_kafka_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}, "doc": "Kafka record timestamp."},
    {"name": "_kafka_key", "type": ["null", "bytes"], "default": None, "doc": "Raw Kafka key."},
    {"name": "_kafka_headers", "type": ["null", {"type": "array", "items": KAFKA_HEADER}], "default": None,
     "doc": "Kafka headers."},
]
META_COLUMNS = [f["name"] for f in META_FIELDS]

DEAD_LETTER_SCHEMA = {
    "type": "record", "name": "DeadLetter", "namespace": "kafka_landing",
    "doc": "A Kafka record that could not be decoded, kept whole with the reason.",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        # Null for a Kafka timestamp outside years 1-9999 (its reason gives the milliseconds):
        # fastavro cannot read one as timestamp-millis. Files from before, where it was never
        # null, read the same under this schema.
        {"name": "timestamp", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
        {"name": "key", "type": ["null", "bytes"], "default": None},
        {"name": "value", "type": ["null", "bytes"], "default": None},
        {"name": "headers", "type": ["null", {"type": "array", "items": KAFKA_HEADER}], "default": None},
        {"name": "schema_id", "type": ["null", "long"], "default": None},
        {"name": "reason", "type": "string"},
    ],
}


# Columns landing adds beside the record's fields while it decodes and writes.
INTERNAL_COLUMNS = (*STAGED_KEYS, EVENT_HOUR_KEY)
SPARK_MAX_DECIMAL_PRECISION = 38


class SchemaError(KafkaLandingError, ValueError):
    pass


def parse(schema_str: str) -> dict:
    """The writer schema as JSON; SchemaError saying why it cannot be landed otherwise."""
    try:
        schema = json.loads(schema_str)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"the schema is not valid JSON ({exc})") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        what = schema.get("type") if isinstance(schema, dict) else schema
        raise SchemaError(f"the value schema is {json.dumps(what)[:80]}, not a record: only Avro record schemas can "
                          "be landed (a record's fields become the table's columns)")
    if not isinstance(schema.get("fields"), list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                                                             for f in schema["fields"]):
        raise SchemaError("the record has no valid 'fields' list")
    check_landable(schema)
    return schema


def check_landable(writer: dict) -> None:
    """SchemaError naming the field when a record parses but cannot land: a field named like a
    landing column, names Spark cannot tell apart (it ignores case), or a decimal wider than Spark's."""
    for f in writer["fields"]:
        name = f["name"]
        low = name.lower()
        if low.startswith(META_PREFIX) or low in INTERNAL_COLUMNS or low == OK_MARKER:
            raise SchemaError(
                f"field {name!r} clashes with kafka_landing's own columns ({META_PREFIX}*, "
                f"{', '.join(INTERNAL_COLUMNS)}): rename the field in the producer's schema"
            )
    _check_type(writer, "", set())


def fastavro_refusal(writer: dict, schema_id: int) -> str | None:
    """The dead-letter reason of every record of a writer schema that lands everywhere but in
    fastavro: a decimal Avro's rules call invalid, which Avro's Java parser (the registry's,
    Spark's) ignores, reading the bytes, while fastavro refuses the schema, fails on the value or
    reads another one. A file holding such a schema is one fastavro cannot read at all. None if
    the schema holds no such decimal."""
    invalid: list[str] = []
    _check_type(writer, "", set(), invalid)
    if not invalid:
        return None
    return (f"schema id {schema_id} has an invalid decimal: {'; '.join(invalid)} (Avro's Java parser ignores the "
            "decimal, fastavro refuses the schema): fix the producer's schema")


def invalid_decimal(t: dict) -> str | None:
    """Why a decimal on bytes or fixed is invalid by Avro's rules (Avro's Java parser then ignores
    it), or None. A decimal on another type is ignored by every reader alike."""
    if t.get("logicalType") != "decimal" or t.get("type") not in ("bytes", "fixed"):
        return None
    p, s = t.get("precision"), t.get("scale", 0)
    if "precision" not in t:
        return "it has no precision"
    if type(p) is not int or p < 1:  # not a JSON true either, which fastavro would take for 1
        return f"precision {json.dumps(p)} is not a positive integer"
    if type(s) is not int or s < 0:
        return f"scale {json.dumps(s)} is not a non-negative integer"
    if s > p:
        return f"scale {s} is greater than its precision {p}"
    size = t.get("size")
    if t["type"] == "fixed" and type(size) is int and p > fixed_decimal_max_precision(size):
        return f"a fixed of {size} bytes holds at most {fixed_decimal_max_precision(size)} digits, not {p}"
    return None


def _check_type(t, path: str, seen: set[str], invalid: list[str] | None = None) -> None:
    """`seen`: the records enclosing `t`, by short and full name. `invalid`: where each invalid
    decimal is said (`invalid_decimal`, naming its field); without it they are passed over."""
    if isinstance(t, list):
        for branch in t:
            _check_type(branch, path, seen, invalid)
        return
    if isinstance(t, str):
        if t in seen:
            raise SchemaError(
                f"field {path!r} holds record {t!r} inside itself: Spark cannot land recursive records; "
                "flatten the structure in the producer's schema"
            )
        return  # a primitive, or a named type checked where it is defined
    if not isinstance(t, dict):
        return
    kind = t.get("type")
    if (why := invalid_decimal(t)) is not None:
        if invalid is not None:
            invalid.append(f"field {path or '<value>'!r} {why}")
    elif t.get("logicalType") == "decimal" and isinstance(t.get("precision"), int) \
            and t["precision"] > SPARK_MAX_DECIMAL_PRECISION:
        raise SchemaError(
            f"field {path or '<value>'!r} is decimal({t['precision']}, {t.get('scale', 0)}): Spark holds at most "
            f"{SPARK_MAX_DECIMAL_PRECISION} digits, so it cannot be landed; narrow it in the producer's schema"
        )
    name = t.get("name")
    if kind in ("record", "error"):
        if isinstance(name, str):
            namespace = t.get("namespace")
            full = name if "." in name or not namespace else f"{namespace}.{name}"
            seen = seen | {name, full, full.rsplit(".", 1)[-1]}
        by_lower: dict[str, str] = {}
        for f in t.get("fields") or []:
            fname = f.get("name", "")
            sub = f"{path}.{fname}" if path else fname
            other = by_lower.setdefault(fname.lower(), fname)
            if other != fname:
                where = f" of {path!r}" if path else ""
                raise SchemaError(
                    f"fields {other!r} and {fname!r}{where} differ only in case: Spark ignores case and cannot "
                    "land both; rename one in the producer's schema"
                )
            _check_type(f.get("type"), sub, seen, invalid)
    elif kind == "array":
        _check_type(t.get("items"), f"{path}[]", seen, invalid)
    elif kind == "map":
        _check_type(t.get("values"), f"{path}{{}}", seen, invalid)
    elif isinstance(kind, (dict, list)):
        _check_type(kind, path, seen, invalid)


def fixed_decimal_max_precision(size: int) -> int:
    """The most digits a decimal in a fixed of `size` bytes can declare (Avro's rule:
    floor(log10(2**(8*size - 1) - 1)))."""
    return len(str(2 ** (8 * size - 1) - 1)) - 1 if size > 0 else 0


def named_types(t, namespace: str | None = None, out: dict | None = None) -> dict[str, dict]:
    """{name: definition} of the records, enums and fixed defined inside an Avro type, by full and
    short name, so that a reference (a field whose type is a defined type's name) can be followed."""
    out = {} if out is None else out
    if isinstance(t, list):
        for b in t:
            named_types(b, namespace, out)
        return out
    if not isinstance(t, dict):
        return out
    kind = t.get("type")
    if kind in ("record", "error", "enum", "fixed") and isinstance(t.get("name"), str):
        name = t["name"]
        namespace = name.rsplit(".", 1)[0] if "." in name else t.get("namespace", namespace)
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        out.setdefault(full, t)
        out.setdefault(full.rsplit(".", 1)[-1], t)
    if kind in ("record", "error"):
        for f in t.get("fields") or []:
            if isinstance(f, dict):
                named_types(f.get("type"), namespace, out)
    elif kind == "array":
        named_types(t.get("items"), namespace, out)
    elif kind == "map":
        named_types(t.get("values"), namespace, out)
    elif isinstance(kind, (dict, list)):
        named_types(kind, namespace, out)
    return out


def field_type(writer: dict, name: str):
    """The Avro type of a top-level field, or None."""
    return next((f["type"] for f in writer["fields"] if f["name"] == name), None)


def landing_schema(writer: dict) -> dict:
    """The writer schema plus the Kafka metadata columns; names, docs and logical types kept."""
    check_landable(writer)
    out = copy.deepcopy(writer)
    out["fields"] = out["fields"] + copy.deepcopy(META_FIELDS)
    return out


def marked_reader_schema(writer: dict) -> dict:
    """The writer schema as Spark reads it (`spark_setup.spark_readable`) plus a boolean that
    defaults to true: Avro schema resolution fills it in for every record that decodes, so a
    null marker means 'corrupt'."""
    out = copy.deepcopy(spark_readable(writer))
    out["fields"] = out["fields"] + [{"name": OK_MARKER, "type": "boolean", "default": True}]
    return out


def field_names(schema: dict) -> list[str]:
    return [f["name"] for f in schema["fields"]]
