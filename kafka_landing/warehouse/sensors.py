"""The done-file sensor: every done file gets loaded, once per content, whatever
its mtime, and a failed load is asked for again, at a cost per tick that does
not grow with history (see `load_queue` for the queue it reads).

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
   - otherwise asks the instance for the runs of that content's run keys
     (`load_queue.decide`): none -> request a load (run key `<done file>@<hash>`);
     one in flight -> wait; all finished and still not loaded -> request attempt
     n+1 (`...#attempt<n+1>`), up to `MAX_ATTEMPTS`; then warn on every tick,
     naming the done file and the runs, until the hour loads (materialise it
     from the UI once the cause is fixed) or is re-landed.
At most `MAX_REQUESTS_PER_TICK` loads are requested per tick. A duplicate tick
requests the same run keys (Dagster launches each once); a restarted sensor
(no cursor) requests nothing the warehouse has loaded; a re-landed hour (new
content, new marker) requests a reload.
"""

import json
from itertools import islice

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from kafka_landing.hours import FIRST_HOUR_ENV, hourly
from kafka_landing.naming import hour_from_tag, hour_key
from kafka_landing.resources import LandingResource
from kafka_landing.warehouse.done_checks import done_file_problems
from kafka_landing.warehouse.load_queue import (
    MAX_ATTEMPTS,
    ScanPosition,
    attempt_keys,
    clear_pending,
    content_sha,
    decide,
    list_pending,
    listed_tables,
    marker_sha,
    reconcile,
    run_key,
)
from kafka_landing.warehouse.resources import WarehouseResource

SENSOR_NAME = "done_file_sensor"
RUN_KEY_TAG = "dagster/run_key"
MAX_REQUESTS_PER_TICK = 200
MAX_EXAMINED_PER_TICK = 2000
RECONCILE_PER_TICK = 10_000
_QUERY_CHUNK = 300


def done_run_key(rel: str, content: bytes) -> str:
    return run_key(rel, content_sha(content))


def _position(cursor: str | None) -> ScanPosition:
    try:
        scan = json.loads(cursor)["scan"] if cursor else {}
        return ScanPosition(scan.get("table"), scan.get("after"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ScanPosition()  # an older cursor (newest mtime): start a reconciliation pass


def _runs_by_key(instance, keys: list[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Statuses and run ids of the runs carrying each run key, in a few queries."""
    statuses, ids = {}, {}
    it = iter(keys)
    while chunk := list(islice(it, _QUERY_CHUNK)):
        for run in instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: chunk})):
            k = run.tags.get(RUN_KEY_TAG)
            statuses.setdefault(k, []).append(run.status.value)
            ids.setdefault(k, []).append(run.run_id)
    return statuses, ids


def build_done_file_sensor(tables: dict[tuple[str, str], AssetKey]):
    @sensor(
        name=SENSOR_NAME,
        asset_selection=list(tables.values()),
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads a warehouse hour when its done file appears or changes, and retries failed loads.",
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

        candidates, invalid, examined = [], 0, 0
        for th in list_pending(store):
            if (th.dataset, th.table) not in tables:
                continue
            if examined >= MAX_EXAMINED_PER_TICK:
                break
            examined += 1
            try:
                content = store.read_bytes(th.done_file)
            except FileNotFoundError:
                log.warning(f"pending load of {th.done_file}: the done file is gone, nothing to load; marker removed")
                clear_pending(store, th.done_file, marker_sha(store, th))
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
                clear_pending(store, th.done_file, marker_sha(store, th))  # loaded; the marker outlived it
                continue
            candidates.append((th, sha))

        statuses, run_ids = _runs_by_key(
            context.instance, [k for th, sha in candidates for k in attempt_keys(th.done_file, sha)])
        requests, waiting, gave_up = [], 0, 0
        for th, sha in candidates:
            d = decide(th.done_file, sha, statuses)
            if d.action == "wait":
                waiting += 1
            elif d.action == "give_up":
                gave_up += 1
                runs = [r for k in attempt_keys(th.done_file, sha) for r in run_ids.get(k, [])]
                log.warning(
                    f"load of {th.done_file} (content {sha[:16]}) into {th.name} hour {th.hour} finished "
                    f"{MAX_ATTEMPTS} times without loading it (runs {runs}); not requested again. Fix the cause "
                    f"(see those runs) and materialise {tables[(th.dataset, th.table)].to_user_string()} for "
                    f"{hour_key(hour_from_tag(th.hour))}, or re-land the hour: either clears this.")
            elif not hourly.has_partition_key(partition := hour_key(hour_from_tag(th.hour))):
                log.warning(f"not loading {th.done_file}: hour {partition} is not a partition of "
                            f"{tables[(th.dataset, th.table)].to_user_string()} (before the first hour, "
                            f"${FIRST_HOUR_ENV}, or not ended yet)")
            elif len(requests) < MAX_REQUESTS_PER_TICK:
                requests.append(RunRequest(
                    run_key=d.run_key,
                    partition_key=partition,
                    asset_selection=[tables[(th.dataset, th.table)]],
                    tags={"kafka_landing/spark": "true", "kafka_landing/table": th.name,
                          "kafka_landing/done_file": th.done_file, "kafka_landing/done_sha256": sha,
                          "kafka_landing/load_attempt": str(d.attempt)},
                ))
        if requests:
            return SensorResult(run_requests=requests, cursor=cursor)
        return SensorResult(cursor=cursor, skip_reason=SkipReason(
            f"nothing to request: {waiting} load(s) in flight, {gave_up} given up after {MAX_ATTEMPTS} attempts, "
            f"{invalid} done file(s) contradicting their path; {scanned} done files reconciled"))

    return done_file_sensor
