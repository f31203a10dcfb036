"""The `retire_hours` job: empties, in the warehouse, hours that a routing change retired, and
versions again without them the event partitions those hours fed.

Why a job and not an asset: a retired table is in no topic's config any more (the topic now
feeds another table), so no asset exists to load it. Its retired done files list no file; loading
one through the same `load_done_file` as any hour replaces the hour with nothing (Iceberg: the
hour's files dropped in a commit; BigQuery: the partition deleted), records that content as loaded and clears
its pending marker. The retired-hours sensor requests it; a person can launch it from the UI
with the done files to retire. Event partitions of such a table (`<ds>.<t>__by_event/<partition>`)
are loaded through the same `load_unit` as the event asset's: a new version from the done files as
they stand, which no longer list the re-landed hours' records.
"""

# No `from __future__ import annotations`: Dagster reads the op's annotations at decoration time.

from datetime import timedelta

from dagster import AssetObservation, Config, DefaultScheduleStatus, OpExecutionContext, ScheduleDefinition, job, op

from pydantic import Field

from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.manifests import DoneFileError, read_done_file
from kafka_landing.hours import SPARK_TAG, failure
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.handoff.units import LoadUnit, event_unit
from kafka_landing.naming import EVENT_TABLE_SUFFIX
from kafka_landing.warehouse.assets import event_key, warehouse_key
from kafka_landing.warehouse.by_event.load import retired_source
from kafka_landing.warehouse.load import LoadError, load_done_file, load_unit
from kafka_landing.warehouse.resources import WarehouseResource

RETIRE_JOB = "retire_hours"


class RetireConfig(Config):
    done_files: list[str] = Field(default=[], description="Retired done files to load as empty hours, relative to the "
                                  "landing root: tables/<dataset>/<table>/hour=<YYYY-MM-DDTHH>/_DONE.json")
    event_partitions: list[str] = Field(default=[], description="Event partitions of tables in no topic's config to "
                                        "version and load again: <dataset>.<table>__by_event/<YYYY-MM-DD[THH]> or "
                                        "/__unknown__<YYYY-MM-DD> (a landing day's records with no usable event time)")


def event_partition_unit(name: str) -> LoadUnit:
    """`<dataset>.<table>__by_event/<partition>` (as the run tag names it) as a load unit."""
    table, _, partition = name.rpartition("/")
    dataset, _, etable = table.partition(".")
    if not (dataset and etable.endswith(EVENT_TABLE_SUFFIX) and partition):
        raise failure(LoadError(f"{RETIRE_JOB}: {name!r} is not an event partition: write "
                                f"<dataset>.<table>{EVENT_TABLE_SUFFIX}/<YYYY-MM-DD>"))
    try:
        return event_unit(dataset, etable[:-len(EVENT_TABLE_SUFFIX)], partition)
    except ValueError as exc:
        raise failure(LoadError(f"{RETIRE_JOB}: {name!r}: {exc}")) from None


@op(description="Empties the warehouse hours of retired done files (a table a re-landed hour no longer feeds), and "
                 "versions again the event partitions they fed.")
def retire_hours_op(context: OpExecutionContext, config: RetireConfig, landing: LandingResource,
                    warehouse: WarehouseResource, pyspark: SparkResource) -> None:
    store = landing.store()
    backend = warehouse.backend(store)
    for rel in config.done_files:
        try:
            done, _ = read_done_file(store, rel)
        except DoneFileError as exc:
            if exc.gone:
                raise failure(LoadError(f"{RETIRE_JOB}: done file {store.location(rel)} does not exist: nothing to "
                                        "retire (check the path in the run config)")) from None
            raise failure(DoneFileError(f"{RETIRE_JOB}: {exc}", transient=exc.transient)) from None
        if not done.retired:
            raise failure(LoadError(
                f"{RETIRE_JOB}: done file {store.location(rel)} is not retired (it lists {done.rows} rows), so it "
                "was not loaded: load it through its table's asset, or re-land its topic's hour to retire it"))
        try:  # the factory, not a session: only a backend that needs Spark starts it, once per run
            result = load_done_file(backend, store, rel, lambda: pyspark.spark_session)
        except KafkaLandingError as exc:  # transient or not, as the error says (a BigQuery 5xx is)
            raise failure(exc) from None
        context.log.info(f"{result.table} {result.partition}: emptied at {result.location} ({done.retired})")
    for name in config.event_partitions:
        unit = event_partition_unit(name)
        try:
            ev = load_unit(backend, store, unit, lambda: pyspark.spark_session, retired_source(store, unit))
        except KafkaLandingError as exc:
            raise failure(exc) from None
        context.log.info(f"{unit}: version {ev.manifest.version}, {ev.manifest.rows} rows, at {ev.location}")


@job(description="Empties warehouse hours whose done files a routing change retired; requested by the "
                 "retired-hours sensor.")
def retire_hours():
    retire_hours_op()


# --- Iceberg upkeep ----------------------------------------------------------------------------------

UPKEEP_JOB = "iceberg_upkeep"


class UpkeepConfig(Config):
    keep_hours: int = Field(default=168, ge=1, description="Snapshots younger than this stay (time travel, and a "
                            "load killed after its commit); older ones expire, and the files only they list are "
                            "removed. Keep it above the topics' settle_hours if readers time-travel to settled days.")
    compact_after_hours: int = Field(default=24, ge=0, description="A table's day (a landing day, or an event day or "
                                     "hour) that ended this long ago and holds more than one data file is rewritten "
                                     "as one file (the same rows, one commit); a late record's file, or an hour "
                                     "landed again, is compacted again later.")


@op(description="Compacts the tables' finished days, expires the Iceberg tables' old snapshots and removes "
                 "the files no kept snapshot lists.")
def iceberg_upkeep_op(context: OpExecutionContext, config: UpkeepConfig, landing: LandingResource,
                      warehouse: WarehouseResource, pyspark: SparkResource) -> None:
    from kafka_landing.warehouse.iceberg import IcebergWarehouse, upkeep

    backend = warehouse.backend(landing.store())
    if not isinstance(backend, IcebergWarehouse):
        raise failure(LoadError(f"{UPKEEP_JOB}: the warehouse is {backend.kind}, not Iceberg: nothing to upkeep"))
    try:
        done = upkeep(backend, timedelta(hours=config.keep_hours), spark=lambda: pyspark.spark_session,
                      compact_after=timedelta(hours=config.compact_after_hours))
    except KafkaLandingError as exc:
        raise failure(exc) from None
    for u in done:
        dataset, _, table = u.table.partition(".")
        key = (event_key(dataset, table[:-len(EVENT_TABLE_SUFFIX)]) if table.endswith(EVENT_TABLE_SUFFIX)
               else warehouse_key(dataset, table))
        context.log_event(AssetObservation(asset_key=key, metadata={
            "snapshots_expired": u.snapshots_expired, "snapshots_kept": u.snapshots_kept,
            "files_removed": u.files_removed, "bytes_removed": u.bytes_removed, "keep_hours": config.keep_hours,
            "partitions_compacted": u.partitions_compacted, "files_compacted": u.files_compacted}))
        context.log.info(f"{u.table}: {u.partitions_compacted} partition(s) compacted from {u.files_compacted} "
                         f"file(s), {u.snapshots_expired} snapshot(s) expired, {u.snapshots_kept} kept, "
                         f"{u.files_removed} file(s) removed ({u.bytes_removed} bytes)")


@job(description="Compacts the tables' finished days, expires old snapshots of the Iceberg warehouse's "
                 "tables and removes the files only they listed; daily by its schedule.", tags={SPARK_TAG: "true"})
def iceberg_upkeep():
    iceberg_upkeep_op()


iceberg_upkeep_daily = ScheduleDefinition(
    name="iceberg_upkeep_daily", job=iceberg_upkeep, cron_schedule="17 3 * * *", execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Daily at 03:17 UTC: the tables' finished days compacted, the Iceberg tables' snapshots "
                "older than a week expired and their files removed.")
