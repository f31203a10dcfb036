"""Layer 3, `warehouse/<dataset>/<table>`: each hour's partition of a table,
replaced atomically from the files its done file lists, and two checks per table:

- `conservation` (per hour, ERROR): warehouse rows (the hour's Parquet footer) =
  landed rows (the Avro block headers of the files the done file lists). A
  partitioned check, so it runs with every load and can be re-run for any hour
  from the UI: it reads what is on disk now, so a truncated or replaced hour fails.
- `hours_behind` (WARN): closed hours (hour end + the topic's grace passed) not
  loaded, counted from the table's first landed hour (hours before a table's
  first data are not "behind"; every closed hour after it is, landed or not).
  It runs with every load, so a gap shows as soon as a later hour loads.

The freshness policy stays time-based (warn 2 h, fail 3 h without a load):
Dagster 1.13's `FreshnessPolicy` can only be a time window or a cron deadline
on the last materialisation, not on a count of partitions, and it is the only
signal that needs no run: when loads stop altogether nothing re-runs
`hours_behind`, but the policy goes red by itself.
"""

import json
from datetime import datetime, timedelta, timezone

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    Failure,
    FreshnessPolicy,
    MetadataValue,
    asset,
    asset_check,
)
from dagster_pyspark import LazyPySparkResource

from kafka_landing.avro_files import AvroFileError, count_records
from kafka_landing.avro_landing.assets import landing_key
from kafka_landing.done_checks import DoneFileMismatch, done_file_problems
from kafka_landing.load_queue import content_sha, hours_behind, landed_hours, list_pending
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import done_file_path, hour_from_key, hour_from_tag, hour_tag
from kafka_landing.parquet_warehouse import IncompatibleSchemaError, LoadError, ParquetWarehouse
from kafka_landing.partitions import hourly, run_hours, single_run
from kafka_landing.resources import LandingResource
from kafka_landing.topic_config import LandingConfig, TopicConfig

GROUP = "warehouse"
MISSING_SHOWN = 48  # missing hours listed in the check's metadata (the count is always whole)


def warehouse_key(dataset: str, table: str) -> AssetKey:
    return AssetKey([GROUP, dataset, table])


def build_warehouse_asset(cfg: TopicConfig, table: str):
    key = warehouse_key(cfg.dataset, table)

    @asset(
        key=key,
        deps=[landing_key(cfg.topic)],
        partitions_def=hourly,
        backfill_policy=single_run,
        # No Dagster pool: a run killed while loading would keep its slot, and every later
        # load of the table would wait for it forever. The warehouse's own lock serialises
        # loads of a table instead, and dies with the process that holds it.
        group_name=GROUP,
        kinds={"parquet", "spark"},
        description=f"Table `{cfg.dataset}.{table}`, one partition per landing hour, loaded from `{cfg.topic}`.",
        op_tags={"kafka_landing/spark": "true"},
        # Time-based (see the module docstring): warn after 2 hours without a load, fail at 3.
        freshness_policy=FreshnessPolicy.time_window(fail_window=timedelta(hours=3), warn_window=timedelta(hours=2)),
        metadata={"dataset": cfg.dataset, "table": table, "topic": cfg.topic},
    )
    def _table(context: AssetExecutionContext, landing: LandingResource, warehouse: ParquetWarehouse,
               pyspark: LazyPySparkResource):
        store = landing.store()

        def one_hour(partition_key: str):
            rel = done_file_path(cfg.dataset, table, hour_from_key(partition_key))
            if not store.exists(rel):
                raise Failure(description=f"no done file for {cfg.dataset}.{table} {hour_tag(hour_from_key(partition_key))}"
                                          f" ({rel}): land {landing_key(cfg.topic).to_user_string()} for that hour first")
            try:
                result = warehouse.load_done_file(pyspark.spark_session, store, rel)
            except DoneFileMismatch as exc:
                raise Failure(description=str(exc)) from None
            except (LoadError, IncompatibleSchemaError) as exc:
                raise Failure(description=f"{exc}. Nothing was loaded; the landing files are untouched.") from None
            if result.added_columns:
                context.log.warning(f"{cfg.dataset}.{table}: added nullable column(s) {list(result.added_columns)}")
            metadata = {
                "dagster/row_count": result.rows,
                "files_loaded": result.files,
                "schema_ids": MetadataValue.json(list(result.schema_ids)),
                "added_columns": MetadataValue.json(list(result.added_columns)),
                "done_file": result.done_file,
                "done_sha256": result.done_sha256,
                "path": MetadataValue.path(result.path),
            }
            return metadata, []

        return run_hours(context, key, one_hour)

    return _table


def hour_conservation(landing: LandingResource, warehouse: ParquetWarehouse, dataset: str, table: str,
                      hour: str) -> tuple[bool, str, dict]:
    """Warehouse rows of one hour against landed rows, both from what is on disk now:
    the Parquet footer, and the block headers of the Avro files the done file lists."""
    store = landing.store()
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
            landed += count_records(str(store.path(f.path)))
        except FileNotFoundError:
            return False, f"{where}: listed file {f.path} is missing: re-land the hour", {"done_file": rel}
        except AvroFileError as exc:
            return False, f"{where}: listed file {f.path} is not a whole Avro file ({exc}): re-land the hour", {}
    loaded = warehouse.loaded(dataset, table, hour)
    rows = warehouse.footer_rows(dataset, table, hour)
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
        return False, (f"{where}: the hour's Parquet file {warehouse.hour_file(dataset, table, hour)} is missing, "
                       f"the load recorded {loaded['rows']} rows: reload the hour"), metadata
    got = rows or 0
    if got != landed:
        return False, (f"{where}: {got} rows in the warehouse, {landed} landed "
                       f"(file {warehouse.hour_file(dataset, table, hour)}): reload the hour"), metadata
    return True, f"{where}: {got} rows, as landed", metadata


def build_warehouse_checks(cfg: TopicConfig, table: str) -> list:
    key = warehouse_key(cfg.dataset, table)

    @asset_check(asset=key, name="conservation", partitions_def=hourly,
                 description="Warehouse rows of the hour (Parquet footer) = landed rows (Avro block headers of the "
                             "files the done file lists). Re-run it for any hour: it reads what is on disk now.")
    def _conservation(context: AssetCheckExecutionContext, landing: LandingResource, warehouse: ParquetWarehouse):
        results = {k: hour_conservation(landing, warehouse, cfg.dataset, table, hour_tag(hour_from_key(k)))
                   for k in sorted(context.partition_keys)}
        failed = {k: why for k, (ok, why, _) in results.items() if not ok}
        if len(results) == 1:
            ((k, (ok, why, metadata)),) = results.items()
            return AssetCheckResult(passed=ok, description=why, metadata=metadata)
        return AssetCheckResult(
            passed=not failed,
            description=(f"failed in {len(failed)} of {len(results)} hours" if failed
                         else f"passed in all {len(results)} hours"),
            metadata={"hours": len(results), "failed_hours": MetadataValue.json(failed)},
        )

    @asset_check(asset=key, name="hours_behind",
                 description=f"Closed hours (hour end + {cfg.grace_minutes} min grace) of {cfg.dataset}.{table} not "
                             "loaded, from its first landed hour on. Warns from one hour behind.")
    def _hours_behind(landing: LandingResource, warehouse: ParquetWarehouse):
        store = landing.store()
        behind = hours_behind(landed_hours(store, cfg.dataset, table), warehouse.loaded_hours(cfg.dataset, table),
                              datetime.now(timezone.utc), cfg.grace_minutes)
        pending = [p.hour for p in list_pending(store, cfg.dataset, table)]
        metadata = {
            "hours_behind": behind.hours,
            "first_hour": behind.first_hour or "",
            "last_closed_hour": behind.last_closed_hour or "",
            "oldest_missing_hour": behind.missing[0] if behind.missing else "",
            "missing_hours": MetadataValue.json(list(behind.missing[:MISSING_SHOWN])),
            "reload_pending": len(pending),
        }
        if behind.first_hour is None:
            why = f"{cfg.dataset}.{table}: nothing landed yet"
        elif behind.hours:
            why = (f"{cfg.dataset}.{table} is {behind.hours} closed hour(s) behind (oldest {behind.missing[0]}): "
                   "land the missing hours and check the done-file sensor's log for failed loads")
        else:
            why = f"{cfg.dataset}.{table}: every closed hour from {behind.first_hour} to {behind.last_closed_hour} is loaded"
        return AssetCheckResult(passed=behind.hours == 0, severity=AssetCheckSeverity.WARN, description=why,
                                metadata=metadata)

    return [_conservation, _hours_behind]


def build_warehouse_assets(config: LandingConfig) -> list:
    """Each table's asset and its checks (Definitions takes checks among the assets)."""
    out = []
    for cfg in config.topics.values():
        for table in cfg.tables:
            out += [build_warehouse_asset(cfg, table), *build_warehouse_checks(cfg, table)]
    return out


def load_run_defs(defs, keys, checks: tuple[str, ...] = ("conservation",)) -> list:
    """What `materialize()` needs to run a load as the sensor's run would: the tables'
    assets and their named checks (checks are separate definitions)."""
    keys = set(keys)
    return [*(defs.get_assets_def(k) for k in sorted(keys)),
            *(defs.get_asset_checks_def(ck) for ck in sorted(defs.resolve_asset_graph().asset_check_keys)
              if ck.asset_key in keys and ck.name in checks)]
