"""Backfills of a range that fail half way, on a real Dagster instance, broker,
registry and Spark: the hours that worked keep their own materialisations and
row counts, the failing hour says which and why, and a retry of the range does
not redo the hours already done unless the run asks for it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterInstance,
    Definitions,
    Failure,
    HourlyPartitionsDefinition,
    asset,
    define_asset_job,
)
from dagster._core.storage.partition_status_cache import (
    get_and_update_asset_status_cache_value,
)

from kafka_landing.avro_landing.framing import frame
from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing.demo.generate import encode, register
from kafka_landing.hours import REDO_DONE_HOURS_TAG, run_hours, single_run
from kafka_landing.naming import (
    ONE_HOUR,
    asset_safe,
    floor_hour,
    hour_key,
    hour_tag,
    to_millis,
)
from kafka_landing_tests.conftest import utcnow

hourly = HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")

ROW = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]}
HOURS = 5
BAD_HOUR = 2  # the middle hour of the range holds the one undecodable record


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as inst:
        yield inst


@pytest.fixture
def configure(code_location):
    """(Re)write the topic config; build_definitions() reads it again."""
    return lambda topic, dead_letter_limit: code_location(
        {topic: {"dataset": "bf", "table": "rows", "dead_letter_limit": dead_letter_limit}})


def run_range(instance, first, last, tags=None):
    defs = build_definitions()
    (job,) = [j for j in defs.resolve_all_job_defs() if j.name.startswith("land_")]  # the config has one topic
    return job.execute_in_process(
        instance=instance, resources=build_resources(), raise_on_error=False,
        tags={"dagster/asset_partition_range_start": hour_key(first),
              "dagster/asset_partition_range_end": hour_key(last), **(tags or {})},
    )


def materializations(instance, key: AssetKey) -> dict[str, list]:
    """Every materialisation of `key` on the instance, by partition, oldest first."""
    by_partition: dict[str, list] = {}
    for rec in reversed(instance.fetch_materializations(key, limit=1000).records):
        by_partition.setdefault(rec.partition_key, []).append(rec)
    return by_partition


def row_count(rec) -> int:
    return rec.asset_materialization.metadata["dagster/row_count"].value


def attempts(root, hours) -> dict[str, str]:
    """The landing attempt that wrote each hour's done file (a redone hour gets a new one)."""
    out = {}
    for h in hours:
        done = root / "landing" / "tables" / "bf" / "rows" / f"hour={hour_tag(h)}" / "_DONE.json"
        if done.exists():
            out[hour_key(h)] = json.loads(done.read_text())["attempt"]
    return out


def step_failures(result) -> dict[str, str]:
    return {e.step_key: e.event_specific_data.error.message
            for e in result.all_events if e.event_type_value == "STEP_FAILURE"}


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


# --- the same rules on toy assets: no broker, no Spark, seconds -------------------------------

RANGE = [f"2026-01-01-{h:02d}:00" for h in range(6)]


def toy_defs(calls: list, broken: dict):
    """`up` -> `down`, both hourly with a single-run backfill policy; `broken` maps an hour
    to the exception its `down` raises. Every hour `down` runs is appended to `calls`."""

    @asset(partitions_def=hourly, backfill_policy=single_run)
    def up(context):
        return run_hours(context, AssetKey("up"), lambda k: ({"dagster/row_count": 1}, []))

    @asset(deps=[up], partitions_def=hourly, backfill_policy=single_run,
           check_specs=[AssetCheckSpec("even", asset="down", partitions_def=hourly)])
    def down(context):
        def one_hour(k):
            calls.append(k)
            if k in broken:
                raise broken[k]
            hour = int(k[11:13])
            return ({"dagster/row_count": hour * 10, "hour": hour},
                    [AssetCheckResult(check_name="even", passed=hour % 2 == 0, severity=AssetCheckSeverity.WARN,
                                      metadata={"hour": hour})])
        return run_hours(context, AssetKey("down"), one_hour)

    return Definitions(assets=[up, down], jobs=[define_asset_job(name, selection=sel, partitions_def=hourly)
                                                 for name, sel in (("both", ["up", "down"]), ("up_only", ["up"]),
                                                                   ("down_only", ["down"]))])


def evaluations(result, check="even") -> dict[str, bool]:
    return {e.partition: e.passed for e in result.get_asset_check_evaluations() if e.check_name == check}


def stored_checks(instance, check="even") -> dict[str, str]:
    """The latest result per hour, read back from the instance (what the UI shows per partition)."""
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("down"), check), limit=1000)
    latest = {}
    for rec in history:  # newest first
        latest.setdefault(rec.partition, rec.status.value)
    return latest


def toy_range(defs, instance, job="both", tags=None, first=RANGE[0], last=RANGE[-1]):
    return defs.resolve_job_def(job).execute_in_process(
        instance=instance, raise_on_error=False,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last, **(tags or {})})


def test_every_hour_of_a_range_is_tried_and_every_failed_hour_named(instance):
    calls = []
    defs = toy_defs(calls, {RANGE[2]: Failure(description="slice cannot be planned", allow_retries=False), RANGE[4]: ValueError("bug")})
    result = toy_range(defs, instance)
    assert not result.success
    assert calls == RANGE, "hours after a failed one still run"
    message = step_failures(result)["down"]
    assert f"hour {RANGE[2]}: slice cannot be planned" in message and f"hour {RANGE[4]}: ValueError: bug" in message
    assert "2 of 6 hours of down failed" in message
    mats = materializations(instance, AssetKey("down"))
    assert {k: [row_count(r) for r in v] for k, v in mats.items()} == \
        {k: [int(k[11:13]) * 10] for k in RANGE if k not in (RANGE[2], RANGE[4])}
    # What the UI shows: the done hours materialised, the two others failed.
    status = get_and_update_asset_status_cache_value(instance, AssetKey("down"), hourly)
    assert sorted(status.deserialize_materialized_partition_subsets(hourly).get_partition_keys()) == \
        [RANGE[0], RANGE[1], RANGE[3], RANGE[5]]
    assert sorted(status.deserialize_failed_partition_subsets(hourly).get_partition_keys()) == [RANGE[2], RANGE[4]]
    # Each done hour's check result on its own hour, as the instance keeps it for the UI.
    assert evaluations(result) == {k: int(k[11:13]) % 2 == 0 for k in RANGE if k not in (RANGE[2], RANGE[4])}
    # The failed hours' checks stay planned by a run that failed: the UI shows them as execution failed.
    assert stored_checks(instance) == {k: "PLANNED" if k in (RANGE[2], RANGE[4]) else
                                       "SUCCEEDED" if int(k[11:13]) % 2 == 0 else "FAILED" for k in RANGE}
    (ev,) = [e for e in result.get_asset_check_evaluations() if e.partition == RANGE[3]]
    assert ev.metadata["hour"].value == 3
    assert ev.target_materialization_data.storage_id == \
        materializations(instance, AssetKey("down"))[RANGE[3]][-1].storage_id, "the result is current for its hour"


def test_a_retry_redoes_only_hours_not_done_or_whose_upstream_changed(instance):
    calls, broken = [], {RANGE[3]: Failure(description="broken")}
    defs = toy_defs(calls, broken)
    assert not toy_range(defs, instance).success
    broken.clear()
    calls.clear()
    result = toy_range(defs, instance)
    assert result.success and calls == [RANGE[3]], "only the failed hour is redone"
    latest = {k: v[-1] for k, v in materializations(instance, AssetKey("down")).items()}
    assert {k: row_count(r) for k, r in latest.items()} == {k: int(k[11:13]) * 10 for k in RANGE}
    assert [k for k, r in latest.items() if not r.asset_materialization.metadata["reused"].value] == [RANGE[3]]
    # Every hour of the range keeps a current result, the reused ones the result they got.
    assert evaluations(result) == {k: int(k[11:13]) % 2 == 0 for k in RANGE}
    for e in result.get_asset_check_evaluations():
        assert e.target_materialization_data.storage_id == latest[e.partition].storage_id

    # The upstream of hour 5 is materialised again on its own: `down` takes it in, nothing else.
    assert toy_range(defs, instance, job="up_only", first=RANGE[5], last=RANGE[5]).success
    calls.clear()
    assert toy_range(defs, instance, job="down_only").success and calls == [RANGE[5]]
    calls.clear()
    result = toy_range(defs, instance, job="down_only")
    assert result.success and calls == [], "every hour done: nothing redone, the step still succeeds"
    assert evaluations(result) == {k: int(k[11:13]) % 2 == 0 for k in RANGE}
    # Asked to redo: every hour runs.
    assert toy_range(defs, instance, job="down_only", tags={REDO_DONE_HOURS_TAG: "true"}).success
    assert calls == RANGE


def test_a_single_hour_always_runs_and_its_failure_names_the_hour(instance):
    calls = []
    defs = toy_defs(calls, {RANGE[2]: Failure(description="slice cannot be planned", allow_retries=False)})
    for _ in range(2):
        assert toy_range(defs, instance, first=RANGE[0], last=RANGE[0]).success
    assert calls == [RANGE[0], RANGE[0]], "one hour asked for explicitly is redone (the re-land button)"
    result = toy_range(defs, instance, first=RANGE[2], last=RANGE[2])
    assert step_failures(result)["down"].endswith(f"Failure: hour {RANGE[2]}: slice cannot be planned\n")
