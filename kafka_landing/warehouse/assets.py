"""Layer 3, `warehouse/<dataset>/<table>`: each hour's partition of a table,
replaced atomically from the files its done file lists, by the configured
backend (Iceberg or BigQuery, see `load.py`). The checks are in checks.py.

A run loads one hour or a range of them (the done-file sensor asks for a table's
consecutive ready hours in one run) through `run_hours`, with one
SparkResource: the Iceberg backend asks it for the session at its first
hour and every later hour of the run gets the same one, so a run opens a Spark
session at most once; the BigQuery backend never asks, so its runs start no JVM (and the
sensor gives them no `kafka_landing/spark` tag, so they take no Spark slot).

The freshness policy is a deadline every hour: the hourly schedule's tick plus a budget
(`hourly_schedule.deadline_cron`), by which the table must have been loaded since the
deadline before. Dagster 1.13's `FreshnessPolicy` looks at the last materialisation, not at
which partition it was (`hours_behind` counts those), and it is the only signal that needs
no run: when loads stop altogether nothing re-runs `hours_behind`, but the policy goes red
by itself at the next deadline.
"""

import functools

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    DynamicPartitionsDefinition,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    asset,
)

from kafka_landing import hourly_schedule
from kafka_landing.avro_landing.assets import landing_key
from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.errors import is_transient
from kafka_landing.hours import SPARK_TAG, failure, history, run_hours, single_run, topic_hours
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import EVENT_TIME_FROM, EVENT_TIME_UNTIL, ONE_HOUR, Hour, done_file_path, event_table
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.warehouse.load import (
    DoneFileMismatch,
    IncompatibleSchemaError,
    LoadError,
    LoadResult,
    StagedRun,
    load_done_file,
    load_unit,
    stage_done_files,
)
from kafka_landing.warehouse.by_event.load import EventLoad
from kafka_landing.warehouse.by_event.measures import Settling, settling, unknown_counts
from kafka_landing.warehouse.resources import WarehouseResource

GROUP = "warehouse"


def warehouse_key(dataset: str, table: str) -> AssetKey:
    return AssetKey([GROUP, dataset, table])


SPARK_WAREHOUSES = frozenset({"iceberg"})  # the backends whose loads run Spark


@functools.cache
def _deadline(grace_minutes: int) -> FreshnessPolicy:
    """One policy per grace, shared by its tables: Dagster checks a cron policy's interval by walking
    a thousand of its ticks, 6 ms each time, and every run's process builds every table's asset."""
    return FreshnessPolicy.cron(deadline_cron=hourly_schedule.deadline_cron(grace_minutes), lower_bound_delta=ONE_HOUR)


def build_warehouse_asset(cfg: TopicConfig, table: str, kind: str = "iceberg"):
    key = warehouse_key(cfg.dataset, table)

    @asset(
        key=key,
        deps=[landing_key(cfg.topic)],
        partitions_def=topic_hours(cfg),  # the topic's hours: a table shares its topic's history
        backfill_policy=single_run,
        # No Dagster pool: a run killed while loading would keep its slot, and every later
        # load of the table would wait for it forever. The warehouse's own lock serialises
        # loads of a table instead, and dies with the process that holds it.
        group_name=GROUP,
        kinds={kind, "spark"} if kind in SPARK_WAREHOUSES else {kind},
        description=f"Table `{cfg.dataset}.{table}`, loaded by landing hour from `{cfg.topic}`; {history(cfg)}.",
        op_tags={SPARK_TAG: "true"} if kind in SPARK_WAREHOUSES else {},
        # Each hour's deadline (see the module docstring): loaded within the hour before it.
        freshness_policy=_deadline(cfg.grace_minutes),
        metadata={"dataset": cfg.dataset, "table": table, "topic": cfg.topic},
    )
    def _table(context: AssetExecutionContext, landing: LandingResource, warehouse: WarehouseResource,
               pyspark: SparkResource):
        store = landing.store()
        backend = warehouse.backend(store)
        _writable(backend, f"{cfg.dataset}.{table}")
        staged = StagedRun()  # what the range's `prepare` staged: each of its hours' loads takes its part

        def one_hour(partition_key: str):
            hour = Hour.from_key(partition_key)
            rel = done_file_path(cfg.dataset, table, hour)
            if not store.exists(rel):
                raise failure(LoadError(f"no done file for {cfg.dataset}.{table} {hour} ({rel}): land "
                                        f"{landing_key(cfg.topic).to_user_string()} for that hour first"))
            try:  # the factory, not a session: only a backend that needs Spark starts it, once per run
                result = load_done_file(backend, store, rel, lambda: pyspark.spark_session, staged)
            except DoneFileMismatch as exc:
                raise failure(exc) from None
            except (LoadError, IncompatibleSchemaError) as exc:  # a load that fails changes nothing
                if exc.nothing_loaded:  # the raise site said so, with what to do next
                    raise failure(exc) from None
                raise failure(type(exc)(f"{exc}. Nothing was loaded; the landing files are untouched.",
                                        transient=exc.transient, nothing_loaded=True)) from None
            if result.added_columns:
                context.log.warning(f"{cfg.dataset}.{table}: added nullable column(s) {list(result.added_columns)}")
            for warning in result.warnings:
                context.log.warning(warning)
            return _hour_metadata(result), []

        def stage(keys: list[str]) -> str | None:  # a range's hours written in one Spark job, then each committed
            nonlocal staged
            staged = stage_done_files(backend, store, [done_file_path(cfg.dataset, table, Hour.from_key(k))
                                                       for k in keys], lambda: pyspark.spark_session)
            n = len(staged.committed)
            return f"{n} of {len(keys)} hours loaded together in one Spark job and one commit" if n else None

        return run_hours(context, key, one_hour, prepare=stage)

    return _table


def _hour_metadata(result: LoadResult) -> dict:
    """A landing hour's load, as its materialisation shows it."""
    return {
        "dagster/row_count": result.rows,
        "files_loaded": result.files,
        "schema_ids": MetadataValue.json(list(result.schema_ids)),
        "added_columns": MetadataValue.json(list(result.added_columns)),
        "done_file": result.done_file,
        "done_sha256": result.done_sha256,
        "location": MetadataValue.path(result.location),
        **({"job_id": result.job_id} if result.job_id else {}),
        **_version(result),
        **({"warnings": MetadataValue.json(list(result.warnings))} if result.warnings else {}),
    }


def _version(result: LoadResult | None) -> dict:
    """The table's version that holds the load (an Iceberg snapshot) and when it was committed: a
    reader sees the load from then on, and can read that version again (time travel)."""
    if result is None or result.snapshot_id is None:
        return {}
    return {"snapshot_id": str(result.snapshot_id), "committed_at": result.committed_at or ""}


def event_key(dataset: str, table: str) -> AssetKey:
    return AssetKey([GROUP, dataset, event_table(table)])


def event_partitions(dataset: str, table: str) -> DynamicPartitionsDefinition:
    """An event-time table's partitions: the event days (or hours) that have records, and the
    unknown partition of each landing day (`__unknown__2026-01-31`: records with no usable event
    time), added by the event sensor as landing hours bring them."""
    return DynamicPartitionsDefinition(name=f"{dataset}__{event_table(table)}")


def _writable(backend, name: str) -> None:
    try:  # once per run, before any partition: a warehouse that cannot be written fails fast, naming it
        backend.check_writable()
    except Exception as exc:  # noqa: BLE001 - each backend names its own service and what to check
        raise failure(LoadError(f"{name}: the {backend.kind} warehouse cannot be written: {exc}. Nothing was "
                                "loaded; the landing files are untouched.", transient=is_transient(exc),
                                nothing_loaded=True)) from None


def build_event_asset(cfg: TopicConfig, table: str, kind: str = "iceberg"):
    """The event-time table beside `table`: one partition per event day (or hour) and one per landing
    day for records with no usable event time (`__unknown__<landing day>`), each replaced whole from
    its newest manifest version (`warehouse/by_event`)."""
    key = event_key(cfg.dataset, table)
    granularity = cfg.event_granularity
    name = f"{cfg.dataset}.{event_table(table)}"

    @asset(
        key=key,
        # Any landing hour may feed any event day (late records): which ones, the manifests say.
        deps=[AssetDep(warehouse_key(cfg.dataset, table), partition_mapping=AllPartitionMapping())],
        partitions_def=event_partitions(cfg.dataset, table),
        group_name=GROUP,
        kinds={kind, "spark"} if kind in SPARK_WAREHOUSES else {kind},
        description=f"Table `{name}`: the records of `{cfg.dataset}.{table}` by event {granularity} "
                    f"(`{cfg.event_time_field}`), from every landing hour; a late record amends its partition "
                    f"as a new version, replaced whole. Final after {cfg.settle_hours} h without a change "
                    "(its `settled` check turns green).",
        op_tags={SPARK_TAG: "true"} if kind in SPARK_WAREHOUSES else {},
        metadata={"dataset": cfg.dataset, "table": event_table(table), "topic": cfg.topic,
                  "event_time_field": cfg.event_time_field, "event_time_partition": granularity},
    )
    def _by_event(context: AssetExecutionContext, landing: LandingResource, warehouse: WarehouseResource,
                  pyspark: SparkResource):
        store = landing.store()
        backend = warehouse.backend(store)
        _writable(backend, name)
        partition = context.partition_key
        try:  # the load step owns the markers: it refuses what failed for good, clears what loaded
            ev = load_unit(backend, store, event_unit(cfg.dataset, table, partition), lambda: pyspark.spark_session,
                           cfg)
        except KafkaLandingError as exc:
            raise failure(exc) from None
        settle = settling(store, ev.manifest, ev.waiting, cfg.settle_hours)
        _log_event_load(context, f"{name} {partition}", ev)
        return MaterializeResult(metadata=_event_metadata(ev, settle, store.location(ev.manifest.path)))

    return _by_event


def _log_event_load(context: AssetExecutionContext, name: str, ev: EventLoad) -> None:
    """What a person should know of an event partition's load, and what it did."""
    m = ev.manifest
    for warning in ev.warnings:
        context.log.warning(warning)
    unknown = unknown_counts(m)
    if unknown.get("sentinel_time_rows"):
        context.log.warning(f"{name}: {unknown['sentinel_time_rows']} record(s) with a sentinel event time (outside "
                            f"{EVENT_TIME_FROM[:10]}..{EVENT_TIME_UNTIL[:10]}: "
                            f"{', '.join(unknown['sentinel_event_hours'])}) are here, with the records that have no "
                            "event time")
    if ev.result is not None:
        for warning in ev.result.warnings:
            context.log.warning(warning)
        if ev.result.added_columns:
            context.log.warning(f"{name}: added nullable column(s) {list(ev.result.added_columns)}")
    change = ("unchanged" if not ev.new_version else f"new, amends version {m.version - 1}" if m.amended
              else "new, its first")
    context.log.info(f"{name}: version {m.version} ({change}), {m.rows} rows from {len(m.hours)} landing hour(s); "
                     f"{'loaded' if ev.result else 'already loaded'} at {ev.location}")


def _event_metadata(ev: EventLoad, settle: Settling, manifest_location: str) -> dict:
    """An event partition's load, as its materialisation shows it: `new_version`, this load wrote a
    version; `amended`, the partition changed after its first version."""
    m = ev.manifest
    return {
        "dagster/row_count": m.rows,
        "version": m.version,
        "new_version": ev.new_version,
        "amended": m.amended,
        "amended_at": m.amended_at,
        "created_at": m.created_at or m.amended_at,
        "changed_hours": MetadataValue.json(list(m.changed_hours)),
        "landing_hours": MetadataValue.json({h: part["rows"] for h, part in m.hours.items()}),
        "settled": settle.settled,
        "settles_at": settle.settles_at or "",
        "manifest": MetadataValue.path(manifest_location),
        "manifest_sha256": m.sha256,
        "location": MetadataValue.path(ev.location),
        **{k: MetadataValue.json(v) if isinstance(v, dict) else v for k, v in unknown_counts(m).items()},
        **({"job_id": ev.result.job_id} if ev.result and ev.result.job_id else {}),
        **_version(ev.result),
    }


def build_warehouse_assets(config: LandingConfig, kind: str = "iceberg") -> list:
    """Each table's asset, and its event-time table's where its topic has one (checks: checks.py)."""
    return [*(build_warehouse_asset(cfg, table, kind) for cfg in config.topics.values() for table in cfg.tables),
            *(build_event_asset(cfg, table, kind) for cfg in config.topics.values() if cfg.event_granularity
              for table in cfg.tables)]
