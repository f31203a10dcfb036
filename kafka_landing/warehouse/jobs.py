"""The `retire_hours` job: empties, in the warehouse, hours that a routing change retired, and
versions again without them the event partitions those hours fed.

Why a job and not an asset: a retired table is in no topic's config any more (the topic now
feeds another table), so no asset exists to load it. Its retired done files list no file; loading
one through the same `load_done_file` as any hour replaces the hour with nothing (Parquet: the
hour's file removed; BigQuery: the partition deleted), records that content as loaded and clears
its pending marker. The retired-hours sensor requests it; a person can launch it from the UI
with the done files to retire. Event partitions of such a table (`<ds>.<t>__by_event/<partition>`)
are loaded through the same `load_unit` as the event asset's: a new version from the done files as
they stand, which no longer list the re-landed hours' records.
"""

# No `from __future__ import annotations`: Dagster reads the op's annotations at decoration time.

from dagster import Config, OpExecutionContext, job, op

from pydantic import Field

from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.manifests import DoneFileError, read_done_file
from kafka_landing.hours import failure
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.handoff.units import LoadUnit, event_unit
from kafka_landing.naming import EVENT_TABLE_SUFFIX
from kafka_landing.warehouse.event_load import retired_source
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
        try:  # the factory, not a session: only the Parquet backend starts Spark, once per run
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
