"""The hand-off's three sensors, wired to the one queue (`warehouse/queue/tick`).

- `done_file_sensor`: landing hours of the configured tables; first reconciles done files
  nobody marked (`queue/reconcile`), then one queue tick; a table's consecutive ready hours
  load in one run (a single-run partition range), and the tables whose ready hours are the
  same (the tables of topics landed together) share that run.
- `retired_hours_sensor`: retired hours of tables in no topic's config, and the event partitions
  they fed, emptied by `retire_hours`.
- `event_partition_sensor`: event partitions, each versioned and loaded by its own run; it adds
  the partitions Dagster does not know yet.

Each only turns the tick's plan into run requests and log lines: what to examine, when to
give up, how to group, and the time budget are the queue's. Every run carries
`kafka_landing/spark=true` only if the backend uses Spark; a landing-hour run also carries
`kafka_landing/redo_done_hours=true`, so it loads every hour of its range even when the
instance holds no newer upstream materialisation (done files written by another tool).
"""

import json
import time
from collections.abc import Iterable, Sequence
from itertools import islice

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    PartitionsDefinition,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from kafka_landing.handoff.manifests import landed_tables
from kafka_landing.handoff.units import HOUR, LoadUnit
from kafka_landing.hours import REDO_DONE_HOURS_TAG, SPARK_TAG
from kafka_landing.naming import pending_dir
from kafka_landing.resources import LandingResource
from kafka_landing.warehouse.jobs import RETIRE_JOB, retire_hours
from kafka_landing.warehouse.queue import tick as queue
from kafka_landing.warehouse.queue.reconcile import ScanPosition, reconcile
from kafka_landing.warehouse.queue.runs import (
    MAX_ATTEMPTS,
    RUN_KEY_TAG,
    LoadGroup,
    SeenRun,
    run_key_of,
    tables_together,
    tags_of,
)
from kafka_landing.warehouse.queue.tick import Cursor, TickPlan
from kafka_landing.warehouse.resources import WarehouseResource

SENSOR_NAME = "done_file_sensor"
EVENT_SENSOR_NAME = "event_partition_sensor"
RETIRED_SENSOR_NAME = "retired_hours_sensor"
RECONCILE_PER_TICK = 10_000
RECONCILE_SECONDS = 15  # seconds from the start of a tick the reconciliation may take
_clock = time.time  # the clock the budgets are read on (a test's store answers on a fake one)
_QUERY_CHUNK = 300
# Dagster's tags for a single-run partition range (RunRequest has no partition range argument in 1.13).
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _cursor_fields(raw: str | None) -> dict:
    """A sensor cursor's fields; {} for none, or for one this release cannot read (starts over)."""
    try:
        d = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _cursor(raw: str | None) -> tuple[ScanPosition, Cursor]:
    d = _cursor_fields(raw)
    return ScanPosition.from_json(d["reconcile"]) if "reconcile" in d else ScanPosition(), \
        Cursor.from_json(d.get("queue"))


def _runs_of(instance):
    """The runs that covered any of `loads`, in a few indexed queries: by member tag (one query per
    tag key among them), and by run key for runs of earlier versions."""
    def runs_of(loads) -> list[SeenRun]:
        by_tag: dict[str, list[str]] = {}
        for ld in loads:
            for k, v in ld.found_by:
                by_tag.setdefault(k, []).append(v)
        queries = [(RUN_KEY_TAG, [k for ld in loads for k in ld.attempt_keys()]), *sorted(by_tag.items())]
        runs: dict[str, SeenRun] = {}
        for tag, values in queries:
            it = iter(values)
            while chunk := list(islice(it, _QUERY_CHUNK)):
                for run in instance.get_runs(filters=RunsFilter(tags={tag: chunk})):
                    runs[run.run_id] = SeenRun(run.run_id, run.status.value, dict(run.tags))
        return list(runs.values())
    return runs_of


def _spark(warehouse: WarehouseResource) -> dict[str, str]:
    return {SPARK_TAG: "true"} if warehouse.needs_spark else {}


def _warn_given_up(log, plan: TickPlan, what: str, remedy: str) -> None:
    """One warning per table with loads moved aside, on every tick until they load or re-land."""
    for name, units in sorted(plan.given_up.items()):
        u, why = plan.given_up_why[name]
        example = u.done_file if u.kind == HOUR else str(u)
        log.warning(f"{name}: {len(units)} {what} not loaded and not requested again ({units[0].partition} to "
                    f"{units[-1].partition}), e.g. {example}: {why[:1000]}. {remedy}")


def load_run_request(run: Sequence[LoadGroup], keys: list[AssetKey], spark: bool) -> RunRequest:
    """One run loading every hour of the groups of `run` (one group, or several tables' groups of the
    same hours: `tables_together`), one table's asset per group: their partition, or a single-run
    partition range. Each table is a step of its own: one that fails fails alone."""
    first, last = (ld.unit.partition_key for ld in (run[0].loads[0], run[0].loads[-1]))
    tags = {**tags_of(run), REDO_DONE_HOURS_TAG: "true", **({SPARK_TAG: "true"} if spark else {})}
    if first == last:
        return RunRequest(run_key=run_key_of(run), partition_key=first, asset_selection=keys, tags=tags)
    return RunRequest(run_key=run_key_of(run), asset_selection=keys,
                      tags={**tags, RANGE_START_TAG: first, RANGE_END_TAG: last})


def build_done_file_sensor(tables: dict[tuple[str, str], AssetKey],
                           hours: dict[tuple[str, str], PartitionsDefinition]):
    """`tables`: every destination table's asset; `hours`: its partitions (its topic's hours, an
    hourly definition: its keys sort as its hours do)."""
    bounds: dict[tuple[str, str], tuple[str | None, str | None]] = {}

    def is_partition(u: LoadUnit) -> bool:
        key = (u.dataset, u.table)
        first, last = bounds.get(key) or bounds.setdefault(
            key, (hours[key].get_first_partition_key(), hours[key].get_last_partition_key()))
        return first is not None and last is not None and first <= u.partition_key <= last

    @sensor(
        name=SENSOR_NAME,
        asset_selection=list(tables.values()),
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads warehouse hours when their done files appear or change (a table's consecutive hours "
                    "in one run, tables of the same hours together), and retries failed loads.",
    )
    def done_file_sensor(context: SensorEvaluationContext, landing: LandingResource, warehouse: WarehouseResource):
        started, store, log = _clock(), landing.store(), context.log
        backend = warehouse.backend(store)
        bounds.clear()  # partitions end at the last closed hour: read again each tick
        if unknown := sorted(f"{d}.{t}" for d, t in landed_tables(store) if (d, t) not in tables):
            log.warning(f"done files for tables not in the topic config, not loaded by any asset: {unknown} (hours a "
                        f"routing change retired are emptied by {RETIRED_SENSOR_NAME})")
        position, cursor = _cursor(context.cursor)
        position, marked, scanned = reconcile(store, list(tables), backend.loaded_sha, position,
                                              RECONCILE_PER_TICK, deadline=started + RECONCILE_SECONDS, clock=_clock)
        if marked:
            log.info(f"reconciliation found {len(marked)} done file(s) not loaded and not marked pending, e.g. "
                     f"{marked[0].done_file}: marked")
        plan = queue.tick(store, queue.LandingHours(tables, is_partition, backend.loaded_sha),
                          _runs_of(context.instance), cursor, started=started, clock=_clock)
        new_cursor = json.dumps({"v": 4, "reconcile": position.to_json(), "queue": plan.cursor.to_json()})
        _warn_given_up(log, plan, "hour(s)",
                       "Fix the cause, then materialise those hours or re-land them: either clears them "
                       f"(why for each: {pending_dir(True)}/).")
        for name, units in sorted(plan.not_taken.items()):
            u = units[0][0]
            log.warning(f"{name}: {len(units)} hour(s) pending but not loaded, e.g. {u.done_file}: hour "
                        f"{u.partition_key} is not a partition of {tables[(u.dataset, u.table)].to_user_string()} "
                        "(before its topic's first hour, or not ended yet)")
        for name, units in sorted(plan.gone.items()):
            log.warning(f"{name}: {len(units)} pending load(s) whose done file is gone, e.g. {units[0].done_file}: "
                        "nothing to load; marker(s) removed")
        for u, why in plan.refused:
            log.info(f"{u}: {why}")
        _info_progress(log, plan)
        runs = tables_together(plan.groups, lambda g: id(hours[(g.dataset, g.table)]))
        requests = [load_run_request(run, [tables[(g.dataset, g.table)] for g in run], warehouse.needs_spark)
                    for run in runs]
        if requests:
            return SensorResult(run_requests=requests, cursor=new_cursor)
        return SensorResult(cursor=new_cursor, skip_reason=SkipReason(
            f"nothing to request: {plan.waiting} load(s) in flight; {len(plan.moved)} moved aside this tick, "
            f"{sum(len(v) for v in plan.given_up.values())} given up in all ({pending_dir(True)}/); "
            f"{sum(len(v) for v in plan.not_taken.values())} not a partition; {scanned} done files reconciled"))

    return done_file_sensor


def _info_progress(log, plan: TickPlan) -> None:
    if plan.stopped_early:
        log.info(f"{plan.examined} of {plan.candidates} pending loads examined this tick; the rest on later ticks")
    if plan.left_to_move:
        log.info(f"{plan.left_to_move} load(s) not asked for again are moved aside on later ticks")
    if plan.more_ready:
        log.info(f"{plan.more_ready} more load runs ready; requested on later ticks (oldest first)")


def build_retired_hours_sensor(tables: Iterable[tuple[str, str]], events: Iterable[tuple[str, str]] = ()):
    """Requests `retire_hours` for what a routing change left in tables no topic's config feeds:
    their retired done files (the warehouse drops those hours' rows) and the event partitions those
    hours fed (versioned again without them). `tables`: the configured tables; `events`: those with
    an event-time table (their partitions are the event sensor's). A done file of such a table that
    is not retired is left to its warning in the done-file sensor."""
    configured, with_events = set(tables), set(events)

    @sensor(
        name=RETIRED_SENSOR_NAME,
        job=retire_hours,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Empties the warehouse hours, and the event partitions they fed, of tables a routing change "
                    "retired (their re-landed hours now feed another table), so no record counts in two tables.",
    )
    def retired_hours_sensor(context: SensorEvaluationContext, landing: LandingResource,
                             warehouse: WarehouseResource):
        started, store = _clock(), landing.store()
        kinds = {"hours": queue.RetiredHours(configured, warehouse.backend(store).loaded_sha),
                 "events": queue.EventPartitions(with_events, retired=True)}
        cursors = _cursors(context.cursor)
        plans = {name: queue.tick(store, kind, _runs_of(context.instance), cursors.get(name, Cursor()),
                                  started=started, clock=_clock) for name, kind in kinds.items()}
        for u, reason, why in [*plans["hours"].moved, *plans["events"].moved]:
            context.log.warning(f"{u}: not emptied and not requested again: {why}. Fix the cause, then launch "
                                f"{RETIRE_JOB} with {_retire_config(u)}, or drop it by hand.")
        for u, why in plans["events"].refused:
            context.log.warning(f"{u}: not emptied and not requested again until a landing hour changes it: {why}")
        requests = [RunRequest(run_key=g.run_key, tags={**g.tags(), **_spark(warehouse)}, run_config={"ops": {
                        "retire_hours_op": {"config": _retire_config(*(ld.unit for ld in g.loads))}}})
                    for plan in plans.values() for g in plan.groups]
        cursor = json.dumps({"v": 4, **{name: plan.cursor.to_json() for name, plan in plans.items()}})
        if requests:
            return SensorResult(run_requests=requests, cursor=cursor)
        return SensorResult(cursor=cursor, skip_reason=SkipReason(
            f"nothing retired to empty: {plans['hours'].examined} hour(s) and {plans['events'].examined} event "
            f"partition(s) of tables in no topic config examined, {plans['hours'].waiting + plans['events'].waiting} "
            f"in flight, {len(plans['hours'].moved) + len(plans['events'].moved)} moved aside"))

    return retired_hours_sensor


def _retire_config(*units: LoadUnit) -> dict[str, list[str]]:
    """The `retire_hours` run config of some units: done files, and event partitions by name."""
    return {"done_files": [u.done_file for u in units if u.kind == HOUR],
            "event_partitions": [f"{u.name}/{u.partition}" for u in units if u.kind != HOUR]}


def _cursors(raw: str | None) -> dict[str, Cursor]:
    return {k: Cursor.from_json(v) for k, v in _cursor_fields(raw).items() if k != "v"}


def build_event_sensor(events: dict[tuple[str, str], AssetKey], partitions: dict[tuple[str, str], object]):
    """`events`: (dataset, landing-hour table) -> its event-time table's asset; `partitions`: its
    dynamic partitions definition. Requests a load of every event partition a landing hour marked,
    adding the partitions Dagster does not know yet (from the listing: no marker read). One run per
    partition and marker set; a partition with a run in flight waits for it."""

    @sensor(
        name=EVENT_SENSOR_NAME,
        asset_selection=list(events.values()),
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Versions and loads the event partitions (days or hours of event time) that landed hours "
                    "changed, late records included.",
    )
    def event_partition_sensor(context: SensorEvaluationContext, landing: LandingResource,
                               warehouse: WarehouseResource):
        store = landing.store()
        _, cursor = _cursor(context.cursor)
        plan = queue.tick(store, queue.EventPartitions(events), _runs_of(context.instance), cursor, clock=_clock)
        adds = []
        for key in sorted(events):
            names = sorted({u.partition for u in plan.listed if (u.dataset, u.table) == key})
            known = set(context.instance.get_dynamic_partitions(partitions[key].name)) if names else set()
            if new := [p for p in names if p not in known]:
                adds.append(partitions[key].build_add_request(new))
        for u, why in plan.refused:
            context.log.warning(f"event partition not loaded and not requested again until a landing hour changes "
                                f"it: {why}. Fix the cause, then materialise it (or re-land the hour).")
        _warn_given_up(context.log, plan, "event partition(s)",
                       f"They failed {MAX_ATTEMPTS} times and are not requested again until a landing hour changes "
                       "them: look at those runs, fix the cause and materialise them.")
        _info_progress(context.log, plan)
        requests = [RunRequest(run_key=g.run_key, partition_key=g.loads[0].unit.partition,
                               asset_selection=[events[(g.dataset, g.table)]],
                               tags={**g.tags(), **_spark(warehouse)}) for g in plan.groups]
        new_cursor = json.dumps({"v": 4, "queue": plan.cursor.to_json()})
        if requests or adds:
            return SensorResult(run_requests=requests, dynamic_partitions_requests=adds, cursor=new_cursor)
        return SensorResult(cursor=new_cursor, skip_reason=SkipReason(
            f"no event partition to load: {plan.waiting} in flight, {len(plan.refused)} refused, "
            f"{sum(len(v) for v in plan.given_up.values())} given up after {MAX_ATTEMPTS} attempts"))

    return event_partition_sensor
