"""The Avro schemas landing writes: the producer's writer schema extended by the
Kafka metadata columns, the reader schema that tells a decoded record from a
corrupt one, and the dead-letter schema. Pure: JSON in, JSON out."""

from __future__ import annotations

import copy
import json

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
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "key", "type": ["null", "bytes"], "default": None},
        {"name": "value", "type": ["null", "bytes"], "default": None},
        {"name": "headers", "type": ["null", {"type": "array", "items": KAFKA_HEADER}], "default": None},
        {"name": "schema_id", "type": ["null", "long"], "default": None},
        {"name": "reason", "type": "string"},
    ],
}


class SchemaError(ValueError):
    pass


def parse(schema_str: str) -> dict:
    schema = json.loads(schema_str)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaError("only Avro record schemas can be landed (the value schema must be a record)")
    return schema


def landing_schema(writer: dict) -> dict:
    """The writer schema plus the Kafka metadata columns; names, docs and logical types kept."""
    clash = [f["name"] for f in writer["fields"] if f["name"].startswith(META_PREFIX)]
    if clash:
        raise SchemaError(f"record field(s) {clash} clash with kafka_landing's metadata columns ({META_PREFIX}*)")
    out = copy.deepcopy(writer)
    out["fields"] = out["fields"] + copy.deepcopy(META_FIELDS)
    return out


def marked_reader_schema(writer: dict) -> dict:
    """The writer schema plus a boolean that defaults to true: Avro schema resolution
    fills it in for every record that decodes, so a null marker means 'corrupt'."""
    out = copy.deepcopy(writer)
    out["fields"] = out["fields"] + [{"name": OK_MARKER, "type": "boolean", "default": True}]
    return out


def field_names(schema: dict) -> list[str]:
    return [f["name"] for f in schema["fields"]]
