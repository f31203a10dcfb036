"""The hand-off's three sensors, wired to the one queue (`warehouse/queue/tick`).

- `done_file_sensor`: landing hours of the configured tables; first reconciles done files
  nobody marked (`queue/reconcile`), then one queue tick; a table's consecutive ready hours
  load in one run (a single-run partition range), and the tables whose ready hours are the
  same (the tables of topics landed together) share that run.
- `retired_hours_sensor`: retired hours of tables in no topic's config, and the event partitions
  they fed, emptied by `retire_hours`.
- `event_partition_sensor`: event partitions, versioned and loaded; the tables' partitions of the
  same day (or hour) share a run, as the tables of the same hours do. It adds the partitions
  Dagster does not know yet.
- `settled_sensor`: the event partitions that became final since its last tick
  (`queue/settled`), each a check-only run of its `settled` check, which turns green then
  (nothing else runs it at that time). Those runs need no Spark and carry no tag of it.

The done-file and event sensors hold their ready runs back while the last run they requested
still waits in the run queue (`queue.runs.holds`, at most 30 s): asked for once it starts, they
go together, so a backlog costs a few big runs, not one per tick.

Each only turns the tick's plan into run requests and log lines: what to examine, when to
give up, how to group, the time budget, what the lines say (`queue/messages`) and the cursor
Dagster keeps (`queue/cursors`) are the queue's. Every run carries
`kafka_landing/spark=true` only if the backend uses Spark; a landing-hour run also carries
`kafka_landing/redo_done_hours=true`, so it loads every hour of its range even when the
instance holds no newer upstream materialisation (done files written by another tool).
"""

import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

from dagster import (
    AssetCheckKey,
    AssetKey,
    AssetSelection,
    DagsterRunStatus,
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
from kafka_landing.handoff.units import LoadUnit
from kafka_landing.hours import REDO_DONE_HOURS_TAG, SPARK_TAG
from kafka_landing.resources import LandingResource
from kafka_landing.warehouse.checks import SETTLED
from kafka_landing.warehouse.jobs import RETIRE_JOB, retire_hours
from kafka_landing.warehouse.queue import cursors, messages
from kafka_landing.warehouse.queue import tick as queue
from kafka_landing.warehouse.queue.messages import Messages
from kafka_landing.warehouse.queue.reconcile import RECONCILE_PER_TICK, RECONCILE_SECONDS, reconcile
from kafka_landing.warehouse.queue.runs import (
    LoadGroup,
    holds,
    SeenRun,
    retire_config,
    run_key_of,
    run_queries,
    tables_together,
    tags_of,
)
from kafka_landing.warehouse.queue.settled import find_settled
from kafka_landing.warehouse.queue.tick import TickPlan
from kafka_landing.warehouse.resources import WarehouseResource

SENSOR_NAME = "done_file_sensor"
EVENT_SENSOR_NAME = "event_partition_sensor"
RETIRED_SENSOR_NAME = "retired_hours_sensor"
SETTLED_SENSOR_NAME = "settled_sensor"
_clock = time.time  # the clock the budgets are read on (a test's store answers on a fake one)
# Dagster's tags for a single-run partition range (RunRequest has no partition range argument in 1.13).
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
# The loads' sensors tick at every wake of the daemon's sensor loop, every 5 s (Dagster's default
# interval of 30 s was, on average, 15 s of every hour's freshness). Not 5 itself: Dagster counts
# the interval from the end of the last tick, and a wake 5 s after its start comes a few
# milliseconds short of it, so every other wake was skipped: a tick every 10 s. A tick that finds
# nothing new lists the marker folders and reads nothing.
LOAD_SENSOR_INTERVAL_SECONDS = 1
# A check-only request's partition, as Dagster's tag: Dagster 1.13 cannot resolve the partition of a
# request that selects no asset on a code location of several partitions definitions ("no
# PartitionsDefinition shared by all the provided assets"), and takes one that carries it as resolved,
# as the UI's "execute check" does (the sensor asks only for partitions the instance knows).
PARTITION_TAG = "dagster/partition"
SENSOR_NAME_TAG = "dagster/sensor_name"  # on every run a sensor requested


def _runs_of(instance):
    """The runs that covered any of `loads`, asked of the instance in a few indexed queries (`run_queries`)."""
    def runs_of(loads) -> list[SeenRun]:
        runs = {run.run_id: SeenRun(run.run_id, run.status.value, dict(run.tags)) for tag, values in run_queries(loads)
                for run in instance.get_runs(filters=RunsFilter(tags={tag: values}))}
        return list(runs.values())
    return runs_of


def _queued_at(instance, sensor_name: str) -> float | None:
    """When the last run the sensor requested that still waits in the queue was created; None: none waits."""
    records = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.QUEUED],
                                                  tags={SENSOR_NAME_TAG: sensor_name}), limit=1)
    return records[0].create_timestamp.timestamp() if records else None


def _held(context: SensorEvaluationContext, sensor_name: str, said: Messages, requests: list[RunRequest]
          ) -> tuple[Messages, list[RunRequest]]:
    """What the tick says and requests, or, if its ready runs are held back (`queue.runs.holds`),
    no request and why."""
    if not requests or not holds(queued_at := _queued_at(context.instance, sensor_name), now := _clock()):
        return said, requests
    return Messages(said.warnings, said.infos, messages.held(len(requests), now - queued_at)), []


def _spark(warehouse: WarehouseResource) -> dict[str, str]:
    return {SPARK_TAG: "true"} if warehouse.needs_spark else {}


def _result(said: Messages, log, cursor: str, requests: list[RunRequest], adds: list | None = None) -> SensorResult:
    """Log what the tick says; then its requests (and partitions to add), or why there are none."""
    for text in said.warnings:
        log.warning(text)
    for text in said.infos:
        log.info(text)
    if requests or adds:
        return SensorResult(run_requests=requests, dynamic_partitions_requests=adds, cursor=cursor)
    return SensorResult(cursor=cursor, skip_reason=SkipReason(said.skip))


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


def event_run_request(run: Sequence[LoadGroup], keys: list[AssetKey], spark: bool) -> RunRequest:
    """One run versioning and loading one event partition (a day, or an hour) of each group's table.
    Each event table has partitions of its own (`event_partitions`), so a run of several names its
    partition by Dagster's tag, which every step reads, not by a partitions definition they share.
    Each table is a step of its own: one that fails fails alone."""
    partition = run[0].loads[0].unit.partition
    tags = {**tags_of(run), **({SPARK_TAG: "true"} if spark else {})}
    if len(run) == 1:
        return RunRequest(run_key=run_key_of(run), partition_key=partition, asset_selection=keys, tags=tags)
    return RunRequest(run_key=run_key_of(run), asset_selection=keys, tags={**tags, PARTITION_TAG: partition})


def build_done_file_sensor(tables: dict[tuple[str, str], AssetKey],
                           hours: dict[tuple[str, str], PartitionsDefinition]):
    """`tables`: every destination table's asset; `hours`: its partitions (its topic's hours, an
    hourly definition: its keys sort as its hours do)."""
    bounds: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    assets = {key: asset.to_user_string() for key, asset in tables.items()}

    def is_partition(u: LoadUnit) -> bool:
        key = (u.dataset, u.table)
        first, last = bounds.get(key) or bounds.setdefault(
            key, (hours[key].get_first_partition_key(), hours[key].get_last_partition_key()))
        return first is not None and last is not None and first <= u.partition_key <= last

    @sensor(
        name=SENSOR_NAME,
        asset_selection=list(tables.values()),
        minimum_interval_seconds=LOAD_SENSOR_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads warehouse hours when their done files appear or change (a table's consecutive hours "
                    "in one run, tables of the same hours together), and retries failed loads.",
    )
    def done_file_sensor(context: SensorEvaluationContext, landing: LandingResource, warehouse: WarehouseResource):
        started, store, log = _clock(), landing.store(), context.log
        backend = warehouse.backend(store)
        bounds.clear()  # partitions end at the last closed hour: read again each tick
        if unknown := messages.not_configured(landed_tables(store), tables, RETIRED_SENSOR_NAME):
            log.warning(unknown)
        position, marked, scanned = reconcile(store, list(tables), backend.loaded_sha,
                                              cursors.scan_position(context.cursor), RECONCILE_PER_TICK,
                                              deadline=started + RECONCILE_SECONDS, clock=_clock)
        if found := messages.reconciled(marked):
            log.info(found)
        plan = queue.tick(store, queue.LandingHours(tables, is_partition, backend.loaded_sha),
                          _runs_of(context.instance), cursors.queue_cursor(context.cursor), started=started,
                          clock=_clock)
        runs = tables_together(plan.groups, lambda g: id(hours[(g.dataset, g.table)]))
        requests = [load_run_request(run, [tables[(g.dataset, g.table)] for g in run], warehouse.needs_spark)
                    for run in runs]
        said, requests = _held(context, SENSOR_NAME, messages.landing(plan, scanned, assets), requests)
        return _result(said, log, cursors.cursor_json(position, queue=plan.cursor), requests)

    return done_file_sensor


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
        plans = {name: queue.tick(store, kind, _runs_of(context.instance), cursors.queue_cursor(context.cursor, name),
                                  started=started, clock=_clock) for name, kind in kinds.items()}
        requests = [RunRequest(run_key=g.run_key, tags={**g.tags(), **_spark(warehouse)}, run_config={"ops": {
                        "retire_hours_op": {"config": retire_config(*(ld.unit for ld in g.loads))}}})
                    for plan in plans.values() for g in plan.groups]
        return _result(messages.retired(plans["hours"], plans["events"], RETIRE_JOB), context.log,
                       cursors.cursor_json(**{name: plan.cursor for name, plan in plans.items()}), requests)

    return retired_hours_sensor


def build_event_sensor(events: dict[tuple[str, str], AssetKey], partitions: dict[tuple[str, str], object]):
    """`events`: (dataset, landing-hour table) -> its event-time table's asset; `partitions`: its
    dynamic partitions definition. Requests a load of every event partition a landing hour marked,
    adding the partitions Dagster does not know yet (from the listing: no marker read). One run per
    partition and marker set; a partition with a run in flight waits for it."""

    @sensor(
        name=EVENT_SENSOR_NAME,
        asset_selection=list(events.values()),
        minimum_interval_seconds=LOAD_SENSOR_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.RUNNING,
        description="Versions and loads the event partitions (days or hours of event time) that landed hours "
                    "changed, late records included.",
    )
    def event_partition_sensor(context: SensorEvaluationContext, landing: LandingResource,
                               warehouse: WarehouseResource):
        store = landing.store()
        plan = queue.tick(store, queue.EventPartitions(events), _runs_of(context.instance),
                          cursors.queue_cursor(context.cursor), clock=_clock)
        requests = [event_run_request(run, [events[(g.dataset, g.table)] for g in run], warehouse.needs_spark)
                    for run in tables_together(plan.groups, lambda g: None)]
        said, requests = _held(context, EVENT_SENSOR_NAME, messages.events(plan), requests)
        return _result(said, context.log, cursors.cursor_json(queue=plan.cursor), requests,
                       _partitions_to_add(context.instance, plan, partitions))

    return event_partition_sensor


def _partitions_to_add(instance, plan: TickPlan, partitions: dict[tuple[str, str], object]) -> list:
    """The event partitions the tick listed that the instance does not know yet, per table."""
    adds = []
    for key in sorted(partitions):
        names = sorted({u.partition for u in plan.listed if (u.dataset, u.table) == key})
        known = set(instance.get_dynamic_partitions(partitions[key].name)) if names else set()
        if new := [p for p in names if p not in known]:
            adds.append(partitions[key].build_add_request(new))
    return adds


def build_settled_sensor(events: dict[tuple[str, str], AssetKey], settle_hours: dict[tuple[str, str], int],
                         partitions: dict[tuple[str, str], object]):
    """`events`: (dataset, landing-hour table) -> its event-time table's asset; `settle_hours`: its
    topic's; `partitions`: its dynamic partitions definition. Requests a check-only run of the
    `settled` check of every event partition that became final since the last tick (`queue/settled`),
    one per partition and version."""
    checks = {k: AssetCheckKey(key, SETTLED) for k, key in events.items()}

    @sensor(
        name=SETTLED_SENSOR_NAME,
        asset_selection=AssetSelection.checks(*checks.values()),
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Evaluates an event partition's `settled` check again when the partition becomes final "
                    "(settle_hours after its last change), so it turns green then.",
    )
    def settled_sensor(context: SensorEvaluationContext, landing: LandingResource):
        plan = find_settled(landing.store(), settle_hours, cursors.settled_position(context.cursor),
                            datetime.now(timezone.utc), clock=_clock)
        known = {k: set(context.instance.get_dynamic_partitions(partitions[k].name))
                 for k in sorted({(s.dataset, s.table) for s in plan.due})}
        asked = [s for s in plan.due if s.partition in known[(s.dataset, s.table)]]
        requests = [RunRequest(run_key=s.run_key, partition_key=s.partition, asset_selection=[],
                               asset_check_keys=[checks[(s.dataset, s.table)]], tags={PARTITION_TAG: s.partition})
                    for s in asked]
        unknown = [f"{events[(s.dataset, s.table)].to_user_string()} {s.partition}" for s in plan.due if s not in asked]
        return _result(messages.settled(plan, unknown), context.log, cursors.cursor_json(settled=plan.position),
                       requests)

    return settled_sensor
