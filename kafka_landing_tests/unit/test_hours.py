"""Hours that fail on a service briefly away are tried again in the step, a bounded number of
times; terminal failures and bugs are not (toy assets on an ephemeral instance, no services)."""

from __future__ import annotations

from dagster import (
    AssetKey,
    DagsterInstance,
    Failure,
    HourlyPartitionsDefinition,
    asset,
    materialize,
)

from kafka_landing.hours import IN_STEP_ATTEMPTS, run_hours, single_run

hourly = HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")

RANGE = [f"2026-01-01-{h:02d}:00" for h in range(3)]


def _flaky(calls: list, fails: dict[str, list]):
    """An asset whose hours raise the exceptions queued for them, one per attempt, then succeed."""

    @asset(partitions_def=hourly, backfill_policy=single_run)
    def flaky(context):
        def one_hour(k):
            calls.append(k)
            if fails.get(k):
                raise fails[k].pop(0)
            return {"dagster/row_count": 1}, []
        return run_hours(context, AssetKey("flaky"), one_hour)

    return flaky


def _batch(calls: list, fails: dict[str, list]):
    @asset(partitions_def=hourly, backfill_policy=single_run)
    def batch(context):
        def all_hours(keys):
            calls.append(list(keys))
            return {k: fails[k].pop(0) if fails.get(k) else ({"dagster/row_count": 1}, []) for k in keys}
        return run_hours(context, AssetKey("batch"), all_hours=all_hours)

    return batch


def _range(a, instance):
    return materialize([a], instance=instance, raise_on_error=False, tags={
        "dagster/asset_partition_range_start": RANGE[0], "dagster/asset_partition_range_end": RANGE[-1]})


def test_a_service_briefly_away_is_tried_again_in_the_step_and_the_hour_lands():
    calls = []
    fails = {RANGE[0]: [Failure("registry away") for _ in range(IN_STEP_ATTEMPTS - 1)]}
    with DagsterInstance.ephemeral() as instance:
        result = materialize([_flaky(calls, fails)], instance=instance, partition_key=RANGE[0], raise_on_error=False)
        assert result.success
    assert calls == [RANGE[0]] * IN_STEP_ATTEMPTS


def test_a_terminal_failure_or_a_bug_is_never_tried_again():
    for exc in (Failure("retention gap", allow_retries=False), ValueError("a bug")):
        calls = []
        with DagsterInstance.ephemeral() as instance:
            result = materialize([_flaky(calls, {RANGE[0]: [exc]})], instance=instance, partition_key=RANGE[0],
                                 raise_on_error=False)
        assert not result.success and calls == [RANGE[0]]


def test_retries_are_bounded_and_the_failure_says_how_many_attempts():
    calls = []
    fails = {RANGE[0]: [Failure("brokers localhost:9 away") for _ in range(IN_STEP_ATTEMPTS + 2)]}
    with DagsterInstance.ephemeral() as instance:
        result = materialize([_flaky(calls, fails)], instance=instance, partition_key=RANGE[0], raise_on_error=False)
    assert not result.success and len(calls) == IN_STEP_ATTEMPTS
    message = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error.message
    assert "brokers localhost:9 away" in message and f"tried {IN_STEP_ATTEMPTS} times" in message


def test_a_pass_of_many_hours_is_tried_again_only_for_the_hours_that_failed_transiently():
    calls = []
    fails = {RANGE[1]: [Failure("registry away")], RANGE[2]: [Failure("bad schema", allow_retries=False)]}
    with DagsterInstance.ephemeral() as instance:
        result = _range(_batch(calls, fails), instance)
        assert not result.success
        message = next(e for e in result.all_events
                       if e.event_type_value == "STEP_FAILURE").event_specific_data.error.message
        done = {r.partition_key for r in instance.fetch_materializations(AssetKey("batch"), limit=10).records}
    assert calls == [RANGE, [RANGE[1]]], "the second pass takes only the transient hour"
    assert done == {RANGE[0], RANGE[1]}
    assert f"hour {RANGE[2]}: bad schema" in message and "1 of 3 hours" in message
