"""Demo data: realistic Confluent-framed Avro events on two multi-partition topics.

Registers the demo schemas, then produces events with CreateTime timestamps
spread over the last closed hours, out of order, with keys, headers, nested
records, arrays, maps, enums, logical types, a second schema version that adds
an optional field, several event types for routing, and a few bad records
(bad magic byte, unknown schema id, truncated body, null value).

Returns what it sent, so tests can compare landed rows record by record.

    python -m kafka_landing_tools.demo.generate [--hours 3] [--per-hour 400]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import fastavro
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kafka_landing.avro_landing.framing import frame
from kafka_landing.config import DEMO_TOPICS, demo_hour_count, demo_hours  # noqa: F401 - the demo's hours, read by its users
from kafka_landing.naming import to_millis

SCHEMAS = Path(__file__).parent / "schemas"
ORDERS, WEB = DEMO_TOPICS
PARTITIONS = {ORDERS: 3, WEB: 4}
UNKNOWN_SCHEMA_ID = 987_654
BAD_KINDS = ("bad magic byte", "unknown schema id", "corrupt body", "null value")


@dataclass
class Sent:
    """One produced record and where it went."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    record: dict | None  # the Avro record, None for bad records
    schema_id: int | None
    bad: str | None = None  # the dead-letter reason it should get


@dataclass
class Produced:
    records: list[Sent] = field(default_factory=list)

    def for_topic(self, topic: str) -> list[Sent]:
        return [r for r in self.records if r.topic == topic]


def load_schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.avsc").read_text())


def ensure_topics(bootstrap: str, partitions: dict[str, int], config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, n, 1, config=config or {}) for t, n in partitions.items() if t not in existing]
    for topic, fut in (admin.create_topics(new) if new else {}).items():
        try:
            fut.result()
        except Exception as exc:  # created meanwhile by someone else is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def register(registry: SchemaRegistryClient, subject: str, schema: dict) -> int:
    return registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


def encode(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def _order(rng: random.Random, ts: datetime, v2: bool) -> dict:
    items = [
        {"sku": f"SKU-{rng.randint(1, 500):04d}", "quantity": rng.randint(1, 5),
         "unit_price": Decimal(rng.randint(100, 99999)) / 100}
        for _ in range(rng.randint(1, 4))
    ]
    rec = {
        "order_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "customer": {"id": rng.randint(1, 10_000), "name": rng.choice(["Ada", "Linus", "Grace", "Ken", "Barbara"]),
                     "tier": rng.choice(["BRONZE", "SILVER", "GOLD"])},
        "items": items,
        "total": sum((i["unit_price"] * i["quantity"] for i in items), Decimal("0.00")).quantize(Decimal("0.01")),
        # Event time lags Kafka time by up to 90 minutes: the archive splits by it.
        "created_at": ts - timedelta(minutes=rng.randint(0, 90)),
        "ship_date": (ts.date() + timedelta(days=rng.randint(1, 5))) if rng.random() < 0.8 else None,
    }
    if v2:
        rec["coupon"] = rng.choice([None, "WELCOME10", "BLACKFRIDAY"])
    return rec


def _web_event(rng: random.Random, ts: datetime) -> dict:
    kind = rng.choices(["page_view", "click", "signup", "purchase"], weights=[6, 3, 1, 1])[0]
    return {
        "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "type": kind,
        "user_id": rng.randint(1, 5000),
        "url": f"https://shop.example/{rng.choice(['home', 'cart', 'p/42', 'search?q=kafka'])}",
        "occurred_at": ts - timedelta(seconds=rng.randint(0, 30)),
        "properties": {"ref": rng.choice(["ads", "mail", "direct"]), "ab": rng.choice(["a", "b"])},
        "device": {"os": rng.choice(["ios", "android", "linux"]), "version": rng.choice([None, "17.1", "14"])},
    }


def produce(bootstrap: str, items: list[tuple], flush_timeout: float = 60) -> list[Sent]:
    """Produce (topic, partition, ts_ms, key, value, headers, record, schema_id, bad) tuples in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    sent: list[Sent] = []
    errors: list[str] = []

    def on_delivery(err, msg, item):
        if err is not None:
            errors.append(str(err))
            return
        topic, partition, ts, key, value, _h, record, sid, bad = item
        sent.append(Sent(topic, msg.partition(), msg.offset(), ts, key, value, record, sid, bad))

    for item in items:
        topic, partition, ts, key, value, headers, *_ = item
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts, headers=headers,
                         on_delivery=lambda err, msg, item=item: on_delivery(err, msg, item))
        producer.poll(0)
    remaining = producer.flush(flush_timeout)
    if remaining or errors:
        raise RuntimeError(f"producing failed: {remaining} undelivered, errors: {errors[:3]}")
    return sorted(sent, key=lambda s: (s.topic, s.partition, s.offset))


LATE_DAYS = 2  # how late the demo's late orders are: their devices were offline for two days


def late_orders(bootstrap: str, registry_url: str, hour: datetime, n: int = 5, seed: int = 11,
                topic: str = ORDERS) -> list[Sent]:
    """`n` orders that reach Kafka in `hour` but were created `LATE_DAYS` days before: what the
    event-time table shows as an amendment of an event day already loaded (or a day of its own)."""
    rng = random.Random(seed)
    registry = SchemaRegistryClient({"url": registry_url})
    schema = load_schema("order_v1")
    sid = register(registry, f"{topic}-value", schema)
    items = []
    for _ in range(n):
        ts = hour + timedelta(milliseconds=rng.randrange(3_600_000))
        record = _order(rng, ts, v2=False)
        record["created_at"] = ts - timedelta(days=LATE_DAYS)
        items.append((topic, rng.randrange(PARTITIONS[ORDERS]), to_millis(ts), record["order_id"].encode(),
                      frame(sid, encode(schema, record)), None, record, sid, None))
    return produce(bootstrap, items)


def generate(
    bootstrap: str, registry_url: str, hours: int = 3, per_hour: int = 400,
    now: datetime | None = None, seed: int = 7, topics: dict[str, str] | None = None,
) -> Produced:
    """Produce demo data for the last closed hours; `topics` renames the two demo topics (tests)."""
    rng = random.Random(seed)
    now = now or datetime.now(timezone.utc)
    names = {ORDERS: ORDERS, WEB: WEB, **(topics or {})}
    ensure_topics(bootstrap, {names[t]: n for t, n in PARTITIONS.items()})
    registry = SchemaRegistryClient({"url": registry_url})
    order_v1, order_v2, web_v1 = load_schema("order_v1"), load_schema("order_v2"), load_schema("web_event_v1")
    ids = {
        "order_v1": register(registry, f"{names[ORDERS]}-value", order_v1),
        "order_v2": register(registry, f"{names[ORDERS]}-value", order_v2),
        "web_v1": register(registry, f"{names[WEB]}-value", web_v1),
    }
    hour_list = demo_hours(now, hours)
    items = []
    for h_i, hour in enumerate(hour_list):
        for n in range(per_hour):
            ts = hour + timedelta(milliseconds=rng.randrange(3_600_000))
            topic = ORDERS if n % 3 == 0 else WEB
            headers = [("trace-id", uuid.UUID(int=rng.getrandbits(128)).hex.encode()), ("source", b"demo")]
            if topic == ORDERS:
                # The second schema version appears from the second hour on.
                v2 = h_i > 0 and rng.random() < 0.5
                schema, sid = (order_v2, ids["order_v2"]) if v2 else (order_v1, ids["order_v1"])
                record = _order(rng, ts, v2)
                key = record["order_id"].encode()
            else:
                schema, sid = web_v1, ids["web_v1"]
                record = _web_event(rng, ts)
                key = str(record["user_id"]).encode()
            value = frame(sid, encode(schema, record))
            part = rng.randrange(PARTITIONS[topic])
            items.append((names[topic], part, to_millis(ts), key, value, headers, record, sid, None))
        # A few bad records an hour, one of each kind on the web topic.
        for kind in BAD_KINDS:
            ts = to_millis(hour + timedelta(milliseconds=rng.randrange(3_600_000)))
            good = frame(ids["web_v1"], encode(web_v1, _web_event(rng, hour)))
            value = {
                "bad magic byte": b"\x01" + good[1:],
                "unknown schema id": frame(UNKNOWN_SCHEMA_ID, good[5:]),
                "corrupt body": good[: len(good) // 2],
                "null value": None,
            }[kind]
            items.append((names[WEB], rng.randrange(PARTITIONS[WEB]), ts, b"bad", value, None, None, None, kind))
    # Produce in roughly time order, as real producers do, but with up to five
    # minutes of disorder, so CreateTime is not monotonic within a partition.
    items.sort(key=lambda it: it[2] + rng.randrange(300_000))
    return Produced(produce(bootstrap, items))


def main() -> None:
    from kafka_landing_tools import devstack

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=int, default=3)
    ap.add_argument("--per-hour", type=int, default=400)
    ap.add_argument("--bootstrap", default=devstack.BOOTSTRAP)
    ap.add_argument("--registry", default=devstack.REGISTRY_URL)
    args = ap.parse_args()
    sent = generate(args.bootstrap, args.registry, hours=args.hours, per_hour=args.per_hour)
    for topic in (ORDERS, WEB):
        recs = sent.for_topic(topic)
        print(f"{topic}: {len(recs)} records ({sum(1 for r in recs if r.bad)} bad)")


if __name__ == "__main__":
    main()
