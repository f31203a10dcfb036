"""Backfills of a range that fail half way, on a real Dagster instance, broker,
registry and Spark: the hours that worked keep their own materialisations and
row counts, the failing hour says which and why, and a retry of the range does
not redo the hours already done unless the run asks for it. The same rules on toy
assets, in seconds: unit/test_hours_ranges.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from dagster import (
    AssetKey,
    HourlyPartitionsDefinition,
)

from kafka_landing.avro_landing.framing import frame
from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing_tools.demo.generate import encode, register
from kafka_landing.hours import REDO_DONE_HOURS_TAG
from kafka_landing.naming import (
    ONE_HOUR,
    asset_safe,
    floor_hour,
    hour_key,
    hour_tag,
    to_millis,
)
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import materializations, row_count, step_failures

hourly = HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")

ROW = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]}
HOURS = 5
BAD_HOUR = 2  # the middle hour of the range holds the one undecodable record


@pytest.fixture
def configure(code_location):
    """(Re)write the topic config; build_definitions() reads it again."""
    return lambda topic, dead_letter_limit: code_location(
        {topic: {"dataset": "bf", "table": "rows", "dead_letter_limit": dead_letter_limit}})


def run_range(instance, first, last, tags=None):
    defs = build_definitions()
    # The config has one topic: its own job (the hourly group's job lands the same assets).
    (job,) = [j for j in defs.resolve_all_job_defs() if j.name.startswith("land_") and not j.name.startswith("land_topics_")]
    return job.execute_in_process(
        instance=instance, resources=build_resources(), raise_on_error=False,
        tags={"dagster/asset_partition_range_start": hour_key(first),
              "dagster/asset_partition_range_end": hour_key(last), **(tags or {})},
    )


def attempts(root, hours) -> dict[str, str]:
    """The landing attempt that wrote each hour's done file (a redone hour gets a new one)."""
    out = {}
    for h in hours:
        done = root / "landing" / "tables" / "bf" / "rows" / f"hour={hour_tag(h)}" / "_DONE.json"
        if done.exists():
            out[hour_key(h)] = json.loads(done.read_text())["attempt"]
    return out


def test_a_range_that_fails_half_way_keeps_the_done_hours_and_retries_only_the_rest(
        configure, instance, make_topic, send, registry, spark, tmp_path):
    topic = make_topic(partitions=1)
    configure(topic, dead_letter_limit=0.0)
    schema_id = register(registry.client(), f"{topic}-value", ROW)
    first = floor_hour(utcnow()) - ONE_HOUR * 8
    hours = [first + ONE_HOUR * i for i in range(HOURS)]
    bad = hours[BAD_HOUR]
    records = []
    for i, h in enumerate(hours):  # hour i holds i + 1 good records: each hour its own row count
        records += [(topic, 0, to_millis(h + timedelta(minutes=m + 1)), None,
                     frame(schema_id, encode(ROW, {"id": i * 100 + m}))) for m in range(i + 1)]
        if h == bad:  # in order: a record lands in the hour its offset falls in
            records.append((topic, 0, to_millis(h + timedelta(minutes=30)), None, b"\x07not confluent framing"))
    send(records)
    slices, landing = AssetKey(["kafka_slices", asset_safe(topic)]), AssetKey(["avro_landing", asset_safe(topic)])
    good = [hour_key(h) for i, h in enumerate(hours) if i != BAD_HOUR]

    # 1. One run for the range; landing the middle hour fails on its dead letter.
    result = run_range(instance, hours[0], hours[-1])
    assert not result.success
    slice_mats, landing_mats = materializations(instance, slices), materializations(instance, landing)
    assert {k: [row_count(r) for r in recs] for k, recs in slice_mats.items()} == \
        {hour_key(h): [i + 1 + (i == BAD_HOUR)] for i, h in enumerate(hours)}
    assert {k: [row_count(r) for r in recs] for k, recs in landing_mats.items()} == \
        {hour_key(h): [i + 1] for i, h in enumerate(hours) if i != BAD_HOUR}, "own row count per hour, not the total"
    for k in good:  # each hour its own metadata, not the range's
        md = landing_mats[k][0].asset_materialization.metadata
        assert md["records_read"].value == row_count(landing_mats[k][0]) and md["dead_letters"].value == 0
    (message,) = step_failures(result).values()
    assert f"hour {hour_key(bad)}: " in message and "dead letters" in message
    for h in good:
        assert h not in message, "only the failing hour is named as failed"
    conservation = {e.partition: e.passed for e in result.get_asset_check_evaluations()
                    if e.asset_key == landing and e.check_name == "conservation"}
    assert conservation == {k: True for k in good}, "each landed hour's own check, on its hour"
    landed_first = attempts(tmp_path, hours)
    assert sorted(landed_first) == good

    # 2. The same range again, nothing fixed: the done hours are not redone, the bad one fails again.
    result = run_range(instance, hours[0], hours[-1])
    assert not result.success
    assert f"hour {hour_key(bad)}" in next(iter(step_failures(result).values()))
    assert attempts(tmp_path, hours) == landed_first
    assert {k: len(v) for k, v in materializations(instance, landing).items()} == {k: 1 for k in good}

    # 3. Fixed (dead letters allowed): only the failed hour is landed; done hours keep their figures.
    configure(topic, dead_letter_limit=1.0)
    result = run_range(instance, hours[0], hours[-1])
    assert result.success, step_failures(result)
    now_landed = attempts(tmp_path, hours)
    assert {k: now_landed[k] for k in good} == landed_first and hour_key(bad) in now_landed
    latest = {k: recs[-1] for k, recs in materializations(instance, landing).items()}
    assert {k: row_count(r) for k, r in latest.items()} == {hour_key(h): i + 1 for i, h in enumerate(hours)}
    for k in good:
        md = latest[k].asset_materialization.metadata
        assert md["reused"].value is True and md["done_by_run"].value != latest[k].run_id
    assert latest[hour_key(bad)].asset_materialization.metadata["reused"].value is False

    # 4. Asked to redo: every hour is landed again.
    result = run_range(instance, hours[0], hours[-1], tags={REDO_DONE_HOURS_TAG: "true"})
    assert result.success
    redone = attempts(tmp_path, hours)
    assert all(redone[k] != now_landed[k] for k in now_landed)
