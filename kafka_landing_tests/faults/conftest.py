"""Fixtures of the fault tests: demo data on fresh topics, one closed hour each, and one big hour
the tests that break a service mid-read share."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from kafka_landing.avro_landing.framing import frame
from kafka_landing.naming import to_millis
from kafka_landing_tools.demo.generate import (
    ORDERS,
    WEB,
    demo_hours,
    encode,
    ensure_topics,
    generate,
    load_schema,
    produce,
    register,
)
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.faults.harness import WebHour

BIG_RECORDS, BIG_URL_BYTES, BIG_PARTITIONS = 12_000, 4_000, 4


@pytest.fixture(scope="session")
def produce_web_hour(bootstrap, registry_url):
    """Produce one closed hour of demo web events to a fresh topic (routing, 4 partitions,
    one of each dead-letter kind). Pass the same `now` to get the same hour for several topics."""

    def _produce(name: str, now: datetime | None = None, per_hour: int = 150) -> WebHour:
        now = now or utcnow()
        topic = f"fx_{name}_{uuid.uuid4().hex[:8]}"
        sent = generate(bootstrap, registry_url, hours=1, per_hour=per_hour, now=now,
                        topics={WEB: topic, ORDERS: f"{topic}_orders"})
        return WebHour(topic, demo_hours(now, 1)[0], sent.for_topic(topic))

    return _produce


@pytest.fixture(scope="session")
def big_hour(bootstrap, registry_url) -> WebHour:
    """Demo web events with a 4 KB url each (about 50 MB), all stamped in the last closed hour: big
    enough that a read is still going when a test stops the broker or the Spark server under it.
    Produced once for the tests that read it (each lands it into a deployment of its own), deleted
    after the session: 50 MB the broker need not keep."""
    topic = f"fx_restart_{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: BIG_PARTITIONS})
    schema = load_schema("web_event_v1")
    sid = register(SchemaRegistryClient({"url": registry_url}), f"{topic}-value", schema)
    hour = demo_hours(utcnow(), 1)[0]
    rng = random.Random(5)
    items = []
    for i in range(BIG_RECORDS):
        ts = hour + timedelta(milliseconds=rng.randrange(3_600_000))
        record = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "type": rng.choice(["page_view", "click", "signup"]), "user_id": i,
            "url": "https://shop.example/search?q=" + "".join(rng.choices("abcdefghij", k=BIG_URL_BYTES)),
            "occurred_at": ts, "properties": {"n": str(i)}, "device": {"os": "linux", "version": None},
        }
        items.append((topic, i % BIG_PARTITIONS, to_millis(ts), str(i).encode(), frame(sid, encode(schema, record)),
                      None, record, sid, None))
    yield WebHour(topic, hour, produce(bootstrap, items, flush_timeout=120))
    AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])
