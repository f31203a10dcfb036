"""The hourly partitions of a topic (UTC; every layer of the topic shares them),
and how an asset runs and reports one hour or a backfill range of hours.

A range runs as one run (one Spark session), but every hour is reported as
its own partition: its own materialisation, metadata and `dagster/row_count`,
and its own check results on that partition (`hour_check_events`).
An hour that fails does not stop the others; the step fails at the end naming
every failed hour, and the hours that worked keep their materialisations.
Launching the range again (or re-executing the run) skips the hours already
done, unless the run carries the tag `kafka_landing/redo_done_hours=true`.
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import NamedTuple

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    BackfillPolicy,
    Backoff,
    DagsterInstance,
    EventLogRecord,
    Failure,
    HourlyPartitionsDefinition,
    Jitter,
    MaterializeResult,
    MetadataValue,
    Output,
    RetryPolicy,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,  # not exported; the field AssetCheckEvaluation takes
)

from kafka_landing.config import (
    FIRST_HOUR_ENV,
    TopicConfig,
    TopicConfigError,
    env_first_hour,
)
from kafka_landing.errors import KafkaLandingError, is_transient
from kafka_landing.naming import Hour


@functools.cache
def _hours_from(first_hour: datetime) -> HourlyPartitionsDefinition:
    return HourlyPartitionsDefinition(start_date=Hour(first_hour).key, timezone="UTC")


def topic_hours(cfg: TopicConfig) -> HourlyPartitionsDefinition:
    """The topic's hours, from its first hour (see `config.with_first_hours`) on. Only ended
    hours are partitions; whether an hour is *closed* (grace passed) is checked when its slice
    is planned. One object per first hour: topics that start together share it."""
    first = cfg.first_hour or env_first_hour()
    if first is None:
        raise TopicConfigError(f"topic {cfg.topic!r}: no first hour; set first_hour in the topic config "
                               f"(or ${FIRST_HOUR_ENV})")
    return _hours_from(first)


def history(cfg: TopicConfig) -> str:
    """Where the topic's partitions start and why, for asset descriptions and metadata."""
    why = cfg.first_hour_source or f"${FIRST_HOUR_ENV}"
    return f"hours from {Hour(topic_hours(cfg).start).key} on ({why})"

# A backfill of many hours runs as one run: one Spark session for all of them.
single_run = BackfillPolicy.single_run()

# A broker or registry briefly away (restart, network blip) fails a step with a Failure that
# allows retries; terminal failures (retention gaps, bad schemas, 4xx answers...) do not
# (`failure`, from `errors.is_transient`). With this policy passed to the asset builders, a transient
# failure is retried after about 20 s, 40 s, 80 s (jittered), then the run fails. It is not
# the default: Dagster's RetryPolicy also retries a step killed by SIGKILL or the OOM killer.
# KAFKA_LANDING_RETRY_DELAY_SECONDS changes the first delay (a test suite may set it small).
RETRY_DELAY_ENV = "KAFKA_LANDING_RETRY_DELAY_SECONDS"
RETRY_DELAY_SECONDS = float(os.environ.get(RETRY_DELAY_ENV, "20"))
TRANSIENT_RETRIES = RetryPolicy(max_retries=3, delay=RETRY_DELAY_SECONDS,
                                backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
# What every run does by default instead: the hours that failed transiently are tried again in
# the step, after RETRY_DELAY_SECONDS, then twice that, and so on, this many attempts in all.
IN_STEP_ATTEMPTS = int(os.environ.get("KAFKA_LANDING_IN_STEP_ATTEMPTS", "4"))

REDO_DONE_HOURS_TAG = "kafka_landing/redo_done_hours"
"""Run tag: `true` makes a range redo hours already done (a single hour is always done)."""
SPARK_TAG = "kafka_landing/spark"
"""Run and op tag of work that starts Spark: dagster.yaml caps how many such runs run at once."""
CONSERVATION = "conservation"
"""The name of each layer's per-hour check that every record is accounted for."""

# Metadata every hour's materialisation carries, so a later run can tell whether it is done.
DONE_AT = "done_at"  # when the hour's work was done (kept when a later run reuses it)
DONE_BY_RUN = "done_by_run"  # the run that did it
REUSED = "reused"  # true: this run found the hour done and did not redo it
CHECKS = "check_results"  # the hour's own check results (Dagster keeps one per check and step)

_BACKFILL_TAG = "dagster/backfill"
PREPARE_HOURS = 24  # hours `prepare` takes at once: a day, so a year's backfill shows progress and stays bounded

OneHour = Callable[[str], tuple[dict, list[AssetCheckResult]]]
Outcome = tuple[dict, list[AssetCheckResult]] | BaseException
# All the hours of a run at once (a range landed in one pass): {hour: (metadata, checks) or why it failed}.
AllHours = Callable[[list[str]], dict[str, Outcome]]
Prepare = Callable[[list[str]], str | None]


class _Work(NamedTuple):
    """What an asset does for the hours of its run: `one_hour` at a time or `all_hours` at once,
    and `prepare` before each PREPARE_HOURS of a range's hours (see `run_hours`)."""

    one_hour: OneHour | None
    all_hours: AllHours | None
    prepare: Prepare | None = None


def run_hours(context: AssetExecutionContext, key: AssetKey, one_hour: OneHour | None = None,
              all_hours: AllHours | None = None, prepare: Prepare | None = None) -> Iterator:
    """Run the hours of the run, oldest first: `one_hour(partition_key) -> (metadata, check
    results)` hour by hour, or `all_hours(partition_keys) -> {key: (metadata, checks) or
    exception}` once for every hour still to do. Return (not yield) it from the asset body:
    Dagster iterates the events. A `Failure` fails its hour. `prepare(keys)`, before each
    PREPARE_HOURS of a range's hours still to do, may do work for all of them at once (what it
    did, for the log); if it fails, they run without it."""
    if (one_hour is None) == (all_hours is None):
        raise TypeError("run_hours takes one_hour or all_hours")
    keys = sorted(context.partition_keys)
    if len(keys) == 1:
        yield _single_hour(context, keys[0], _Work(one_hour, all_hours))
        return
    yield from _range(context, key, keys, _Work(one_hour, all_hours, prepare))


def _single_hour(context: AssetExecutionContext, k: str, work: _Work) -> MaterializeResult:
    """One hour asked for explicitly (a schedule tick, the sensor, a re-land button) always runs."""
    outcome = _attempts(context, k, _guarded(work.one_hour, work.all_hours), [k])[k]
    if isinstance(outcome, (Failure, KafkaLandingError)):  # said why: no traceback needed
        raise retry_or_give_up(context, _in_hour(failure(outcome), k)) from outcome
    if isinstance(outcome, BaseException):
        raise outcome
    metadata, checks = outcome
    return MaterializeResult(metadata={**metadata, **_done_now(context, checks)}, check_results=checks)


def _guarded(one_hour: OneHour | None, all_hours: AllHours | None) -> AllHours:
    """Either function as `all_hours`, every exception an outcome of its hours."""
    def run(keys: list[str]) -> dict[str, Outcome]:
        if all_hours is None:
            keys, out = list(keys), {}
            for k in keys:
                try:
                    out[k] = one_hour(k)
                except Exception as exc:  # noqa: BLE001 - one failed hour must not cost the others
                    out[k] = exc
            return out
        try:
            got = all_hours(keys)
        except Exception as exc:  # noqa: BLE001 - what concerns the whole pass fails each of its hours
            return {k: exc for k in keys}
        return {k: got[k] for k in keys}
    return run


def _attempts(context: AssetExecutionContext, what: str, run: AllHours, keys: list[str]) -> dict[str, Outcome]:
    """`run(keys)`, hours that failed transiently (a broker or the registry briefly away) run again
    after a backoff, IN_STEP_ATTEMPTS times at most; terminal failures never. In the step, not by
    a Dagster RetryPolicy: that one would also re-run a step killed by SIGKILL or the OOM killer."""
    out: dict[str, Outcome] = {}
    todo = list(keys)
    for attempt in range(1, IN_STEP_ATTEMPTS + 1):
        got = run(todo)
        out.update(got)
        again = [k for k in todo if _transient(got[k])]
        if not again:
            break
        if attempt == IN_STEP_ATTEMPTS:
            for k in again:
                out[k] = _failure(f"{_why(got[k])} (tried {attempt} times in this step)",
                                  getattr(got[k], "metadata", None), transient=True)
            break
        delay = RETRY_DELAY_SECONDS * 2 ** (attempt - 1)
        context.log.warning(f"{what}: {len(again)} hour(s) failed on a service briefly away: "
                            f"{_why(got[again[0]])[:300]} - attempt {attempt + 1} of {IN_STEP_ATTEMPTS} in {delay:.0f} s")
        time.sleep(delay)
        todo = again
    return out


def _prepared(context: AssetExecutionContext, name: str, prepare: Prepare, keys: list[str]) -> None:
    try:
        said = prepare(keys)
    except Exception as exc:  # noqa: BLE001 - a shortcut: each hour still does all its own work
        context.log.warning(f"{name}: preparing {len(keys)} hours together failed ({_why(exc)}); "
                            "each hour runs on its own")
    else:
        if said:
            context.log.info(f"{name}: hours {keys[0]}..{keys[-1]}: {said}")


def _outcomes(context: AssetExecutionContext, name: str, todo: list[str], position: dict[str, int],
              work: _Work) -> Iterator[tuple[str, Outcome]]:
    """Each hour still to do with its outcome; `position`: each hour of the range's place in it."""
    n = len(position)
    if work.all_hours is not None:
        context.log.info(f"{name}: {len(todo)} of {n} hours in one pass")
        got = _attempts(context, name, _guarded(None, work.all_hours), todo)
        yield from ((k, got[k]) for k in todo)
        return
    for i, k in enumerate(todo):  # hour by hour, each reported as soon as it is done
        chunk = todo[i:i + PREPARE_HOURS]
        if work.prepare is not None and i % PREPARE_HOURS == 0 and len(chunk) > 1:
            _prepared(context, name, work.prepare, chunk)
        context.log.info(f"{name}: hour {position[k]}/{n} ({k})")
        yield k, _attempts(context, f"{name} hour {k}", _guarded(work.one_hour, None), [k])[k]


def _range(context: AssetExecutionContext, key: AssetKey, keys: list[str], work: _Work) -> Iterator:
    name, n = key.to_user_string(), len(keys)
    reuse = {} if redo_asked(context.run.tags) else done_hours(context.instance, key, _upstream(context, key), keys)
    results: dict[str, tuple[dict, list[AssetCheckResult]]] = {}
    failures: dict[str, BaseException] = {}
    reported: set[str] = set()
    tags = {_BACKFILL_TAG: context.run.tags[_BACKFILL_TAG]} if _BACKFILL_TAG in context.run.tags else None
    position = {k: i for i, k in enumerate(keys, 1)}
    for k, rec in reuse.items():
        context.log.info(
            f"{name}: hour {position[k]}/{n} ({k}) was done by run {_done_by(rec)[:8]} at "
            f"{datetime.fromtimestamp(_done_at(rec), timezone.utc).isoformat(timespec='seconds')} and is newer "
            f"than its upstream: not redone (run tag {REDO_DONE_HOURS_TAG}=true redoes it)"
        )
    todo = [k for k in keys if k not in reuse]
    for k, outcome in _outcomes(context, name, todo, position, work):
        if isinstance(outcome, BaseException):
            failures[k] = outcome
            context.log.error(f"{name}: hour {position[k]}/{n} ({k}) failed: {_why(outcome)}"
                              + ("" if isinstance(outcome, (Failure, KafkaLandingError))
                                 else "\n" + "".join(traceback.format_exception(outcome))))
            continue
        metadata, checks = outcome
        results[k] = ({**metadata, **_done_now(context, checks)}, checks)
        if failures:
            # The step will fail, so Dagster records no output materialisation: report the done
            # hours ourselves, as soon as they are done (a run killed later still keeps them).
            for done in sorted(results.keys() - reported):
                yield AssetMaterialization(asset_key=key, partition=done, metadata=results[done][0], tags=tags)
            reported |= results.keys()

    # Each hour's checks on that hour (reused hours with the results they got when they were done).
    by_hour = {k: _stored_checks(rec) for k, rec in reuse.items()}
    by_hour.update({k: c for k, (_, c) in results.items()})
    if failures:
        for k in sorted(results.keys() - reported):
            yield AssetMaterialization(asset_key=key, partition=k, metadata=results[k][0], tags=tags)
        yield from hour_check_events(context.instance, key, by_hour)
        raise retry_or_give_up(context, _failure(
            f"{len(failures)} of {n} hours of {name} failed"
            f" ({len(results)} done now, {len(reuse)} done before; they keep their materialisations):\n"
            + "\n".join(f"hour {k}: {_why(exc)}" for k, exc in failures.items())
            + "\nFix the cause and launch the same range again: hours already done are not redone.",
            {"failed_hours": sorted(failures), "done_hours": sorted(results), "reused_hours": sorted(reuse)},
            # A retry redoes only the failed hours: worth it only if every one of them may pass later.
            transient=all_transient(failures.values()),
        )) from next(iter(failures.values()))
    # Success: Dagster records one materialisation per partition of the range, each with its own metadata.
    for k, (metadata, _) in results.items():
        context.add_asset_metadata(metadata, partition_key=k)
    for k, rec in reuse.items():
        context.add_asset_metadata(_reused_metadata(rec), partition_key=k)
    yield MaterializeResult()
    # After the materialisations, so each hour's results target the hour's new materialisation.
    yield from hour_check_events(context.instance, key, by_hour)
    for ck in sorted(context.selected_asset_check_keys, key=lambda c: c.name):
        if ck.asset_key == key:  # the step owes Dagster an output per selected check
            yield Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(ck))


def hour_check_events(instance: DagsterInstance, key: AssetKey, by_hour: dict[str, list[AssetCheckResult]]
                      ) -> Iterator[AssetCheckEvaluation]:
    """Each hour's check results as evaluations of that hour's partition, each targeting the
    hour's latest materialisation, so the UI shows them on the hour, current. Dagster turns an
    AssetCheckResult into one evaluation per check and step (of no partition in a range run);
    a single-run backfill needs one per hour."""
    for k in sorted(by_hour):
        rec = _latest(instance, key, k)
        target = (AssetCheckEvaluationTargetMaterializationData(storage_id=rec.storage_id, run_id=rec.run_id,
                                                                 timestamp=rec.timestamp) if rec else None)
        for c in by_hour[k]:
            yield AssetCheckEvaluation(asset_key=key, check_name=c.check_name, passed=c.passed, metadata=c.metadata,
                                       severity=c.severity, description=c.description,
                                       target_materialization_data=target, partition=k, blocking=False)


# --- which hours are done ------------------------------------------------------

def redo_asked(tags: dict) -> bool:
    return str(tags.get(REDO_DONE_HOURS_TAG, "")).strip().lower() in ("true", "1", "yes")


def done_hours(instance: DagsterInstance, key: AssetKey, upstream: set[AssetKey], keys: list[str]
               ) -> dict[str, EventLogRecord]:
    """Hours whose latest materialisation on the instance was done after the latest
    materialisation of the same hour of every upstream asset: nothing newer to
    take in, so redoing them would give the same result. Returns their records."""
    done = {}
    for k in keys:
        own = _latest(instance, key, k)
        if own is None:
            continue
        ups = [_latest(instance, u, k) for u in upstream]
        if all(up is None or _done_at(up) <= _done_at(own) for up in ups):
            done[k] = own
    return done


def _upstream(context: AssetExecutionContext, key: AssetKey) -> set[AssetKey]:
    return set(context.assets_def.asset_deps.get(key, ()))


def _latest(instance: DagsterInstance, key: AssetKey, partition: str) -> EventLogRecord | None:
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[partition]),
                                              limit=1).records
    return records[0] if records else None


def _done_at(rec: EventLogRecord) -> float:
    """When the hour's work was done: a reused hour keeps the time of the run that did it."""
    value = rec.asset_materialization.metadata.get(DONE_AT)
    return float(value.value) if value is not None else rec.timestamp


def _done_by(rec: EventLogRecord) -> str:
    value = rec.asset_materialization.metadata.get(DONE_BY_RUN)
    return str(value.value) if value is not None else rec.run_id


def _done_now(context: AssetExecutionContext, checks: list[AssetCheckResult]) -> dict:
    return {DONE_AT: MetadataValue.timestamp(time.time()), DONE_BY_RUN: context.run_id, REUSED: False,
            CHECKS: MetadataValue.json({c.check_name: {"passed": c.passed, "severity": c.severity.value,
                                                       "metadata": {m: _plain(v) for m, v in c.metadata.items()}}
                                        for c in checks})}


def _stored_checks(rec: EventLogRecord) -> list[AssetCheckResult]:
    """The check results a reused hour got when it was done, as stored with its materialisation."""
    stored = rec.asset_materialization.metadata.get(CHECKS)
    return [AssetCheckResult(check_name=name, passed=c["passed"], severity=AssetCheckSeverity(c["severity"]),
                             metadata=c["metadata"])
            for name, c in (stored.value if stored is not None else {}).items()]


def _reused_metadata(rec: EventLogRecord) -> dict:
    """The hour's own figures from the run that did it, marked as reused by this one."""
    return {**rec.asset_materialization.metadata, DONE_AT: MetadataValue.timestamp(_done_at(rec)),
            DONE_BY_RUN: _done_by(rec), REUSED: True}


# --- errors and checks ------------------------------------------------------------

def failure(exc: BaseException | str, metadata: dict | None = None) -> Failure:
    """The one way an error becomes a Dagster Failure: `allow_retries` is `errors.is_transient`,
    so a service briefly away is tried again and nothing else is. A description alone is terminal."""
    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, str):
        return _failure(exc, metadata, transient=False)
    return _failure(str(exc) or type(exc).__name__, metadata, transient=is_transient(exc))


def _failure(description: str, metadata: dict | None, transient: bool) -> Failure:
    # The package's only Failure(...): kafka_landing_tests/unit/test_errors.py keeps it so.
    return Failure(description=description, metadata=metadata, allow_retries=transient)


def _transient(outcome: Outcome) -> bool:
    if isinstance(outcome, Failure):
        return outcome.allow_retries
    return isinstance(outcome, BaseException) and is_transient(outcome)


def _why(exc: BaseException) -> str:
    if isinstance(exc, Failure) and exc.description:
        return exc.description
    return f"{type(exc).__name__}: {exc}"


def all_transient(failures) -> bool:
    """Every failure is transient (a service briefly away); any terminal one (a bug, what the
    data or config says) makes retrying pointless."""
    failures = list(failures)
    return bool(failures) and all(_transient(e) for e in failures)


def retry_or_give_up(context: AssetExecutionContext, exc: Failure) -> Failure:
    """A transient Failure says which attempt failed; on the last attempt it is raised as
    terminal, so the step fails with its own message rather than Dagster's bare
    'Exceeded max_retries'."""
    policy = getattr(context.op_def, "retry_policy", None)
    if not exc.allow_retries or policy is None:
        return exc
    attempt, attempts = context.retry_number + 1, policy.max_retries + 1
    last = attempt >= attempts
    return _failure(f"{exc.description}\n(attempt {attempt} of {attempts}"
                    + ("; no retry left)" if last else "; retried after a backoff)"), exc.metadata, transient=not last)


def _in_hour(exc: Failure, k: str) -> Failure:
    """The same Failure, its description prefixed with the hour it belongs to."""
    return _failure(f"hour {k}: {exc.description or 'failed'}", exc.metadata, transient=exc.allow_retries)


def _plain(value) -> object:
    raw = getattr(value, "value", value)
    try:
        json.dumps(raw)
        return raw
    except (TypeError, ValueError):
        return str(raw)
