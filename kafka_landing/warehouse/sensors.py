"""The done-file sensor: every done file gets loaded, once per content, whatever
its mtime, and a failed load is asked for again, at a cost per tick that does
not grow with history (see `load_queue` for the queue it reads). What is ready
is loaded in few runs: one per table and run of consecutive hours, not one per
hour, so a backfill of a day starts a handful of runs (and Spark JVMs), not
one per (table, hour).

A tick must end within Dagster's sensor timeout (60 s) on a bucket answering in
tens of milliseconds per call, whatever the history, so each step has a share of
the tick's time (`RECONCILE_SECONDS`, `EXAMINE_SECONDS`, `TICK_SECONDS`) and what
does not fit goes on at the next tick. Each tick:
1. Reconciles (`load_queue.reconcile`): lists each configured table's hours and
   reads the done files of hours it has not checked yet (the cursor says which;
   at most `RECONCILE_PER_TICK`): one whose content is not the content the
   warehouse loaded and that has no marker (written by another tool, whatever
   its mtime, or before markers existed) gets a marker. Hours already checked
   are not read again until their table's round is a day old.
2. Lists the pending markers; a marker of an hour that is not a partition of its
   table is left alone (told once per table). The others are examined, tables
   taking turns (each table's oldest hour first, at most `MAX_EXAMINED_PER_TICK`
   in all): each one's done file is read and
   - its marker is moved aside (`handoff.give_up_pending`) if its contents
     contradict its path (`done_checks`), or a load of that content failed
     terminally (`handoff.refuse_pending`): asking again cannot help;
   - the marker is cleared if the warehouse already loaded that content;
   - otherwise it is a load to make (`<done file>@<hash>`, a "member").
3. Asks the instance for the runs that covered those members (their member tags,
   one query per hour of the week; run keys of earlier versions) and plans
   (`load_queue.plan_loads`): a member with a run in flight waits; one whose
   `MAX_ATTEMPTS` runs all finished without loading it is moved aside too; the
   others are ready, and each table's consecutive ready hours at the same attempt
   become one run (a partition range of at most `MAX_HOURS_PER_RUN` hours; a
   last attempt alone).
4. Warns once per table about its loads moved aside (`pending_loads/_given_up/`,
   each saying why), with their count and one of them, on every tick until they
   load: a person materialises those hours once the cause is fixed, or re-lands
   them; either removes them. So the markers examined are only those that can
   still lead to a request, and loads given up on never hide another table's.
At most `MAX_REQUESTS_PER_TICK` runs are requested per tick. Each run carries
`kafka_landing/redo_done_hours=true`, so it loads every hour of its range even
when the instance holds no newer upstream materialisation (done files written by
another tool), and `kafka_landing/spark=true` only if the backend uses Spark
(the Parquet one; BigQuery runs need no Spark slot). A duplicate tick requests
the same run keys (Dagster launches each once); a restarted sensor (no cursor)
requests nothing the warehouse has loaded; a re-landed hour (new content, new
marker) requests a reload of that hour.
"""

import json
import time
from collections.abc import Iterable
from itertools import islice, zip_longest

from dagster import (
    AddDynamicPartitionsRequest,
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

from kafka_landing.event_partitions import event_refusal, marks_sha, pending_partitions
from kafka_landing.handoff import (
    TableHour,
    clear_pending,
    content_sha,
    give_up_pending,
    given_up_why,
    list_pending,
    listed_tables,
    read_marker,
    refusal,
)
from kafka_landing.hours import REDO_DONE_HOURS_TAG, SPARK_TAG
from kafka_landing.naming import event_pending_dir, event_table, hour_from_tag, hour_key, pending_dir
from kafka_landing.resources import LandingResource
from kafka_landing.warehouse.done_checks import done_file_problems
from kafka_landing.warehouse.jobs import RETIRE_JOB, retire_hours
from kafka_landing.warehouse.load_queue import (
    FINISHED,
    MAX_ATTEMPTS,
    RUN_KEY_TAG,
    LoadGroup,
    PendingLoad,
    ScanPosition,
    SeenRun,
    attempt_keys,
    covering_runs,
    decide,
    plan_loads,
    reconcile,
)
from kafka_landing.warehouse.resources import WarehouseResource

SENSOR_NAME = "done_file_sensor"
EVENT_SENSOR_NAME = "event_partition_sensor"
EVENT_TAG = "kafka_landing/event_partition"  # <dataset>.<event table>/<partition>, on every event load run
RETIRED_SENSOR_NAME = "retired_hours_sensor"
MAX_REQUESTS_PER_TICK = 200  # runs (each covers up to MAX_HOURS_PER_RUN hours)
MAX_EXAMINED_PER_TICK = 2000
RECONCILE_PER_TICK = 10_000
# Seconds from the start of a tick until which each step may go on (Dagster gives a tick 60 s).
RECONCILE_SECONDS = 15
EXAMINE_SECONDS = 35
TICK_SECONDS = 45  # moving loads aside stops there; what is left is moved on the next tick
_clock = time.time  # the clock the budgets are read on (a test's store answers on a fake one)
_QUERY_CHUNK = 300
SPARK_BACKENDS = frozenset({"parquet"})  # backends whose loads start Spark
# Dagster's tags for a single-run partition range (RunRequest has no partition range argument in 1.13).
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _position(cursor: str | None) -> ScanPosition:
    try:
        return ScanPosition.from_json(json.loads(cursor)["reconcile"]) if cursor else ScanPosition()
    except (ValueError, KeyError, TypeError):
        return ScanPosition()  # an older cursor: start a reconciliation round


def _taking_turns(pending: list[TableHour]) -> list[TableHour]:
    """Each table's oldest first, one of each table in turn: a table with thousands of
    pending hours leaves the others their share of the examined ones."""
    by_table: dict[tuple[str, str], list[TableHour]] = {}
    for th in pending:
        by_table.setdefault((th.dataset, th.table), []).append(th)
    turns = zip_longest(*(sorted(v) for _, v in sorted(by_table.items())))
    return [th for turn in turns for th in turn if th is not None]


def _seen_runs(instance, loads: list[PendingLoad]) -> list[SeenRun]:
    """Every run that covered one of `loads`, in a few indexed queries: by member tag, one
    query per hour of the week among them; by run key, for runs of earlier versions."""
    by_tag: dict[str, list[str]] = {}
    for ld in loads:
        k, v = ld.tag
        by_tag.setdefault(k, []).append(v)
    queries = [(RUN_KEY_TAG, [k for ld in loads for k in attempt_keys(ld.th.done_file, ld.sha)]),
               *sorted(by_tag.items())]
    runs: dict[str, SeenRun] = {}
    for tag, values in queries:
        it = iter(values)
        while chunk := list(islice(it, _QUERY_CHUNK)):
            for run in instance.get_runs(filters=RunsFilter(tags={tag: chunk})):
                runs[run.run_id] = SeenRun(run.run_id, run.status.value, dict(run.tags))
    return list(runs.values())


def load_run_request(group: LoadGroup, key: AssetKey, spark: bool) -> RunRequest:
    """One run loading every hour of `group`: its partition, or a single-run partition range."""
    first, last = (hour_key(hour_from_tag(h)) for h in (group.hours[0], group.hours[-1]))
    tags = {**group.tags(), REDO_DONE_HOURS_TAG: "true", **({SPARK_TAG: "true"} if spark else {})}
    if first == last:
        return RunRequest(run_key=group.run_key, partition_key=first, asset_selection=[key], tags=tags)
    return RunRequest(run_key=group.run_key, asset_selection=[key],
                      tags={**tags, RANGE_START_TAG: first, RANGE_END_TAG: last})


def build_done_file_sensor(tables: dict[tuple[str, str], AssetKey],
                           hours: dict[tuple[str, str], PartitionsDefinition]):
    """`tables`: every destination table's asset; `hours`: its partitions (its topic's hours, an
    hourly definition: its keys sort as its hours do)."""

    @sensor(
        name=SENSOR_NAME,
        asset_selection=list(tables.values()),
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads warehouse hours when their done files appear or change (a table's consecutive hours "
                    "in one run), and retries failed loads.",
    )
    def done_file_sensor(context: SensorEvaluationContext, landing: LandingResource, warehouse: WarehouseResource):
        started = _clock()
        store = landing.store()
        backend = warehouse.backend(store)
        log = context.log

        unknown = sorted(f"{d}.{t}" for d, t in listed_tables(store) if (d, t) not in tables)
        if unknown:
            log.warning(f"done files for tables not in the topic config, not loaded by any asset: {unknown} (hours a "
                        f"routing change retired are emptied by {RETIRED_SENSOR_NAME})")

        position, marked, scanned = reconcile(store, list(tables), backend.loaded_sha, _position(context.cursor),
                                              RECONCILE_PER_TICK, deadline=started + RECONCILE_SECONDS, clock=_clock)
        if marked:
            log.info(f"reconciliation found {len(marked)} done file(s) not loaded and not marked pending, e.g. "
                     f"{marked[0].done_file}: marked")
        cursor = json.dumps({"v": 3, "reconcile": position.to_json()})

        def asset(th: TableHour) -> str:
            return tables[(th.dataset, th.table)].to_user_string()

        # Which hours are partitions depends on the path alone: no read, no place among the examined.
        not_partitions: dict[str, list[TableHour]] = {}
        candidates = []
        bounds: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        for th in list_pending(store):
            if (key := (th.dataset, th.table)) not in tables:
                continue
            if key not in bounds:  # hourly: a key is a partition if it lies within the first and last
                bounds[key] = (hours[key].get_first_partition_key(), hours[key].get_last_partition_key())
            first, last = bounds[key]
            if first is not None and last is not None and first <= hour_key(hour_from_tag(th.hour)) <= last:
                candidates.append(th)
            else:
                not_partitions.setdefault(th.name, []).append(th)

        loads, seen_of, examined, gone = [], {}, 0, {}
        aside: list[tuple[str, TableHour, str | None, str, str, list[str]]] = []  # (kind, th, seen, sha, why, runs)
        for th in _taking_turns(candidates):
            if examined >= MAX_EXAMINED_PER_TICK or _clock() >= started + EXAMINE_SECONDS:
                log.info(f"{examined} of {len(candidates)} pending loads examined this tick; the rest on later ticks")
                break
            examined += 1
            marker = read_marker(store, th)  # before the done file: a marker written after it is newer
            if marker is None:
                continue  # loaded since the listing
            seen = marker.get("sha256") if isinstance(marker.get("sha256"), str) else None
            try:
                content = store.read_bytes(th.done_file)
            except FileNotFoundError:
                gone.setdefault(th.name, []).append(th)
                clear_pending(store, th.done_file, seen)
                continue
            sha = content_sha(content)
            try:
                problems = done_file_problems(th.done_file, json.loads(content))
            except ValueError as exc:
                problems = [f"done file {th.done_file}: is not JSON ({exc})"]
            if problems:
                aside.append(("invalid", th, seen, sha, "; ".join(problems) + "; re-land the hour or fix the tool "
                              "that wrote the done file", []))
                continue
            if backend.loaded_sha(th.dataset, th.table, th.hour) == sha:
                # Loaded; the marker outlived it. Only the marker seen before the read goes: a re-land
                # since then wrote a marker of newer content, which stays pending (compare-and-delete).
                clear_pending(store, th.done_file, seen)
                continue
            why = refusal(marker, sha)
            if why is not None:
                aside.append(("refused", th, seen, sha, f"its last load failed for good ({why[:500]})", []))
                continue
            ld = PendingLoad(th, sha)
            seen_of[ld] = seen
            loads.append(ld)

        plan = plan_loads(loads, covering_runs(loads, _seen_runs(context.instance, loads)))
        for ld, runs in plan.given_up:
            ids = [r.run_id for r in runs]
            aside.append(("attempts", ld.th, seen_of[ld], ld.sha,
                          f"finished {MAX_ATTEMPTS} times without loading it (runs {ids})", ids))
        moved: dict[str, tuple[TableHour, str, str]] = {}  # the first moved aside per table, this tick
        kinds = dict.fromkeys(("attempts", "refused", "invalid"), 0)
        left = 0
        for kind, th, seen, sha, why, runs in aside:
            kinds[kind] += 1
            if _clock() >= started + TICK_SECONDS:
                left += 1
            elif give_up_pending(store, th, seen, sha, why, runs):
                moved.setdefault(th.name, (th, sha, why))
        if left:
            log.info(f"{left} load(s) not asked for again are moved aside on later ticks")

        given_up: dict[str, list[TableHour]] = {}
        for th in list_pending(store, given_up=True):
            if (th.dataset, th.table) in tables:
                given_up.setdefault(th.name, []).append(th)
        for name, ths in sorted(given_up.items()):
            if name in moved:
                th, sha, why = moved[name]
            else:
                th = ths[0]
                marker = read_marker(store, th, given_up=True) or {}
                sha, why = str(marker.get("sha256", "")), given_up_why(marker)
            log.warning(
                f"{name}: {len(ths)} hour(s) not loaded and not requested again ({ths[0].hour} to {ths[-1].hour}; "
                f"why for each: {pending_dir(True, th.dataset, th.table)}/), e.g. {th.done_file} (content {sha[:16]}): "
                f"{why[:1000]}. Fix the cause, then materialise {asset(th)} for those hours or re-land them: either "
                "clears them.")
        for name, ths in sorted(not_partitions.items()):
            th = ths[0]
            log.warning(f"{name}: {len(ths)} hour(s) pending but not loaded, e.g. {th.done_file}: hour "
                        f"{hour_key(hour_from_tag(th.hour))} is not a partition of {asset(th)} (before its topic's "
                        "first hour, or not ended yet)")
        for name, ths in sorted(gone.items()):
            log.warning(f"{name}: {len(ths)} pending load(s) whose done file is gone, e.g. {ths[0].done_file}: "
                        "nothing to load; marker(s) removed")
        spark = backend.kind in SPARK_BACKENDS
        requests = [load_run_request(g, tables[(g.dataset, g.table)], spark)
                    for g in plan.groups[:MAX_REQUESTS_PER_TICK]]
        if len(plan.groups) > MAX_REQUESTS_PER_TICK:
            log.info(f"{len(plan.groups)} load runs ready, {MAX_REQUESTS_PER_TICK} requested (oldest hours first); "
                     "the rest on later ticks")
        if requests:
            return SensorResult(run_requests=requests, cursor=cursor)
        return SensorResult(cursor=cursor, skip_reason=SkipReason(
            f"nothing to request: {len(plan.waiting)} load(s) in flight; this tick {kinds['attempts']} given up after "
            f"{MAX_ATTEMPTS} attempts, {kinds['refused']} refused for good, {kinds['invalid']} done file(s) "
            f"contradicting their path; {sum(len(v) for v in given_up.values())} given up in all ({pending_dir(True)}/); "
            f"{sum(len(v) for v in not_partitions.values())} not a partition; {scanned} done files reconciled"))

    return done_file_sensor


def build_retired_hours_sensor(tables: Iterable[tuple[str, str]]):
    """Requests `retire_hours` for the retired done files of tables in no topic's config (a
    routing change re-landed their hours elsewhere): the warehouse then drops those hours' rows.
    Same queue as the done-file sensor (markers, attempts, run keys, moved aside when asking again
    cannot help), over the markers of the tables that sensor does not load; a done file of such a
    table that is not retired is left to its warning there."""
    configured = set(tables)

    @sensor(
        name=RETIRED_SENSOR_NAME,
        job=retire_hours,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Empties the warehouse hours of tables a routing change retired (their re-landed hours now "
                    "feed another table), so no record counts in two tables.",
    )
    def retired_hours_sensor(context: SensorEvaluationContext, landing: LandingResource,
                             warehouse: WarehouseResource):
        started = _clock()
        store = landing.store()
        backend = warehouse.backend(store)
        loads, seen_of, examined = [], {}, 0
        aside: list[tuple[TableHour, str | None, str, str, list[str]]] = []
        for th in list_pending(store):
            if (th.dataset, th.table) in configured:
                continue
            if examined >= MAX_EXAMINED_PER_TICK or _clock() >= started + EXAMINE_SECONDS:
                break  # the rest on later ticks
            examined += 1
            marker = read_marker(store, th)
            if marker is None:
                continue
            seen = marker.get("sha256") if isinstance(marker.get("sha256"), str) else None
            try:
                content = store.read_bytes(th.done_file)
                raw = json.loads(content)
            except FileNotFoundError:
                clear_pending(store, th.done_file, seen)
                continue
            except ValueError:
                continue  # not retired by publish: the done-file sensor names the table
            if not isinstance(raw, dict) or not raw.get("retired"):
                continue
            sha = content_sha(content)
            if backend.loaded_sha(th.dataset, th.table, th.hour) == sha:
                clear_pending(store, th.done_file, seen)
                continue
            if (why := refusal(marker, sha)) is not None or (why := "; ".join(done_file_problems(th.done_file, raw))):
                aside.append((th, seen, sha, f"retiring it failed for good: {why[:500]}", []))
                continue
            ld = PendingLoad(th, sha)
            seen_of[ld] = seen
            loads.append(ld)
        plan = plan_loads(loads, covering_runs(loads, _seen_runs(context.instance, loads)))
        aside += [(ld.th, seen_of[ld], ld.sha, f"{RETIRE_JOB} finished {MAX_ATTEMPTS} times without emptying it "
                   f"(runs {[r.run_id for r in runs]})", [r.run_id for r in runs]) for ld, runs in plan.given_up]
        for th, seen, sha, why, runs in aside:
            if give_up_pending(store, th, seen, sha, why, runs):
                context.log.warning(f"{th.name} {th.hour}: the retired hour is not emptied and not requested again: "
                                    f"{why}. Fix the cause, then launch {RETIRE_JOB} with done file {th.done_file}, "
                                    "or drop the hour by hand.")
        spark = {SPARK_TAG: "true"} if backend.kind in SPARK_BACKENDS else {}
        requests = [RunRequest(run_key=g.run_key, tags={**g.tags(), **spark}, run_config={"ops": {
                        "retire_hours_op": {"config": {"done_files": [ld.th.done_file for ld in g.loads]}}}})
                    for g in plan.groups[:MAX_REQUESTS_PER_TICK]]
        if requests:
            return SensorResult(run_requests=requests)
        return SensorResult(skip_reason=SkipReason(
            f"no retired hour to empty: {examined} pending load(s) of tables in no topic config examined, "
            f"{len(plan.waiting)} in flight, {len(aside)} moved aside"))

    return retired_hours_sensor


def build_event_sensor(events: dict[tuple[str, str], AssetKey]):
    """`events`: (dataset, landing-hour table) -> its event-time table's asset. Requests a load of
    every event partition a landing hour marked (`event_partitions`), adding the partitions Dagster
    does not know yet (its partitions are the event days that have records). One run per partition
    and set of markers: a partition with a load in flight waits for it, so a backfill that lands a
    day hour by hour versions each event day a few times, not once per hour; a failed load is asked
    for again under a new run key, at most `MAX_ATTEMPTS` times, unless it failed for good (then only
    when a landing hour marks the partition anew)."""

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
        started = _clock()
        store = landing.store()
        spark = {SPARK_TAG: "true"} if warehouse.backend(store).kind in SPARK_BACKENDS else {}
        requests, adds, waiting, refused, given_up, left = [], [], 0, [], [], 0
        for (dataset, table), key in sorted(events.items()):
            pending = pending_partitions(store, dataset, table)
            if not pending:
                continue
            name = f"{dataset}__{event_table(table)}"
            known = set(context.instance.get_dynamic_partitions(name))
            if new := sorted(p for p in pending if p not in known):
                adds.append(AddDynamicPartitionsRequest(name, new))
            for partition, marks in sorted(pending.items()):
                if _clock() >= started + EXAMINE_SECONDS or len(requests) >= MAX_REQUESTS_PER_TICK:
                    left += 1
                    continue
                where = f"{dataset}.{event_table(table)} {partition}"
                if (why := event_refusal(store, dataset, table, partition, marks)) is not None:
                    refused.append(f"{where}: {why[:300]}")
                    continue
                tag = f"{dataset}.{event_table(table)}/{partition}"
                runs = context.instance.get_runs(filters=RunsFilter(tags={EVENT_TAG: tag}), limit=100)
                if any(r.status.value not in FINISHED for r in runs):
                    waiting += 1
                    continue
                target, sha = event_pending_dir(dataset, table, partition), marks_sha(marks)
                statuses: dict[str, list[str]] = {}
                for r in runs:
                    statuses.setdefault(r.tags.get(RUN_KEY_TAG, ""), []).append(r.status.value)
                decision = decide(target, sha, statuses)
                if decision.action == "give_up":
                    given_up.append(f"{where} (runs {[k for k, _ in decision.runs]})")
                    continue
                if decision.action == "wait":
                    waiting += 1
                    continue
                requests.append(RunRequest(run_key=decision.run_key, partition_key=partition, asset_selection=[key],
                                           tags={EVENT_TAG: tag, **spark}))
        for what in refused:
            context.log.warning(f"event partition not loaded and not requested again until a landing hour changes "
                                f"it: {what}. Fix the cause, then materialise it (or re-land the hour).")
        if given_up:
            context.log.warning(f"{len(given_up)} event partition(s) failed {MAX_ATTEMPTS} times and are not requested "
                                f"again until a landing hour changes them, e.g. {given_up[0]}: look at those runs, "
                                "fix the cause and materialise them")
        if left:
            context.log.info(f"{left} pending event partition(s) left for the next tick")
        if requests or adds:
            return SensorResult(run_requests=requests, dynamic_partitions_requests=adds)
        return SensorResult(skip_reason=SkipReason(
            f"no event partition to load: {waiting} in flight, {len(refused)} refused for good, "
            f"{len(given_up)} given up after {MAX_ATTEMPTS} attempts"))

    return event_partition_sensor
