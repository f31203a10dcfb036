"""Fixtures of the fault tests: demo data on fresh topics, one closed hour each."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest

from kafka_landing_tools.demo.generate import ORDERS, WEB, demo_hours, generate
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.faults.harness import WebHour


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
