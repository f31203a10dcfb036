"""Many topics in one run (issue 36, item 2): the topics that share their hours and grace land
together, one hourly run and one Spark session for all of them, and a topic that fails fails alone
and says so, on a real broker, Spark and Dagster instance."""

from __future__ import annotations

import json
from datetime import timedelta

from dagster import build_schedule_context

from kafka_landing.definitions import build_definitions, build_resources, hourly_job_name
from kafka_landing.avro_landing.assets import landing_key
from kafka_landing.kafka_slices.assets import slice_key
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, hour_tag, to_millis
from kafka_landing_tests.conftest import utcnow


def test_one_hourly_run_lands_every_topic_of_a_group_and_a_failing_topic_fails_alone(
        code_location, instance, make_topic, send, spark, tmp_path):
    good, bad, late = make_topic(partitions=2), make_topic(partitions=1), make_topic(partitions=1)
    landing, _ = code_location({good: {"dataset": "g", "table": "good", "grace_minutes": 0, "dead_letter_limit": 1.0},
                                bad: {"dataset": "g", "table": "bad", "dead_letter_limit": 0.1, "grace_minutes": 0},
                                late: {"dataset": "g", "table": "late", "grace_minutes": 30}}, dead_letter_limit=0.5)
    h = floor_hour(utcnow()) - ONE_HOUR * 3
    at = to_millis(h + timedelta(minutes=10))
    # `good`: records that cannot be decoded, within its dead-letter limit (they land as dead letters).
    # `bad`: the same, over its limit of 10%: its hour fails, terminally, publishing nothing.
    send([(good, p, at, None, b"\x01not framed") for p in (0, 1)] + [(bad, 0, at, None, b"\x01not framed")])
    defs = build_definitions()
    schedules = {s.name: s for s in defs.schedules if s.name.startswith("land_topics_")}
    first = defs.get_assets_def(landing_key(good)).partitions_def.start
    together, alone = hourly_job_name(first, 0), hourly_job_name(first, 30)
    assert {s.name: s.job_name for s in schedules.values()} == {f"{together}_hourly": together,
                                                                  f"{alone}_hourly": alone}
    job = defs.resolve_job_def(together)
    assert set(job.asset_layer.selected_asset_keys) == {k(t) for t in (good, bad) for k in (slice_key, landing_key)}, \
        "the topic with another grace ticks apart"

    # The tick that lands hour h for grace 0, as the daemon evaluates it.
    with build_schedule_context(scheduled_execution_time=h + ONE_HOUR + timedelta(minutes=5)) as ctx:
        request = schedules[f"{together}_hourly"](ctx)
    assert request.partition_key == hour_key(h)
    result = job.execute_in_process(partition_key=request.partition_key, instance=instance,
                                    resources=build_resources(), raise_on_error=False)

    assert len(instance.get_runs()) == 1, "one run for both topics"
    assert not result.success, "the run says a topic failed"
    landed = {e.asset_key for e in result.get_asset_materialization_events()}
    assert landed == {slice_key(good), landing_key(good), slice_key(bad)}
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failures] == [landing_key(bad).to_python_identifier()]
    message = failures[0].event_specific_data.error.message
    assert bad in message and "dead letter" in message, message
    # The good topic's hour is whole: its dead letters and its (empty) table hour are published.
    manifest = json.loads((landing / "dead_letters" / good / f"hour={hour_tag(h)}" / "_MANIFEST.json").read_text())
    assert manifest["rows"] == 2
    assert (landing / "tables" / "g" / "good" / f"hour={hour_tag(h)}" / "_DONE.json").exists()
    assert not (landing / "tables" / "g" / "bad" / f"hour={hour_tag(h)}").exists(), "the failed topic published nothing"
