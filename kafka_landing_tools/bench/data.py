"""The benchmark's records, made at producer speed: the schemas, records that differ from each
other (identical records would flatter compression and Spark) and topics produced with them."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from datetime import datetime

from kafka_landing_tools.bench.measure import BenchError
from kafka_landing_tools.bench.stack import Stack

PARTITIONS = 4

_SMALL_FIELDS = [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"}, {"name": "url", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}, {"name": "score", "type": "double"},
]
SCHEMAS = {
    "small": {"type": "record", "name": "Click", "namespace": "bench", "fields": _SMALL_FIELDS},
    # The day topic: small records with a `type` that routes them into three tables.
    "event": {"type": "record", "name": "Event", "namespace": "bench",
              "fields": [*_SMALL_FIELDS, {"name": "type", "type": "string"}]},
    "large": {"type": "record", "name": "Order", "namespace": "bench", "fields": [
        {"name": "id", "type": "long"}, {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "name", "type": "string"}, {"name": "email", "type": "string"},
            {"name": "address", "type": "string"}]}},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
            {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"},
            {"name": "note", "type": "string"}]}}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ]},
}
EVENT_TYPES = ("page_view", "click", "purchase", "search")
DAY_ROUTE = {"field": "type", "tables": {"page_view": "day_page_views", "click": "day_clicks"}, "default": "day_other"}
N_SHAPES = 16
_ITEMS = 5


def day_tables() -> list[str]:
    return sorted({*DAY_ROUTE["tables"].values(), DAY_ROUTE["default"]})


def _long(v: int) -> bytes:
    """Avro long: zigzag varint."""
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _string(s: str) -> bytes:
    b = s.encode()
    return _long(len(b)) + b


def _double(x: float) -> bytes:
    return struct.pack("<d", x)


_ENCODE = {"long": _long, "string": _string, "double": _double}
_HOLES = {"small": ("long", "string", "long", "double"), "event": ("long", "string", "long", "double"),
          "large": ("long", "string", *(("string", "double") * _ITEMS), "long")}


def _unit(n: int) -> float:
    """A value in [0, 1) that differs from record to record, without a random generator."""
    return ((n * 2654435761) % 4294967296) / 4294967296


def _hole_values(kind: str, n: int, ts: int) -> list:
    """The values that differ between records of one shape, in the order of `_HOLES[kind]`."""
    if kind in ("small", "event"):
        return [n, f"user-{n * 7919 % 1_000_000:06d}", ts, _unit(n)]
    items = []
    for k in range(_ITEMS):
        items += [f"SKU-{(n * 7 + k * 13) % 10_000:04d}", round(_unit(n + k) * 100, 2)]
    return [n, f"Customer {n * 31 % 100_000}", *items, ts]


def _shape_record(kind: str, shape: int, v: list) -> dict:
    """The record of shape `shape` holding the values `v`."""
    if kind in ("small", "event"):
        rec = {"id": v[0], "user": v[1], "url": "https://shop.example/p/" + "x" * (60 + shape * 7 % 50),
               "ts": v[2], "score": v[3]}
        if kind == "event":
            rec["type"] = EVENT_TYPES[shape % len(EVENT_TYPES)]
        return rec
    return {"id": v[0], "ts": v[-1],
            "customer": {"name": v[1], "email": "someone@example.com", "address": "Street " + "y" * (40 + shape * 3)},
            "items": [{"sku": v[2 + 2 * k], "qty": 1 + (shape + k) % 8, "price": v[3 + 2 * k],
                       "note": "n" * (130 + (shape * 5 + k * 11) % 40)} for k in range(_ITEMS)]}


def _shape_of(n: int) -> int:
    return (n * 2654435761 >> 7) % N_SHAPES


class RecordMaker:
    """Confluent-framed Avro values at producer speed. Each record shape is encoded once
    by fastavro, with a sentinel wherever a value differs between records; a value is
    then the shape's constant pieces joined with that record's own values' encodings,
    the same bytes fastavro writes for the whole record (a unit test holds it to that)."""

    def __init__(self, kind: str, schema_id: int):
        import fastavro

        from kafka_landing.avro_landing.framing import frame

        self.kind = kind
        self.schema_id = schema_id
        parsed = fastavro.parse_schema(SCHEMAS[kind])
        types = _HOLES[kind]
        self._encoders = [_ENCODE[t] for t in types]
        sentinels = [_sentinel(t, j) for j, t in enumerate(types)]
        self._pieces = [_pieces(kind, shape, frame(schema_id, fastavro_encode(parsed, _shape_record(
            kind, shape, sentinels))), [_ENCODE[t](s) for t, s in zip(types, sentinels)]) for shape in range(N_SHAPES)]

    def record(self, n: int, ts: int) -> dict:
        """Record `n` as a dict (for checking the fast path against fastavro)."""
        return _shape_record(self.kind, _shape_of(n), _hole_values(self.kind, n, ts))

    def value(self, n: int, ts: int) -> bytes:
        pieces = self._pieces[_shape_of(n)]
        out = [pieces[0]]
        for enc, v, piece in zip(self._encoders, _hole_values(self.kind, n, ts), pieces[1:]):
            out.append(enc(v))
            out.append(piece)
        return b"".join(out)


def _pieces(kind: str, shape: int, value: bytes, holes: list[bytes]) -> list[bytes]:
    """The constant pieces of a shape's framed value around its holes (each sentinel's encoding,
    found once, in schema order)."""
    found = []
    for j, enc in enumerate(holes):
        if value.count(enc) != 1:
            raise AssertionError(f"{kind} shape {shape}: sentinel of value {j} occurs {value.count(enc)} times")
        found.append((value.index(enc), len(enc)))
    pieces, at = [], 0
    for pos, size in found:  # in hole order, which is the schema's field order
        if pos < at:
            raise AssertionError(f"{kind} shape {shape}: values out of schema order")
        pieces.append(value[at:pos])
        at = pos + size
    pieces.append(value[at:])
    return pieces


def _sentinel(avro_type: str, j: int):
    if avro_type == "long":
        return 0x3C3C3C3C3C00 + j
    if avro_type == "string":
        return f"\x02<value {j:02d}>\x02"
    return struct.unpack("<d", bytes([0x3C] * 6 + [j, 0x3C]))[0]


def fastavro_encode(parsed, record: dict) -> bytes:
    import io

    import fastavro

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    return buf.getvalue()


@dataclass(frozen=True)
class TopicSpec:
    """A topic to produce: `per_hour` records of `kind` in each of `hours`. `event_ts`: every
    record's `ts` field (its event time) instead of its Kafka timestamp: late records;
    `first_n`: the first record's number (ids and keys go on from there)."""
    topic: str
    kind: str
    hours: list[datetime]
    per_hour: int
    event_ts: int | None = None
    first_n: int = 0
    partitions: int = PARTITIONS


def _producer(bootstrap: str):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "batch.size": 4_000_000,
                     "batch.num.messages": 100_000, "compression.type": "lz4",
                     "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576})


def produce_topic(stack: Stack, spec: TopicSpec) -> dict:
    """The topic's records, timestamps spread evenly over each hour, round robin over the
    partitions; what was produced, with its size and speed."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from kafka_landing_tools.demo.generate import ensure_topics, register

    t0 = time.monotonic()
    ensure_topics(stack.bootstrap, {spec.topic: spec.partitions}, config={"retention.ms": "-1"})
    schema_id = register(SchemaRegistryClient({"url": stack.registry}), f"{spec.topic}-value", SCHEMAS[spec.kind])
    producer = _producer(stack.bootstrap)
    produce, value_of, topic = producer.produce, RecordMaker(spec.kind, schema_id).value, spec.topic
    size, n = 0, spec.first_n
    for hour in spec.hours:
        base = int(hour.timestamp() * 1000)
        for i in range(spec.per_hour):
            ts = base + (i * 3_600_000) // spec.per_hour
            value = value_of(n, ts if spec.event_ts is None else spec.event_ts)
            size += len(value)
            try:
                produce(topic, value, b"%d" % n, partition=n % spec.partitions, timestamp=ts)
            except BufferError:  # the local queue is full: let librdkafka send, then retry once
                producer.flush(60)
                produce(topic, value, b"%d" % n, partition=n % spec.partitions, timestamp=ts)
            n += 1
            if n % 20_000 == 0:
                producer.poll(0)
    left = producer.flush(300)
    if left:
        raise BenchError(f"producing {topic}: {left} messages still unsent after 300 s; is the broker "
                         f"at {stack.bootstrap} up (make stack-status)?")
    seconds = time.monotonic() - t0
    n -= spec.first_n
    return {"topic": topic, "messages": n, "mb": round(size / 2**20, 2), "seconds": round(seconds, 2),
            "messages_per_s": round(n / seconds) if seconds else 0}
