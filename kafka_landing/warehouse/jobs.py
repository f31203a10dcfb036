"""The `retire_hours` job: empties, in the warehouse, hours that a routing change retired.

Why a job and not an asset: a retired table is in no topic's config any more (the topic now
feeds another table), so no asset exists to load it. Its retired done files list no file; loading
one through the same `load_done_file` as any hour replaces the hour with nothing (Parquet: the
hour's file removed; BigQuery: the partition deleted), records that content as loaded and clears
its pending marker. The retired-hours sensor requests it; a person can launch it from the UI
with the done files to retire.
"""

# No `from __future__ import annotations`: Dagster reads the op's annotations at decoration time.

from dagster import Config, OpExecutionContext, job, op

from pydantic import Field

from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.manifests import DoneFileError, read_done_file
from kafka_landing.hours import failure
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing.warehouse.resources import WarehouseResource

RETIRE_JOB = "retire_hours"


class RetireConfig(Config):
    done_files: list[str] = Field(description="Retired done files to load as empty hours, relative to the landing "
                                              "root: tables/<dataset>/<table>/hour=<YYYY-MM-DDTHH>/_DONE.json")


@op(description="Empties the warehouse hours of retired done files (a table a re-landed hour no longer feeds).")
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
        context.log.info(f"{result.table} {result.hour}: emptied at {result.location} ({done.retired})")


@job(description="Empties warehouse hours whose done files a routing change retired; requested by the "
                 "retired-hours sensor.")
def retire_hours():
    retire_hours_op()
