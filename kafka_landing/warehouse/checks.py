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

And each event-time table's (per event partition):
- `conservation_by_event` (ERROR): the warehouse holds the partition's newest version
  (rows read back from it), and every landing hour in that version has all its landed
  rows in exactly one event partition (summed over the partitions its done file feeds).
  Rows missing only where another partition waits for its next version warn instead.
- `settled` (WARN): no landing hour changed the partition for the topic's `settle_hours`
  and none waits to: what to look at before reading a day as final.
"""

import json
from datetime import datetime, timezone

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    MetadataValue,
    Output,
    asset_check,
)

from kafka_landing.avro_files import AvroFileError
from kafka_landing.config import TopicConfig
from kafka_landing.handoff import content_sha, landed_hours, list_pending
from kafka_landing.hours import CONSERVATION, hour_check_events, topic_hours
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import done_file_path, hour_from_key, hour_from_tag, hour_tag
from kafka_landing.resources import LandingResource
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.assets import event_key, event_partitions, warehouse_key
from kafka_landing.warehouse.event_load import event_conservation, settling
from kafka_landing.warehouse.done_checks import done_file_problems
from kafka_landing.warehouse.load import Warehouse
from kafka_landing.warehouse.load_queue import hours_behind
from kafka_landing.warehouse.resources import WarehouseResource

MISSING_SHOWN = 48  # missing hours listed in the check's metadata (the count is always whole)


def hour_conservation(store: LandingStore, warehouse: Warehouse, dataset: str, table: str,
                      hour: str) -> tuple[bool, str, dict]:
    """Warehouse rows of one hour against landed rows, both read now: from the warehouse itself
    (the Parquet footer, BigQuery's partition row count) and from the block headers of the Avro
    files the done file lists."""
    rel = done_file_path(dataset, table, hour_from_tag(hour))
    where = f"{dataset}.{table} hour {hour}"
    try:
        content = store.read_bytes(rel)
    except FileNotFoundError:
        return False, f"{where}: no done file ({rel}): nothing landed for this hour", {}
    try:
        raw = json.loads(content)
    except ValueError:
        return False, f"{where}: done file {rel} is not JSON", {}
    problems = done_file_problems(rel, raw)
    if problems:
        return False, "; ".join(problems), {}
    done = DoneFile.from_dict(raw)
    landed = 0
    for f in done.files:
        try:
            landed += store.avro_rows(f.path, counted=f.counted)
        except FileNotFoundError:
            return False, f"{where}: listed file {f.path} is missing: re-land the hour", {"done_file": rel}
        except AvroFileError as exc:
            return False, f"{where}: listed file {f.path} is not a whole Avro file ({exc}): re-land the hour", {}
    loaded = warehouse.loaded(dataset, table, hour)
    rows = warehouse.hour_rows(dataset, table, hour)
    sha = content_sha(content)
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
        return False, (f"{where}: the hour {warehouse.hour_location(dataset, table, hour)} is missing, "
                       f"the load recorded {loaded['rows']} rows: reload the hour"), metadata
    got = rows or 0
    if got != landed:
        return False, (f"{where}: {got} rows in the warehouse, {landed} landed "
                       f"({warehouse.hour_location(dataset, table, hour)}): reload the hour"), metadata
    return True, f"{where}: {got} rows, as landed", metadata


def build_table_checks(cfg: TopicConfig, table: str) -> list:
    key = warehouse_key(cfg.dataset, table)

    @asset_check(asset=key, name=CONSERVATION, partitions_def=topic_hours(cfg),
                 description="Warehouse rows of the hour (Parquet footer, or BigQuery's partition row count) = "
                             "landed rows (Avro block headers of the files the done file lists). Re-run it for "
                             "any hour: it reads what is there now.")
    def _conservation(context: AssetCheckExecutionContext, landing: LandingResource, warehouse: WarehouseResource):
        store = landing.store()
        backend = warehouse.backend(store)
        results = {k: hour_conservation(store, backend, cfg.dataset, table, hour_tag(hour_from_key(k)))
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
        behind = hours_behind(landed_hours(store, cfg.dataset, table),
                              warehouse.backend(store).loaded_hours(cfg.dataset, table),
                              datetime.now(timezone.utc), cfg.grace_minutes)
        pending = [p.hour for p in list_pending(store, cfg.dataset, table)]
        metadata = {
            "hours_behind": behind.hours,
            "first_landed_hour": behind.first_landed_hour or "",
            "last_closed_hour": behind.last_closed_hour or "",
            "oldest_missing_hour": behind.missing[0] if behind.missing else "",
            "missing_hours": MetadataValue.json(list(behind.missing[:MISSING_SHOWN])),
            "reload_pending": len(pending),
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
                             "landing hour in it has all its landed rows in exactly one event partition.")
    def _conservation_by_event(context: AssetCheckExecutionContext, landing: LandingResource,
                               warehouse: WarehouseResource):
        store = landing.store()
        c = event_conservation(store, warehouse.backend(store), cfg, table, context.partition_key)
        # Off only where another partition waits for its next version: a warning until it is loaded.
        return AssetCheckResult(passed=c.ok, severity=AssetCheckSeverity.WARN if c.waiting else AssetCheckSeverity.ERROR,
                                description=c.why, metadata={k: MetadataValue.json(v) if isinstance(v, (dict, list))
                                                             else v for k, v in c.metadata.items()})

    @asset_check(asset=key, name=SETTLED, partitions_def=partitions,
                 description=f"No landing hour changed the partition for {cfg.settle_hours} h (settle_hours) and none "
                             "waits to: late records may still amend a partition that is not settled.")
    def _settled(context: AssetCheckExecutionContext, landing: LandingResource):
        store = landing.store()
        s = settling(store, cfg.dataset, table, context.partition_key, cfg.settle_hours)
        return AssetCheckResult(passed=s.settled, severity=AssetCheckSeverity.WARN, description=s.why,
                                metadata={"settles_at": s.settles_at or "", "settle_hours": cfg.settle_hours})

    return [_conservation_by_event, _settled]


def build_warehouse_checks(config) -> list:
    """Every table's checks, and its event-time table's."""
    return [*(c for cfg in config.topics.values() for table in cfg.tables for c in build_table_checks(cfg, table)),
            *(c for cfg in config.topics.values() if cfg.event_granularity for table in cfg.tables
              for c in build_event_checks(cfg, table))]
