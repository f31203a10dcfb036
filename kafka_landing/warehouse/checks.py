"""CHECK: each warehouse table's checks.

- `conservation` (per hour, ERROR): warehouse rows of the hour, read back from the
  warehouse itself, = landed rows (the Avro block headers of the files the done
  file lists). A partitioned check, so it runs with every load and can be re-run
  for any hour from the UI: it reads what is there now, so a truncated or
  replaced hour fails.
- `hours_behind` (WARN): closed hours (hour end + the topic's grace passed) not
  loaded, counted from the table's first landed hour (hours before a table's
  first data are not "behind"; every closed hour after it is, landed or not).
  It runs with every load, so a gap shows as soon as a later hour loads.

And each event-time table's (per event partition), so that what the UI shows is true now
(a check's latest result per partition; exact data never stays red):
- `conservation_by_event` (ERROR): the warehouse holds the partition's newest version (rows
  read back from it), and every landing hour in that version has all its landed rows in exactly
  one event partition (summed over the partitions its done file feeds). Rows missing only where
  another partition Q waits for its next version (marked, not versioned yet) warn instead, and
  that warning is evaluated again when Q is loaded: Q's own check re-counts every partition that
  shares a landing hour with Q whose latest result waited for Q (or whose check has yet to report
  after its load: it may have counted before Q was versioned) and stores the new result on that
  partition's latest materialisation, as `hour_check_events` does for the hours of a range. Why
  not simply pass while waiting: the warning is true (those rows are not in the event-time table
  yet), lasts only until the sensor's next load, and stays visible if that load never succeeds;
  re-evaluating costs a count per neighbour, bounded by Q's own landing hours, not by history.
- `settled`: whether the partition is final, the one signal readers act on. Green only when it
  is final (`settle_hours` after its last change, none waiting to change it): "final since <time>".
  Yellow (WARN) while it is not final yet, saying until when late records may amend it
  (`settles_at`); the settled sensor evaluates it again at that time, so it turns green by itself
  (a landing hour waiting to amend it has it versioned again first, and checked with that load).
  Red (ERROR) only while a version made after the partition had been final is not final again
  itself: whoever read the partition as final should read it again.
"""

from datetime import datetime, timezone

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    MetadataValue,
    Output,
    asset_check,
)
from dagster._core.event_api import PartitionKeyFilter  # not exported; what the check-record queries take
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from kafka_landing.avro_files import AvroFileError
from kafka_landing.config import TopicConfig
from kafka_landing.hours import CONSERVATION, hour_check_events, topic_hours
from kafka_landing.handoff.manifests import DoneFileError, read_done_file
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import Hour, done_file_path, event_table
from kafka_landing.resources import LandingResource
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.assets import event_key, event_partitions, warehouse_key
from kafka_landing.warehouse.backend import Warehouse
from kafka_landing.warehouse.by_event.measures import Conservation, Settling, current_settling, event_conservation
from kafka_landing.warehouse.queue.reconcile import table_behind
from kafka_landing.warehouse.resources import WarehouseResource

MISSING_SHOWN = 48  # missing hours listed in the check's metadata (the count is always whole)


def hour_conservation(store: LandingStore, warehouse: Warehouse, dataset: str, table: str,
                      hour: Hour) -> tuple[bool, str, dict]:
    """Warehouse rows of one hour against landed rows, both read now: from the warehouse itself
    (the Iceberg metadata's record counts, BigQuery's partition row count) and from the block headers of the Avro
    files the done file lists."""
    rel = done_file_path(dataset, table, hour)
    where = f"{dataset}.{table} hour {hour}"
    try:
        done, sha = read_done_file(store, rel)
    except DoneFileError as exc:
        if exc.gone:
            return False, f"{where}: no done file ({rel}): nothing landed for this hour", {}
        if exc.transient:
            raise  # the store did not answer: the check errors, as any store error does, and can be re-run
        return False, f"{where}: {exc}", {}
    landed = 0
    for f in done.files:
        try:
            landed += store.avro_rows(f.path, counted=f.counted)
        except FileNotFoundError:
            return False, f"{where}: listed file {f.path} is missing: re-land the hour", {"done_file": rel}
        except AvroFileError as exc:
            return False, f"{where}: listed file {f.path} is not a whole Avro file ({exc}): re-land the hour", {}
    loaded = warehouse.loaded(dataset, table, hour)
    rows = warehouse.partition_rows(dataset, table, hour)
    metadata = {
        "landed_rows": landed,
        "done_file_rows": done.rows,
        "warehouse_rows": rows if rows is not None else 0,
        "done_file": rel,
        "loaded": loaded is not None,
        "reload_pending": loaded is not None and loaded.get("sha256") != sha,
    }
    if loaded is None and rows is None:
        return False, f"{where}: not loaded yet ({landed} rows landed)", metadata
    if rows is None and (loaded or {}).get("rows", 0):
        return False, (f"{where}: the hour {warehouse.partition_location(dataset, table, hour)} is missing, "
                       f"the load recorded {loaded['rows']} rows: reload the hour"), metadata
    got = rows or 0
    if got != landed:
        return False, (f"{where}: {got} rows in the warehouse, {landed} landed "
                       f"({warehouse.partition_location(dataset, table, hour)}): reload the hour"), metadata
    return True, f"{where}: {got} rows, as landed", metadata


def build_table_checks(cfg: TopicConfig, table: str) -> list:
    key = warehouse_key(cfg.dataset, table)

    @asset_check(asset=key, name=CONSERVATION, partitions_def=topic_hours(cfg),
                 description="Warehouse rows of the hour (Iceberg's record counts, or BigQuery's partition row count) = "
                             "landed rows (Avro block headers of the files the done file lists). Re-run it for "
                             "any hour: it reads what is there now.")
    def _conservation(context: AssetCheckExecutionContext, landing: LandingResource, warehouse: WarehouseResource):
        store = landing.store()
        backend = warehouse.backend(store)
        results = {k: hour_conservation(store, backend, cfg.dataset, table, Hour.from_key(k))
                   for k in sorted(context.partition_keys)}
        by_hour = {k: [AssetCheckResult(check_name=CONSERVATION, passed=ok, description=why, metadata=metadata)]
                   for k, (ok, why, metadata) in results.items()}
        if len(by_hour) == 1:
            yield next(iter(by_hour.values()))[0]
            return
        yield from hour_check_events(context.instance, key, by_hour)  # each hour's result on its hour
        yield Output(None, output_name=context.op_def.output_defs[0].name)

    @asset_check(asset=key, name="hours_behind",
                 description=f"Closed hours (hour end + {cfg.grace_minutes} min grace) of {cfg.dataset}.{table} not "
                             "loaded, from its first landed hour on. Warns from one hour behind.")
    def _hours_behind(landing: LandingResource, warehouse: WarehouseResource):
        store = landing.store()
        behind = table_behind(store, warehouse.backend(store).loaded_partitions(cfg.dataset, table), cfg.dataset,
                              table, datetime.now(timezone.utc), cfg.grace_minutes)
        metadata = {
            "hours_behind": behind.hours,
            "first_landed_hour": behind.first_landed_hour or "",
            "last_closed_hour": behind.last_closed_hour or "",
            "oldest_missing_hour": behind.missing[0] if behind.missing else "",
            "missing_hours": MetadataValue.json(list(behind.missing[:MISSING_SHOWN])),
            "reload_pending": behind.pending,
        }
        if behind.first_landed_hour is None:
            why = f"{cfg.dataset}.{table}: nothing landed yet"
        elif behind.hours:
            why = (f"{cfg.dataset}.{table} is {behind.hours} closed hour(s) behind (oldest {behind.missing[0]}): "
                   "land the missing hours and check the done-file sensor's log for failed loads")
        else:
            why = f"{cfg.dataset}.{table}: every closed hour from {behind.first_landed_hour} to {behind.last_closed_hour} is loaded"
        return AssetCheckResult(passed=behind.hours == 0, severity=AssetCheckSeverity.WARN, description=why,
                                metadata=metadata)

    return [_conservation, _hours_behind]




CONSERVATION_BY_EVENT = "conservation_by_event"
SETTLED = "settled"


def build_event_checks(cfg: TopicConfig, table: str) -> list:
    key = event_key(cfg.dataset, table)
    partitions = event_partitions(cfg.dataset, table)

    @asset_check(asset=key, name=CONSERVATION_BY_EVENT, partitions_def=partitions,
                 description="The warehouse holds the partition's newest version (rows read back from it), and every "
                             "landing hour in it has all its landed rows in exactly one event partition. A count off "
                             "only because another partition waits for its next version warns, and is evaluated "
                             "again when that partition is loaded; a loss is an error.")
    def _conservation_by_event(context: AssetCheckExecutionContext, landing: LandingResource,
                               warehouse: WarehouseResource):
        store = landing.store()
        backend = warehouse.backend(store)
        partition = context.partition_key
        c = event_conservation(store, backend, cfg, table, partition)
        yield _conservation_result(c)
        # The partitions whose latest result waited for this one: evaluated again now, on their own
        # partition and latest materialisation, so none stays red once its data are exact.
        again = {p: [_conservation_result(event_conservation(store, backend, cfg, table, p), after=partition)]
                 for p in c.neighbours if _waited_for(context.instance, key, p, partition)}
        if again:
            context.log.info(f"{cfg.dataset}.{event_table(table)}: {CONSERVATION_BY_EVENT} of {sorted(again)} "
                             f"waited for {partition}: evaluated again")
            yield from hour_check_events(context.instance, key, again)

    @asset_check(asset=key, name=SETTLED, partitions_def=partitions,
                 description=f"Whether the partition is final: green once no landing hour changed it for "
                             f"{cfg.settle_hours} h (settle_hours) and none waits to; yellow until then, saying "
                             "until when it may change (it turns green by itself at that time); red when it changed "
                             "after it had been final, until it is final again (read it again).")
    def _settled(context: AssetCheckExecutionContext, landing: LandingResource):
        store = landing.store()
        return _settled_result(current_settling(store, event_unit(cfg.dataset, table, context.partition_key),
                                               cfg.settle_hours), cfg.settle_hours)

    return [_conservation_by_event, _settled]


def _settled_result(s: Settling, settle_hours: int) -> AssetCheckResult:
    """Green only when final; red while a version made after the partition had been final is not
    final itself; yellow otherwise (not final yet: it says until when)."""
    return AssetCheckResult(check_name=SETTLED, passed=s.settled, description=s.why,
                            severity=AssetCheckSeverity.ERROR if s.amended_after_final else AssetCheckSeverity.WARN,
                            metadata={"settled": s.settled, "settles_at": s.settles_at or "",
                                      "settle_hours": settle_hours,
                                      "amended_after_it_settled_at": s.previous_settled_at or ""})


def _conservation_result(c: Conservation, after: str | None = None) -> AssetCheckResult:
    """A count off only where another partition waits for its next version warns (it is evaluated again
    when that partition is loaded); anything else off is a loss, an error."""
    metadata = {k: MetadataValue.json(v) if isinstance(v, (dict, list)) else v for k, v in c.metadata.items()}
    why = c.why
    if after is not None:
        metadata["evaluated_again_after"] = after
        why = f"{why} (evaluated again when {after} was loaded)"
    return AssetCheckResult(check_name=CONSERVATION_BY_EVENT, passed=c.ok, description=why, metadata=metadata,
                            severity=AssetCheckSeverity.WARN if c.waiting else AssetCheckSeverity.ERROR)


def _waited_for(instance: DagsterInstance, key: AssetKey, partition: str, loaded: str) -> bool:
    """Whether `partition`'s conservation is to be evaluated again now that `loaded` is loaded: its latest
    result waited for `loaded`, or its check has yet to report after a load that is done (its result
    may have been counted before `loaded` was versioned; the evaluation stored here is the newer row,
    so it is the one the UI shows). Not while a load of `partition` is under way: its own check, run
    after that load, counts with `loaded` versioned already."""
    check_key = AssetCheckKey(key, CONSERVATION_BY_EVENT)
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [check_key], partition_filter=PartitionKeyFilter(key=partition)).get(check_key)
    if latest is None:
        return False
    if latest.status == AssetCheckExecutionRecordStatus.PLANNED:
        stale = True
    else:
        evaluation = latest.evaluation
        waited = evaluation.metadata.get("waiting_for") if evaluation is not None else None
        stale = evaluation is not None and not evaluation.passed and loaded in (waited.value if waited else ())
    return stale and not _load_in_flight(instance, key, partition)


def _load_in_flight(instance: DagsterInstance, key: AssetKey, partition: str) -> bool:
    """A run planned to materialise the partition has not done so and has not finished."""
    planned = instance.get_latest_planned_materialization_info(key, partition)
    if planned is None:
        return False
    done = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[partition]),
                                           limit=1).records
    if done and done[0].storage_id > planned.storage_id:
        return False
    run = instance.get_run_by_id(planned.run_id)
    return run is not None and not run.is_finished


def build_warehouse_checks(config) -> list:
    """Every table's checks, and its event-time table's."""
    return [*(c for cfg in config.topics.values() for table in cfg.tables for c in build_table_checks(cfg, table)),
            *(c for cfg in config.topics.values() if cfg.event_granularity for table in cfg.tables
              for c in build_event_checks(cfg, table))]
