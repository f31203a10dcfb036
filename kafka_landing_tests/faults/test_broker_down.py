"""Kafka unreachable (bootstrap servers on a port nothing listens on): planning and
landing fail naming the bootstrap servers, nothing is frozen or published, and a
later run with the right servers lands exactly.

Two topics: one whose hour is planned with the broker down, one whose slice is
frozen first and then landed with the broker down. The planning run goes while the other
slice freezes, each run in its own Dagster instance. The failing runs wait out the Kafka
client's timeouts: their runs shorten the resource's 30 s to a few seconds (run config),
else each waits a minute for a refusal it gets at once.
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


# Each request to the brokers that are away waits this long (the Kafka resource's own is 30 s).
DOWN_TIMEOUT_SECONDS = 3


def _names_kafka(message: str, bootstrap: str) -> bool:
    return "kafka" in message.lower() and bootstrap in message


def test_broker_down_fails_clearly_publishes_nothing_then_lands(produce_web_hour, bootstrap, registry_url, tmp_path):
    now = utcnow()
    plan, land = produce_web_hour("plan_down", now=now), produce_web_hour("land_down", now=now)
    hour = plan.hour
    dep = deployment(tmp_path, {plan.topic: web_topic("plan_down"), land.topic: web_topic("land_down")},
                     bootstrap, registry_url)
    down = f"localhost:{closed_port()}"
    # One attempt each: every attempt waits for the Kafka client's timeouts, and the bounded
    # retries of a service away are tested on their own (unit/test_hours.py).
    broker_down = {"KAFKA_BOOTSTRAP_SERVERS": down, "KAFKA_LANDING_IN_STEP_ATTEMPTS": "1",
                   "run_config": {"resources": {"kafka": {"config": {"bootstrap_servers": down,
                                                                     "timeout_seconds": DOWN_TIMEOUT_SECONDS}}}}}
    planning = start(dep.with_own_instance("dagster_home_b"), dep.landing_assets(plan.topic), hour,
                     name="plan_down", **broker_down)
    frozen = materialize(dep, dep.landing_assets(land.topic)[:1], hour, name="freeze")
    assert frozen.returncode == 0, f"{frozen.failures}\n{frozen.tail()}"
    landing = start(dep, dep.landing_assets(land.topic)[1:], hour, name="land_down", **broker_down)
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
