"""The schema registry unreachable: the hour fails naming the registry and its URL,
publishes nothing, and lands exactly once the registry answers again.

Unreachable is a real refused connection (a local port nothing listens on). The
dead-letter limit is 100% here, so a landing that took "registry unreachable"
for "unknown schema id" would publish an hour of dead letters and be caught.
"""

from __future__ import annotations

from kafka_landing.naming import asset_safe, dead_letter_dir
from kafka_landing_tests.faults.harness import (
    check_landed_exactly,
    closed_port,
    deployment,
    materialize,
    step_key,
    web_topic,
)


def test_registry_down_fails_clearly_publishes_nothing_then_lands(produce_web_hour, bootstrap, registry_url, tmp_path):
    data = produce_web_hour("registry_down")
    dep = deployment(tmp_path, {data.topic: web_topic("registry_down")}, bootstrap, registry_url,
                     dead_letter_limit=1.0)
    select = dep.landing_assets(data.topic)
    down = f"http://localhost:{closed_port()}/apis/ccompat/v7"

    # One attempt: each waits for the registry client's own retries, and the bounded tries in the
    # step are tested on their own (unit/test_hours.py).
    failed = materialize(dep, select, data.hour, name="registry_down", SCHEMA_REGISTRY_URL=down,
                         KAFKA_LANDING_IN_STEP_ATTEMPTS="1")

    assert failed.returncode != 0, "landing succeeded with the schema registry unreachable"
    message = failed.failures.get(step_key(f"avro_landing/{asset_safe(data.topic)}"), "")
    assert "schema registry" in message.lower() and down in message, (
        f"the failure should name the schema registry and {down}; it says:\n{message or failed.tail()}")
    published = [p for p in (dep.landing / "tables").rglob("*") if p.is_file()] if (dep.landing / "tables").exists() else []
    assert not published, f"published with the registry down: {published}"
    dead = dep.landing / dead_letter_dir(data.topic, data.hour)
    assert not (dead.exists() and any(p.is_file() for p in dead.rglob("*"))), \
        f"dead letters written with the registry down: {sorted(dead.rglob('*'))}"

    again = materialize(dep, select, data.hour, name="registry_up")
    assert again.returncode == 0, f"{again.failures}\n{again.tail()}"
    check_landed_exactly(dep, data.topic, data.hour, data.sent)
