"""Row counts of Avro container files from their block headers, without
decoding or decompressing a single record: how a load checks that each file
holds the rows its done file promises. Pure: no Dagster, no Spark."""

from __future__ import annotations

import io
import json
from typing import BinaryIO

from kafka_landing.avro_types import strip_logical_types
from kafka_landing.errors import KafkaLandingError

MAGIC = b"Obj\x01"
SYNC_SIZE = 16


class AvroFileError(KafkaLandingError, ValueError):
    pass


def _read_long(f: BinaryIO) -> int | None:
    shift = result = 0
    while True:
        b = f.read(1)
        if not b:
            if shift == 0:
                return None
            raise AvroFileError("truncated varint")
        byte = b[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7


def _skip_header(f: BinaryIO) -> bytes:
    return _read_header(f)[1]


def _read_header(f: BinaryIO) -> tuple[dict[bytes, bytes], bytes]:
    """(the metadata map, the sync marker) of a container file read from its start."""
    if f.read(4) != MAGIC:
        raise AvroFileError("not an Avro container file")
    meta = {}
    while True:  # the metadata map, as blocks of key/value byte strings
        n = _read_long(f)
        if n is None:
            raise AvroFileError("truncated header")
        if n == 0:
            break
        if n < 0:
            n = -n
            _read_long(f)  # block size in bytes
        for _ in range(n):
            key = f.read(_read_long(f) or 0)
            meta[key] = f.read(_read_long(f) or 0)
    return meta, f.read(SYNC_SIZE)


def _header_bytes(meta: dict[bytes, bytes], sync: bytes) -> bytes:
    """A container file's header: the magic, the metadata map, the sync marker."""
    import fastavro

    buf = io.BytesIO()
    buf.write(MAGIC)
    fastavro.schemaless_writer(buf, {"type": "map", "values": "bytes"}, {k.decode(): v for k, v in meta.items()})
    buf.write(sync)
    return buf.getvalue()


def count_records(path: str) -> int:
    with open(path, "rb") as f:
        return count_records_in(f, path)


def count_records_in(f: BinaryIO, name: str) -> int:
    """`count_records` of an open, seekable binary file (a bucket object read in ranges):
    a store whose files are not local paths counts them without a local copy."""
    return sum(count for _start, _end, count in _blocks(f, name, _skip_header(f)))


def _blocks(f: BinaryIO, name: str, sync: bytes):
    """(start, end, records) of each block after the header, read from its header alone."""
    while (start := f.tell(), count := _read_long(f))[1] is not None:
        size = _read_long(f)
        if size is None or count < 0 or size < 0:
            raise AvroFileError(f"{name}: corrupt block header")
        f.seek(size, 1)
        if f.read(SYNC_SIZE) != sync:
            raise AvroFileError(f"{name}: truncated or corrupt block")
        yield start, f.tell(), count


def offset_range_in(f: BinaryIO, name: str, field: str = "_kafka_offset") -> tuple[int, int | None, int | None]:
    """(rows, `field` of the first record, `field` of the last record) of an open, seekable Avro
    container file, decoding only its first and last blocks: how landing names a file it just
    wrote (first and last offset) without a Spark job to count what it wrote.

    Only `field` is read, as a plain long, and the writer schema's logical types are dropped: the
    other fields are skipped as their raw types. So no value the landing chose to land (a time of
    day past 24 h, a Kafka timestamp past 9999) and no logical type fastavro refuses (a decimal
    whose scale exceeds its precision) can fail the read-back; what fastavro still cannot read is
    the file itself, an AvroFileError naming it."""
    import fastavro

    f.seek(0)
    meta, sync = _read_header(f)
    total, first, last = 0, None, None
    for start, end, count in _blocks(f, name, sync):
        total += count
        if count:
            first = first if first is not None else (start, end)
            last = (start, end)
    if first is None:
        return total, None, None
    blocks = []
    for start, end in (first, last):  # read here: a store's failure to read is not the file's
        f.seek(start)
        blocks.append(f.read(end - start))
    try:
        writer = strip_logical_types(json.loads(meta.get(b"avro.schema", b"")))
        reader = {**writer, "fields": [{"name": field, "type": "long"}]}
        header = _header_bytes({**meta, b"avro.schema": json.dumps(writer).encode()}, sync)
        firsts, lasts = (list(fastavro.reader(io.BytesIO(header + b), reader_schema=reader)) for b in blocks)
        return total, firsts[0][field], lasts[-1][field]
    except Exception as exc:  # noqa: BLE001 - any of fastavro's (ValueError, IndexError, EOFError, its own
        # SchemaParseException...): the file cannot be read, and the caller says what that means
        raise AvroFileError(f"{name}: fastavro cannot read {field!r} of its first and last records "
                            f"({type(exc).__name__}: {exc}): the file is not valid Avro as fastavro reads it") from None
