"""Confluent's wire format: byte 0 is the magic byte 0, bytes 1-4 the big-endian
schema id, the rest the Avro body. Landing decodes it in Spark's JVM
(`frame_columns` in decode.py); this module is the same rule in Python for producers, tests
and the benchmark's baseline. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import struct

from kafka_landing.errors import KafkaLandingError

MAGIC = 0
HEADER_SIZE = 5


class FramingError(KafkaLandingError, ValueError):
    pass


def frame(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", MAGIC, schema_id) + body


def unframe(value: bytes | None) -> tuple[int, bytes]:
    """(schema id, Avro body); FramingError with the dead-letter reason otherwise."""
    if value is None:
        raise FramingError("null value")
    if len(value) < HEADER_SIZE:
        raise FramingError("shorter than the 5-byte header")
    if value[0] != MAGIC:
        raise FramingError("bad magic byte")
    return struct.unpack(">I", value[1:5])[0], value[5:]
