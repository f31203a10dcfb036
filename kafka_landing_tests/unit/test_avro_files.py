"""The read-back that names each written file (avro_files.offset_range_in) reads its offsets and
nothing else: a value the landing chose to land, or a logical type fastavro refuses in the
writer schema, never fails it (review 2026-11-28 S3, S6), and whatever fastavro cannot read of
the file itself is an AvroFileError naming the file, never a bare error of fastavro's (S1 A)."""

from __future__ import annotations

import io
import json
import os

import fastavro
import pytest

from kafka_landing.avro_files import AvroFileError, offset_range_in
from kafka_landing.errors import is_transient


def avro_long(n: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, "long", n)
    return buf.getvalue()


def container(schema: dict | str, records: list[bytes], count: int | None = None) -> bytes:
    """An uncompressed Avro container of one block holding `records` (each an encoded body) under
    `schema` as written (JSON text as given), whatever fastavro's writer would make of the schema or
    the values; `count`: the block's record count, if not the records'."""
    sync = os.urandom(16)
    text = schema if isinstance(schema, str) else json.dumps(schema)
    header = io.BytesIO()
    fastavro.schemaless_writer(header, {"type": "map", "values": "bytes"}, {"avro.schema": text.encode(),
                                                                           "avro.codec": b"null"})
    data = b"".join(records)
    block = avro_long(len(records) if count is None else count) + avro_long(len(data)) + data
    return b"Obj\x01" + header.getvalue() + sync + block + sync


def landing_schema(value_type) -> dict:
    return {"type": "record", "name": "R", "namespace": "review", "fields": [
        {"name": "v", "type": value_type}, {"name": "_kafka_offset", "type": "long"},
        {"name": "_kafka_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


NOW_MS = 1_795_830_172_000
# (value type, its encoded value, the Kafka timestamp): each a file whose first and last records
# fastavro cannot decode in full.
UNREADABLE_VALUES = {
    "a time of day of 25 h (S3)": ({"type": "int", "logicalType": "time-millis"}, avro_long(90_000_000), NOW_MS),
    "a Kafka timestamp 1 ms into year 10000 (S6)": ("long", avro_long(1), 253_402_300_800_000),
    "a Kafka timestamp 1 ms before year 1": ("long", avro_long(1), -62_135_596_800_001),
    "a date of year 10000": ({"type": "int", "logicalType": "date"}, avro_long(2_932_897), NOW_MS),
    "a uuid string that is not a UUID": ({"type": "string", "logicalType": "uuid"}, avro_long(1) + b"x", NOW_MS),
    "a decimal fastavro refuses (scale over precision)": (
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 6}, avro_long(1) + b"\x05", NOW_MS),
    "a fixed too small for its decimal's precision": (
        {"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 9}, b"\x00\x05", NOW_MS),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE_VALUES))
def test_a_files_offsets_are_read_back_whatever_its_other_fields_hold(case):
    value_type, value, ts = UNREADABLE_VALUES[case]
    data = container(landing_schema(value_type), [value + avro_long(off) + avro_long(ts) for off in (10, 11, 12)])
    with pytest.raises(Exception):  # noqa: PT011 - the case is one fastavro cannot read in full
        list(fastavro.reader(io.BytesIO(data)))
    assert offset_range_in(io.BytesIO(data), "f.avro") == (3, 10, 12)


def test_the_last_millisecond_of_year_9999_and_the_first_after_it_both_read_back():
    """The review's script s_kafka_timestamp.py: the file as the splice writer writes the Kafka columns."""
    schema = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "_kafka_offset", "type": "long"},
        {"name": "_kafka_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    for ts in (253_402_300_799_999, 253_402_300_800_000):
        buf = io.BytesIO()
        fastavro.writer(buf, schema, [{"_kafka_offset": 5, "_kafka_timestamp": ts}], validator=False)
        buf.seek(0)
        assert offset_range_in(buf, "f.avro") == (1, 5, 5), ts


UNION = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["null", "long"]},
                                                   {"name": "_kafka_offset", "type": "long"}]}
BROKEN_FILES = {
    # A union branch that does not exist: what fastavro raised over S1 case A's file (IndexError).
    "a union index out of range": container(UNION, [avro_long(5) + avro_long(1) + avro_long(10)]),
    "a block whose records end before its count": container(UNION, [avro_long(0) + avro_long(10)], count=2),
    "a schema that is not JSON": container(json.dumps(UNION)[:-1], [avro_long(0) + avro_long(10)]),
    "no field of the offsets": container({**UNION, "fields": UNION["fields"][:1]}, [avro_long(0)]),
}


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_a_file_fastavro_cannot_read_is_an_avro_file_error_naming_it(case):
    with pytest.raises(AvroFileError, match=r"f\.avro: fastavro cannot read '_kafka_offset'") as err:
        offset_range_in(io.BytesIO(BROKEN_FILES[case]), "f.avro")
    assert not is_transient(err.value)
