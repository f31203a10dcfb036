"""The done-file sensor: every done file gets loaded, once per content, whatever
its mtime, and a failed load is asked for again, at a cost per tick that does
not grow with history (see `load_queue` for the queue it reads). What is ready
is loaded in few runs: one per table and run of consecutive hours, not one per
hour, so a backfill of a day starts a handful of runs (and Spark JVMs), not
one per (table, hour).

Each tick:
1. Reconciles up to `RECONCILE_PER_TICK` done files of the configured tables,
   going on where the last tick stopped (the cursor): a done file whose content
   is not the content the warehouse loaded and that has no pending marker (one
   written by another tool, or before markers existed) gets a marker. A full
   pass over 8,760 hours x 20 tables takes 18 ticks (about 9 minutes at the
   30-second interval); a small landing root is reconciled whole on every tick,
   the first one included.
2. Lists the pending markers (oldest hour first, at most
   `MAX_EXAMINED_PER_TICK`), reads each one's done file and
   - skips it with a warning if its contents contradict its path (`done_checks`);
   - clears the marker if the warehouse already loaded that content;
   - skips it with a warning if a load of that content failed terminally (the marker
     says so, `load_queue.refuse_pending`): retrying cannot help until the hour is
     re-landed (new content, new marker) or a person materialises it;
   - otherwise it is a load to make (`<done file>@<hash>`, a "member").
3. Asks the instance for the runs that covered those members (their member tags,
   one query per hour of the week; run keys of earlier versions) and plans
   (`load_queue.plan_loads`): a member with a run in flight waits; one whose
   `MAX_ATTEMPTS` runs all finished without loading it is warned about on every
   tick, naming the done file and the runs, until it loads (materialise it from
   the UI once the cause is fixed) or is re-landed; the others are ready, and
   each table's consecutive ready hours at the same attempt become one run (a
   partition range of at most `MAX_HOURS_PER_RUN` hours; a last attempt alone).
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

from kafka_landing.hours import REDO_DONE_HOURS_TAG
from kafka_landing.naming import hour_from_tag, hour_key
from kafka_landing.resources import LandingResource
from kafka_landing.warehouse.done_checks import done_file_problems
from kafka_landing.warehouse.load_queue import (
    MAX_ATTEMPTS,
    RUN_KEY_TAG,
    LoadGroup,
    PendingLoad,
    ScanPosition,
    SeenRun,
    attempt_keys,
    clear_pending,
    content_sha,
    covering_runs,
    list_pending,
    listed_tables,
    marker_sha,
    plan_loads,
    read_marker,
    reconcile,
    refusal,
)
from kafka_landing.warehouse.resources import WarehouseResource

SENSOR_NAME = "done_file_sensor"
MAX_REQUESTS_PER_TICK = 200  # runs (each covers up to MAX_HOURS_PER_RUN hours)
MAX_EXAMINED_PER_TICK = 2000
RECONCILE_PER_TICK = 10_000
MAX_REFUSED_SHOWN = 20  # refused loads named one by one per tick
_QUERY_CHUNK = 300
SPARK_TAG = "kafka_landing/spark"  # dagster.yaml caps how many runs with it run at once
SPARK_BACKENDS = frozenset({"parquet"})  # backends whose loads start Spark
# Dagster's tags for a single-run partition range (RunRequest has no partition range argument in 1.13).
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _position(cursor: str | None) -> ScanPosition:
    try:
        scan = json.loads(cursor)["scan"] if cursor else {}
        return ScanPosition(scan.get("table"), scan.get("after"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ScanPosition()  # an older cursor (newest mtime): start a reconciliation pass


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
    """`tables`: every destination table's asset; `hours`: its partitions (its topic's hours)."""

    @sensor(
        name=SENSOR_NAME,
        asset_selection=list(tables.values()),
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads warehouse hours when their done files appear or change (a table's consecutive hours "
                    "in one run), and retries failed loads.",
    )
    def done_file_sensor(context: SensorEvaluationContext, landing: LandingResource, warehouse: WarehouseResource):
        store = landing.store()
        backend = warehouse.backend(store)
        log = context.log

        unknown = sorted(f"{d}.{t}" for d, t in listed_tables(store) if (d, t) not in tables)
        if unknown:
            log.warning(f"done files for tables not in the topic config, not loaded: {unknown}")

        position, marked, scanned = reconcile(store, list(tables), backend.loaded_sha, _position(context.cursor),
                                              RECONCILE_PER_TICK)
        if marked:
            log.info(f"reconciliation found {len(marked)} done file(s) not loaded and not marked pending, e.g. "
                     f"{marked[0].done_file}: marked")
        cursor = json.dumps({"v": 2, "scan": {"table": position.table, "after": position.after}})

        loads, refused, invalid, examined = [], [], 0, 0
        for th in list_pending(store):
            if (th.dataset, th.table) not in tables:
                continue
            if examined >= MAX_EXAMINED_PER_TICK:
                break
            examined += 1
            seen = marker_sha(store, th)  # before the done file: a marker written after it is newer
            try:
                content = store.read_bytes(th.done_file)
            except FileNotFoundError:
                log.warning(f"pending load of {th.done_file}: the done file is gone, nothing to load; marker removed")
                clear_pending(store, th.done_file, seen)
                continue
            sha = content_sha(content)
            try:
                problems = done_file_problems(th.done_file, json.loads(content))
            except ValueError as exc:
                problems = [f"done file {th.done_file}: is not JSON ({exc})"]
            if problems:
                invalid += 1
                log.warning("not loading: " + "; ".join(problems)
                            + ". Re-land the hour or fix the tool that wrote the done file.")
                continue
            if backend.loaded_sha(th.dataset, th.table, th.hour) == sha:
                # Loaded; the marker outlived it. Only the marker seen before the read goes: a re-land
                # since then wrote a marker of newer content, which stays pending (compare-and-delete).
                clear_pending(store, th.done_file, seen)
                continue
            why = refusal(read_marker(store, th), sha)
            if why is not None:
                refused.append((th, why))
                continue
            if not hours[(th.dataset, th.table)].has_partition_key(partition := hour_key(hour_from_tag(th.hour))):
                log.warning(f"not loading {th.done_file}: hour {partition} is not a partition of "
                            f"{tables[(th.dataset, th.table)].to_user_string()} (before its topic's first hour, "
                            "or not ended yet)")
                continue
            loads.append(PendingLoad(th, sha))

        plan = plan_loads(loads, covering_runs(loads, _seen_runs(context.instance, loads)))
        for ld, runs in plan.given_up:
            th = ld.th
            log.warning(
                f"load of {th.done_file} (content {ld.sha[:16]}) into {th.name} hour {th.hour} finished "
                f"{MAX_ATTEMPTS} times without loading it (runs {[r.run_id for r in runs]}); not requested again. "
                f"Fix the cause (see those runs) and materialise {tables[(th.dataset, th.table)].to_user_string()} "
                f"for {hour_key(hour_from_tag(th.hour))}, or re-land the hour: either clears this.")
        for th, why in refused[:MAX_REFUSED_SHOWN]:
            log.warning(f"not loading {th.done_file} into {th.name} hour {th.hour}: its last load failed for good "
                        f"({why[:500]}). Fix the cause and materialise "
                        f"{tables[(th.dataset, th.table)].to_user_string()} for {hour_key(hour_from_tag(th.hour))}, "
                        "or re-land the hour: either clears this.")
        if len(refused) > MAX_REFUSED_SHOWN:
            log.warning(f"... and {len(refused) - MAX_REFUSED_SHOWN} more refused load(s)")
        spark = backend.kind in SPARK_BACKENDS
        requests = [load_run_request(g, tables[(g.dataset, g.table)], spark)
                    for g in plan.groups[:MAX_REQUESTS_PER_TICK]]
        if len(plan.groups) > MAX_REQUESTS_PER_TICK:
            log.info(f"{len(plan.groups)} load runs ready, {MAX_REQUESTS_PER_TICK} requested (oldest hours first); "
                     "the rest on later ticks")
        if requests:
            return SensorResult(run_requests=requests, cursor=cursor)
        return SensorResult(cursor=cursor, skip_reason=SkipReason(
            f"nothing to request: {len(plan.waiting)} load(s) in flight, {len(plan.given_up)} given up after "
            f"{MAX_ATTEMPTS} attempts, {len(refused)} refused for good, {invalid} done file(s) contradicting their "
            f"path; {scanned} done files "
            "reconciled"))

    return done_file_sensor


def run_load_request(defs, request: RunRequest, instance, resources: dict | None = None, raise_on_error: bool = True):
    """Run one of this sensor's requests in this process, as the daemon would launch it: the
    table's asset and conservation check, its hour or hour range, its tags, run key and sensor
    name (so the next tick sees the run). For tests, the demo and the benchmark."""
    from dagster import materialize

    from kafka_landing.definitions import build_resources
    from kafka_landing.warehouse.assets import load_run_defs

    return materialize(load_run_defs(defs, request.asset_selection), partition_key=request.partition_key,
                       resources=resources if resources is not None else build_resources(), instance=instance,
                       raise_on_error=raise_on_error,
                       tags={**request.tags, RUN_KEY_TAG: request.run_key, "dagster/sensor_name": SENSOR_NAME})
