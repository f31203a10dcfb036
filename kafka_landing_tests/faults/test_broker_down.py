"""Kafka unreachable (bootstrap servers on a port nothing listens on): planning and
landing fail naming the bootstrap servers, nothing is frozen or published, and a
later run with the right servers lands exactly.

Two topics: one whose hour is planned with the broker down, one whose slice is
frozen first and then landed with the broker down. Both failing runs go at once
(they mostly wait for the Kafka client's timeouts), each in its own Dagster instance.
"""

from __future__ import annotations

from kafka_landing.naming import slice_manifest_path
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.faults.harness import (
    check_landed_exactly,
    closed_port,
    deployment,
    finish,
    materialize,
    start,
    step_key,
    web_topic,
)


def _names_kafka(message: str, bootstrap: str) -> bool:
    return "kafka" in message.lower() and bootstrap in message


def test_broker_down_fails_clearly_publishes_nothing_then_lands(produce_web_hour, bootstrap, registry_url, tmp_path):
    now = utcnow()
    plan, land = produce_web_hour("plan_down", now=now), produce_web_hour("land_down", now=now)
    hour = plan.hour
    dep = deployment(tmp_path, {plan.topic: web_topic("plan_down"), land.topic: web_topic("land_down")},
                     bootstrap, registry_url)
    down = f"localhost:{closed_port()}"
    frozen = materialize(dep, dep.landing_assets(land.topic)[:1], hour, name="freeze")
    assert frozen.returncode == 0, f"{frozen.failures}\n{frozen.tail()}"

    # One attempt each: every attempt waits for the Kafka client's timeouts, and the bounded
    # retries of a service away are tested on their own (unit/test_hours.py).
    planning = start(dep, dep.landing_assets(plan.topic), hour, name="plan_down",
                     KAFKA_BOOTSTRAP_SERVERS=down, KAFKA_LANDING_IN_STEP_ATTEMPTS="1")
    landing = start(dep.with_own_instance("dagster_home_b"), dep.landing_assets(land.topic)[1:], hour,
                    name="land_down", KAFKA_BOOTSTRAP_SERVERS=down, KAFKA_LANDING_IN_STEP_ATTEMPTS="1")
    planning, landing = finish(planning), finish(landing)

    # Planning with the broker down: no slice is frozen from a log it could not see.
    assert planning.returncode != 0
    message = planning.failures.get(step_key(dep.landing_assets(plan.topic)[0]), "")
    assert _names_kafka(message, down), f"the failure should name Kafka and {down}; it says:\n{message or planning.tail()}"
    assert not (dep.landing / slice_manifest_path(plan.topic, hour)).exists()

    # Landing a frozen slice with the broker down: fails before reading, publishes nothing.
    assert landing.returncode != 0
    message = landing.failures.get(step_key(dep.landing_assets(land.topic)[1]), "")
    assert _names_kafka(message, down), f"the failure should name Kafka and {down}; it says:\n{message or landing.tail()}"
    published = [p for p in (dep.landing / "tables").rglob("*") if p.is_file()] if (dep.landing / "tables").exists() else []
    assert not published, f"published with the broker down: {published}"

    again = materialize(dep, dep.landing_assets(plan.topic) + dep.landing_assets(land.topic), hour,
                        name="broker_up")
    assert again.returncode == 0, f"{again.failures}\n{again.tail()}"
    for data in (plan, land):
        check_landed_exactly(dep, data.topic, hour, data.sent)
