"""The rules of a range run (`hours.run_hours`) on toy hourly assets and an ephemeral Dagster
instance, no broker, no Spark, seconds: every hour is tried and every failed hour named, a
retry redoes only hours not done or whose upstream changed, a single hour always runs. The
same on the real assets: integration/test_backfill.py."""

from __future__ import annotations

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    Definitions,
    Failure,
    HourlyPartitionsDefinition,
    asset,
    define_asset_job,
)
from dagster._core.storage.partition_status_cache import (
    get_and_update_asset_status_cache_value,
)

from kafka_landing.hours import REDO_DONE_HOURS_TAG, run_hours, single_run
from kafka_landing_tests.helpers import materializations, row_count, step_failures

hourly = HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")


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


def prepared_defs(calls: list, prepared: list, fail_prepare: bool):
    """`one`, hourly: `prepare` records the hours it is given (or fails), then each hour runs."""

    @asset(partitions_def=hourly, backfill_policy=single_run)
    def one(context):
        def prepare(keys):
            prepared.append(list(keys))
            if fail_prepare:
                raise RuntimeError("the shortcut broke")
            return f"{len(keys)} hours prepared"

        def one_hour(k):
            calls.append(k)
            return {"dagster/row_count": 1}, []

        return run_hours(context, AssetKey("one"), one_hour, prepare=prepare)

    return Definitions(assets=[one], jobs=[define_asset_job("one_job", selection=["one"], partitions_def=hourly)])


def test_prepare_gets_the_hours_still_to_do_and_a_failed_prepare_costs_no_hour(instance):
    calls, prepared = [], []
    defs = prepared_defs(calls, prepared, fail_prepare=False)
    assert toy_range(defs, instance, job="one_job", last=RANGE[2]).success
    assert prepared == [RANGE[:3]] and calls == RANGE[:3]
    logs = [e.user_message for e in instance.all_logs(instance.get_runs()[0].run_id)]
    assert any(m.endswith("3 hours prepared") for m in logs)

    calls.clear(), prepared.clear()
    assert toy_range(defs, instance, job="one_job").success  # hours 0-2 are done: prepared are the rest
    assert prepared == [RANGE[3:]] and calls == RANGE[3:]

    calls.clear(), prepared.clear()
    broken = prepared_defs(calls, prepared, fail_prepare=True)
    result = toy_range(broken, instance, job="one_job", tags={REDO_DONE_HOURS_TAG: "true"})
    assert result.success and prepared == [RANGE] and calls == RANGE
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("preparing 6 hours together failed (RuntimeError: the shortcut broke); each hour runs on its own" in m
               for m in logs)

    calls.clear(), prepared.clear()
    single = broken.resolve_job_def("one_job").execute_in_process(instance=instance, partition_key=RANGE[0])
    assert single.success and prepared == [] and calls == [RANGE[0]]  # one hour: nothing to prepare together


def test_a_long_range_is_prepared_a_day_at_a_time_before_that_days_hours(instance, monkeypatch):
    import kafka_landing.hours as hours

    monkeypatch.setattr(hours, "PREPARE_HOURS", 4)
    calls, prepared = [], []
    defs = prepared_defs(calls, prepared, fail_prepare=False)
    keys = [f"2026-01-0{1 + h // 24}-{h % 24:02d}:00" for h in range(9)]
    assert toy_range(defs, instance, job="one_job", first=keys[0], last=keys[-1]).success
    assert prepared == [keys[0:4], keys[4:8]]  # the last hour alone: nothing to do together
    assert calls == keys
    logs = [e.user_message for e in instance.all_logs(instance.get_runs()[0].run_id)]
    said = [m for m in logs if "hours prepared" in m or ": hour " in m]
    assert said.index(next(m for m in said if "4 hours prepared" in m and keys[4] in m)) > \
        said.index(next(m for m in said if f"hour 4/9 ({keys[3]})" in m)), "a day is prepared just before its hours"
