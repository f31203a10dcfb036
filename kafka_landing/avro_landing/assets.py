"""Layer 2, `avro_landing/<topic>`: each hour's records as Avro files per table,
dead letters beside them, and one done file per (table, hour) written last."""

import uuid

from dagster import (
    AssetExecutionContext,
    AssetKey,
    Config,
    MetadataValue,
    RetryPolicy,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from kafka_landing.avro_landing.checks import landing_check_specs, landing_checks
from kafka_landing.avro_landing.job import LandingResult, land_hours
from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.errors import LandingError, is_transient, transient_status
from kafka_landing.hours import SPARK_TAG, failure, history, run_hours, single_run, topic_hours
from kafka_landing.kafka_slices.assets import slice_key
from kafka_landing.kafka_slices.freeze import frozen_slice
from kafka_landing.kafka_slices.kafka_log import KafkaUnavailable
from kafka_landing.kafka_slices.plan import (
    RETENTION_AFTER_FREEZING,
    LogRewoundError,
    SlicePlan,
    check_same_topic,
    without_deleted,
)
from kafka_landing.naming import (
    ONE_HOUR,
    asset_safe,
    dead_letter_dir,
    done_file_path,
    hour_from_key,
    hour_from_tag,
    table_hour_dir,
)
from kafka_landing.resources import (
    KafkaResource,
    LandingResource,
    SchemaRegistryResource,
)

GROUP = "avro_landing"


def landing_key(topic: str) -> AssetKey:
    return AssetKey([GROUP, asset_safe(topic)])


def check_still_in_kafka(log, plan: SlicePlan, marks: dict[int, tuple[int, int]] | None = None,
                         skip_retention_gaps: bool = False) -> SlicePlan:
    """The slice to land: offsets retention deleted, or a log re-created below the slice, since the
    slice was frozen are a clear error before Spark starts, not a short read; with
    `skip_retention_gaps` the deleted ranges are left out and recorded instead. `log`: a
    KafkaLogView, one for every hour of the run; `marks`: the watermarks already asked for."""
    marks = {} if marks is None else marks
    log_starts = {}
    for p in plan.partitions:
        if p.records == 0:
            continue
        if p.partition not in marks:
            marks[p.partition] = log.watermarks(plan.topic, p.partition)
        log_start, log_end = marks[p.partition]
        if p.start < log_start and not skip_retention_gaps:
            raise LandingError(
                f"topic {plan.topic!r} partition {p.partition}: offsets [{p.start}, {min(log_start, p.end)}) "
                f"of hour {plan.hour} were deleted by retention after the slice was frozen "
                f"(the log now starts at {log_start}). Nothing was landed. To land what Kafka still holds and "
                "record the loss in the done files, materialise the hour with skip_retention_gaps: true in the "
                "landing run config."
            )
        log_starts[p.partition] = log_start
        if log_end < p.end:
            raise LandingError(
                f"topic {plan.topic!r} partition {p.partition}: the slice of hour {plan.hour} holds offsets "
                f"[{p.start}, {p.end}) but the log now ends at {log_end}: the topic was deleted and "
                "re-created (or the partition truncated) after the slice was frozen. Nothing was landed; "
                "the landed files of this hour, if any, are untouched."
            )
    # After the watermarks: with the brokers away, those fail first and fast, as they always did.
    try:
        check_same_topic(plan.topic, log.topic_id(plan.topic), [plan], "Nothing was landed; the landed files of "
                         "this hour, if any, are untouched.")
    except LogRewoundError as exc:
        raise LandingError(str(exc)) from None
    return without_deleted(plan, log_starts)


class LandingRunConfig(Config):
    skip_retention_gaps: bool = False
    """Land what Kafka still holds of an hour whose offsets retention deleted after its slice was
    frozen; the deleted ranges are listed under `skipped` in the done files and counted by the
    conservation check."""


def preflight(store, registry: SchemaRegistryResource) -> None:
    """The landing root can be written and the registry answers, or a LandingError naming which one,
    where, and what to check: a run must not read a slice from Kafka to find that out."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from kafka_landing.avro_landing import registry_answers as answers

    try:
        store.check_writable()
    except OSError as exc:
        raise LandingError(f"landing root {store.root} cannot be written ({exc.strerror or exc}): check that "
                           "it exists, has space and that this process may write there (KAFKA_LANDING_ROOT). "
                           "Nothing was read or published.", transient=is_transient(exc)) from None
    where = answers.redact_url(registry.url)
    try:
        registry.client().get_subjects()
    except httpx.TransportError as exc:
        raise LandingError(
            f"schema registry {where} could not be reached ({type(exc).__name__}: "
            f"{answers.scrub(str(exc), registry.url)[:300] or 'no detail'}): check that it is running and reachable "
            "from here, and SCHEMA_REGISTRY_URL. Nothing was read or published.", transient=True) from None
    except SchemaRegistryError as exc:
        if exc.http_status_code in (401, 403) or (exc.http_status_code or 0) >= 500:
            raise LandingError(
                f"schema registry {where} answered HTTP {exc.http_status_code} to a list of its subjects: "
                + ("check the registry credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO)"
                   if exc.http_status_code in (401, 403) else "check its health and logs")
                + ". Nothing was read or published.",
                # 401/403 stay wrong until someone fixes the credentials; a 5xx may pass
                transient=transient_status(exc.http_status_code)) from None
        # Other answers (a registry that does not list subjects) are settled per schema id later.


def schema_fetcher(registry: SchemaRegistryResource):
    """Writer schemas by id, each asked once per run: the Avro schema text, or a DeadSchema (an id
    the registry says it does not have, or a PROTOBUF or JSON schema) whose records become dead
    letters. Any other answer, or none, raises RegistryError: it says nothing about the records,
    so the hour fails rather than turning good records into dead letters. A schema with Confluent
    schema references comes self-contained, each referenced (subject, version) asked once per run
    (soft-deleted versions too, as the registry's own clients do); one the registry says does not
    exist, or a cycle of them, makes the schema unlandable: a RegistryError that is not transient."""
    from confluent_kafka.schema_registry.common._httpx_compat import (
        httpx,  # the HTTP client it uses (httpx2 or httpx)
    )
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from kafka_landing.avro_landing import registry_answers as answers
    from kafka_landing.avro_landing import schema_references

    client, cache, referenced = registry.client(), {}, {}

    def reference_fetcher(schema_id: int):
        def get(subject: str, version: int):
            if (subject, version) not in referenced:
                what = f"subject {subject!r} version {version}, a reference of its schema"
                try:
                    found = client.get_version(subject, version, deleted=True)
                except SchemaRegistryError as exc:
                    # 40401, 40402: the registry says the subject, or its version, does not exist
                    if exc.http_status_code != 404 or exc.error_code not in (40401, 40402):
                        raise answers.answer_error(registry.url, schema_id, exc.http_status_code, exc.error_code,
                                                   f"{what}: {exc.error_message}") from None
                    referenced[subject, version] = None
                except httpx.TransportError as exc:  # refused, timed out, DNS, TLS
                    raise answers.unreachable_error(registry.url, schema_id, exc) from None
                except Exception as exc:  # noqa: BLE001 - e.g. a 200 that is not a registry's JSON
                    raise answers.answer_error(registry.url, schema_id, None, None,
                                               f"{what}: not a schema registry's answer ({type(exc).__name__}: {exc})"
                                               ) from None
                else:
                    referenced[subject, version] = (found.schema.schema_str, found.schema.references or ())
            return referenced[subject, version]

        return get

    def fetch(schema_id: int):
        if schema_id not in cache:
            try:
                schema = client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                if not answers.is_schema_not_found(exc.http_status_code, exc.error_code):
                    raise answers.answer_error(registry.url, schema_id, exc.http_status_code, exc.error_code,
                                               exc.error_message) from None
                cache[schema_id] = answers.DeadSchema(answers.UNKNOWN_SCHEMA_ID)
            except httpx.TransportError as exc:  # refused, timed out, DNS, TLS
                raise answers.unreachable_error(registry.url, schema_id, exc) from None
            except Exception as exc:  # noqa: BLE001 - e.g. a 200 that is not a registry's JSON
                raise answers.answer_error(registry.url, schema_id, None, None,
                                           f"not a schema registry's answer ({type(exc).__name__}: {exc})") from None
            else:
                kind = (schema.schema_type or "AVRO").upper()
                if kind != "AVRO":
                    cache[schema_id] = answers.DeadSchema(answers.not_avro_reason(schema_id, kind))
                else:
                    try:
                        cache[schema_id] = schema_references.self_contained(
                            schema.schema_str, schema.references, reference_fetcher(schema_id), schema_id)
                    except schema_references.SchemaReferenceError as exc:  # unlandable, as resolve_schemas says
                        raise answers.RegistryError(
                            f"{exc}. Nothing of the hour was published; re-landing it fails the same way while it "
                            f"holds records of schema id {schema_id}.", transient=False) from None
        return cache[schema_id]

    return fetch


def likely_schema_ids(store, registry: SchemaRegistryResource, cfg: TopicConfig, first_hour) -> tuple[int, ...]:
    """The schema ids the hours' records most likely carry, best first: the registry's latest for
    `<topic>-value`, then those of the hour before the run. Only a guess (see land_hours): any
    answer that is not one is ignored."""
    ids: list[int] = []
    try:
        ids.append(int(registry.client().get_latest_version(f"{cfg.topic}-value").schema_id))
    except Exception:  # noqa: BLE001 - another subject naming, or no registry answer: no guess from it
        pass
    for table in cfg.tables:
        done = store.read_json(done_file_path(cfg.dataset, table, first_hour - ONE_HOUR)) or {}
        ids += [int(i) for i in sorted(done.get("schema_ids", ()), reverse=True)]
    return tuple(dict.fromkeys(ids))


def landing_metadata(result: LandingResult, store, cfg: TopicConfig, plan: SlicePlan) -> dict:
    hour = hour_from_tag(plan.hour)
    schema_ids = sorted({s for d in result.done.values() for s in d.schema_ids})
    meta = {
        "dagster/row_count": result.rows,
        "records_read": result.records_read,
        # Offsets of the slice Kafka returned no record for: transaction markers, aborted records, compaction.
        "offsets_without_record": plan.records - result.records_read,
        # Deleted by retention after freezing, skipped on request (`skip_retention_gaps`): listed in the done files.
        "skipped_offsets": sum(s["end"] - s["start"] for s in plan.skipped if s["reason"] == RETENTION_AFTER_FREEZING),
        "rows_by_table": MetadataValue.json({t: d.rows for t, d in sorted(result.done.items())}),
        "dead_letters": result.dead_letters.rows,
        "dead_letters_by_reason": MetadataValue.json(result.dead_letters.by_reason),
        "schema_ids": MetadataValue.json(schema_ids),
        "files_written": sum(len(d.files) for d in result.done.values()) + len(result.dead_letters.files),
        "bytes_written": result.bytes_written,
        "seconds": round(result.seconds, 2),
        "landing_paths": MetadataValue.json(
            {t: store.location(table_hour_dir(cfg.dataset, t, hour)) for t in sorted(result.done)}
        ),
        "dead_letter_path": MetadataValue.path(store.location(dead_letter_dir(plan.topic, hour))),
    }
    if result.warnings:
        meta["warnings"] = MetadataValue.json(result.warnings)
    return meta


def build_landing_asset(cfg: TopicConfig, retry_policy: RetryPolicy | None = None):
    key = landing_key(cfg.topic)

    @asset(
        key=key,
        retry_policy=retry_policy,  # with one, only Failures with allow_retries (services briefly away) retry
        deps=[slice_key(cfg.topic)],
        partitions_def=topic_hours(cfg),
        backfill_policy=single_run,
        check_specs=landing_check_specs(key, topic_hours(cfg)),
        group_name=GROUP,
        kinds={"spark", "avro"},
        description=(
            f"Hourly Avro landing files of `{cfg.topic}` for {', '.join(f'{cfg.dataset}.{t}' for t in cfg.tables)}, "
            f"with dead letters and a done file per table; {history(cfg)}."
        ),
        tags={"kafka_landing/topic": asset_safe(cfg.topic)},
        op_tags={SPARK_TAG: "true"},
        metadata={"topic": cfg.topic, "dataset": cfg.dataset, "tables": ", ".join(cfg.tables)},
    )
    def _landing(
        context: AssetExecutionContext,
        kafka: KafkaResource,
        registry: SchemaRegistryResource,
        landing: LandingResource,
        pyspark: LazyPySparkResource,
        config: LandingRunConfig,
    ):
        store = landing.store()
        fetch = schema_fetcher(registry)  # one registry cache for every hour of the run

        def all_hours(partition_keys: list[str]) -> dict:
            # Fail fast, before Spark reads a single record: every service the hours need answers.
            try:
                preflight(store, registry)
            except LandingError as exc:  # a registry briefly away is tried again (run_hours), a bad root never
                return {k: failure(exc) for k in partition_keys}
            out: dict = {}
            plans: dict[str, SlicePlan] = {}  # as frozen: what the checks count against
            to_land: dict[str, SlicePlan] = {}  # less what retention deleted, when skipping it was asked for
            for k in partition_keys:
                plan = frozen_slice(store, cfg.topic, hour_from_key(k))
                if plan is None:
                    out[k] = failure(LandingError(f"the slice of {cfg.topic} for {k} is not frozen yet: materialise "
                                                  f"{slice_key(cfg.topic).to_user_string()} for that hour first"))
                else:
                    plans[k] = plan
            try:
                with kafka.log_view() as log:  # one consumer for every hour of the run
                    marks: dict[int, tuple[int, int]] = {}
                    for k, plan in list(plans.items()):
                        try:
                            to_land[k] = check_still_in_kafka(log, plan, marks, config.skip_retention_gaps)
                        except LandingError as exc:
                            out[k] = failure(exc)
                            del plans[k]
            except KafkaUnavailable as exc:
                return {**out, **{k: failure(KafkaUnavailable(f"{exc} Nothing was read or published for hour {p.hour}.",
                                                              transient=exc.transient))
                                  for k, p in plans.items()}}
            if not plans:
                return out
            attempt = f"{context.run_id[:8]}-{uuid.uuid4().hex[:8]}"
            first = min(hour_from_tag(p.hour) for p in plans.values())
            try:
                landed = land_hours(lambda: pyspark.spark_session, store, fetch, kafka.spark_options(), cfg,
                                    [to_land[k] for k in plans], attempt, likely_ids=likely_schema_ids(store, registry, cfg, first),
                                    log=context.log.info)
            except LandingError as exc:  # it concerns every hour of the pass
                return {**out, **{k: failure(exc) for k in plans}}
            for k, plan in plans.items():
                result = landed[plan.hour]
                if isinstance(result, LandingError):
                    out[k] = failure(result)
                    continue
                for w in result.warnings:
                    context.log.warning(w)
                context.log.info(f"{cfg.topic} {plan.hour}: read {result.records_read}, landed {result.rows}, "
                                 f"dead letters {result.dead_letters.rows}")
                out[k] = (landing_metadata(result, store, cfg, to_land[k]), landing_checks(result, store, cfg, plan))
            return out

        return run_hours(context, key, all_hours=all_hours)

    return _landing


def build_landing_assets(config: LandingConfig) -> list:
    return [build_landing_asset(cfg) for cfg in config.topics.values()]
