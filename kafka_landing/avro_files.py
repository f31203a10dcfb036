"""Row counts of Avro container files from their block headers, without
decoding or decompressing a single record: how a load checks that each file
holds the rows its done file promises. Pure: no Dagster, no Spark."""

from __future__ import annotations

from typing import BinaryIO

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
    if f.read(4) != MAGIC:
        raise AvroFileError("not an Avro container file")
    while True:  # the metadata map, as blocks of key/value byte strings
        n = _read_long(f)
        if n is None:
            raise AvroFileError("truncated header")
        if n == 0:
            break
        if n < 0:
            n = -n
            _read_long(f)  # block size in bytes
        for _ in range(2 * n):
            f.seek(_read_long(f), 1)
    return f.read(SYNC_SIZE)


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
    wrote (first and last offset) without a Spark job to count what it wrote."""
    import io

    import fastavro

    f.seek(0)
    sync = _skip_header(f)
    header_size = f.tell()
    total, first, last = 0, None, None
    for start, end, count in _blocks(f, name, sync):
        total += count
        if count:
            first = first if first is not None else (start, end)
            last = (start, end)
    if first is None:
        return total, None, None

    def records_of(block: tuple[int, int]) -> list:
        f.seek(0)
        header = f.read(header_size)
        f.seek(block[0])
        return list(fastavro.reader(io.BytesIO(header + f.read(block[1] - block[0]))))

    try:
        return total, records_of(first)[0][field], records_of(last)[-1][field]
    except (KeyError, ValueError, EOFError) as exc:
        raise AvroFileError(f"{name}: cannot read {field!r} of its first and last records ({exc})") from None
