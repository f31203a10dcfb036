"""Layer 2, `avro_landing/<topic>`: each hour's records as Avro files per table,
dead letters beside them, and one done file per (table, hour) written last."""

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable

from dagster import (
    AssetExecutionContext,
    AssetKey,
    Config,
    MetadataValue,
    RetryPolicy,
    asset,
)

from kafka_landing.avro_landing.checks import landing_check_specs, landing_checks
from kafka_landing.avro_landing.registry import likely_schema_ids, preflight, schema_fetcher
from kafka_landing.config import LandingConfig, TopicConfig
from kafka_landing.errors import LandingError
from kafka_landing.hours import SPARK_TAG, failure, history, run_hours, single_run, topic_hours
from kafka_landing.kafka_slices.assets import slice_key
from kafka_landing.kafka_slices.freeze import frozen_slice
from kafka_landing.kafka_slices.kafka_log import KafkaUnavailable
from kafka_landing.kafka_slices.plan import (
    RETENTION_AFTER_FREEZING,
    SlicePlan,
    check_still_in_kafka,
)
from kafka_landing.kafka_slices.resources import KafkaResource
from kafka_landing.naming import (
    asset_safe,
    dead_letter_dir,
    Hour,
    table_hour_dir,
)
from kafka_landing.resources import (
    LandingResource,
    SchemaRegistryResource,
    SparkResource,
)
from kafka_landing.store.base import LandingStore

if TYPE_CHECKING:  # the landing job imports Spark: a run loads it when it lands (`LandingPass.land`), not the code location
    from kafka_landing.avro_landing.job import LandingResult

GROUP = "avro_landing"


def landing_key(topic: str) -> AssetKey:
    return AssetKey([GROUP, asset_safe(topic)])


class LandingSource(Enum):
    """Where a landing reads an hour's records. Lower case: Dagster's config takes a member's name,
    and the launchpad then reads `source: archive`."""

    kafka = "kafka"  # the frozen offsets, from Kafka (the default)
    archive = "archive"  # the hour's landing files and dead letters, as landed before (archive.py)
    auto = "auto"  # Kafka where it still holds the hour's offsets, the archive where it does not


class LandingRunConfig(Config):
    source: LandingSource = LandingSource.kafka
    """Where the hours' records are read: `archive` lands an hour again from its landed files and dead
    letters under today's topic config (routing, tables, event time, schemas now in the registry),
    for hours retention took from Kafka; `auto` reads Kafka where it still holds the hour."""
    skip_retention_gaps: bool = False
    """Land what Kafka still holds of an hour whose offsets retention deleted after its slice was
    frozen; the deleted ranges are listed under `skipped` in the done files and counted by the
    conservation check."""


def landing_metadata(result: "LandingResult", store, cfg: TopicConfig, plan: SlicePlan) -> dict:
    hour = plan.hour
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
    if result.archived is not None:
        before = result.archived.dead_letters
        meta["source"] = "archive"
        meta["archived_attempt"] = result.archived.attempt
        # Dead letters of the archive that landed now (a schema registered since, a decoder fixed).
        meta["dead_letters_redriven"] = max(0, before.rows - result.dead_letters.rows)
        meta["dead_letters_before"] = MetadataValue.json(before.by_reason)
    else:
        meta["source"] = "kafka"
    if result.warnings:
        meta["warnings"] = MetadataValue.json(result.warnings)
    return meta


@dataclass
class LandingPass:
    """The hours of one asset run (partition keys), landed in one pass in the order the data flows:
    the services answer, each hour's frozen slice, what Kafka still holds of it, the landing, what
    each hour reports. Called with the keys still to do: {key: (metadata, checks) or failure}."""

    context: AssetExecutionContext
    cfg: TopicConfig
    store: LandingStore
    kafka: KafkaResource
    registry: SchemaRegistryResource
    pyspark: SparkResource
    skip_retention_gaps: bool
    source: LandingSource = LandingSource.kafka
    fetch: Callable[[int], object] = field(init=False)

    def __post_init__(self):
        self.fetch = schema_fetcher(self.registry)  # one registry cache for every hour of the run

    def __call__(self, partition_keys: list[str]) -> dict:
        # Fail fast, before Spark reads a single record: every service the hours need answers.
        try:
            preflight(self.store, self.registry)
        except LandingError as exc:  # a registry briefly away is tried again (run_hours), a bad root never
            return {k: failure(exc) for k in partition_keys}
        out: dict = {}
        plans = self.frozen(partition_keys, out)  # as frozen: what the checks count against
        gone: dict[str, str] = {}  # hours read from their archive: why not from Kafka
        try:
            if self.source is LandingSource.archive:
                to_land, compacted = {}, False
                gone = dict.fromkeys(plans, "source: archive")
            else:
                to_land, compacted = self.still_in_kafka(plans, out, gone if self.source is LandingSource.auto else None)
        except KafkaUnavailable as exc:
            return {**out, **{k: failure(KafkaUnavailable(f"{exc} Nothing was read or published for hour {p.hour}.",
                                                          transient=exc.transient))
                              for k, p in plans.items()}}
        archived = self.archived(plans, gone, out)
        if not plans:
            return out
        landed: dict = {}
        # Two runs at most: the hours Kafka holds, then those read from their archive.
        for keys, archives in (([k for k in plans if k in to_land], ()), (sorted(archived), tuple(archived.values()))):
            if not keys:
                continue
            try:
                landed.update(self.land([to_land[k] if k in to_land else archived[k].plan for k in keys],
                                        compacted and not archives, archives))
            except LandingError as exc:  # it concerns every hour of that run
                out.update({k: failure(exc) for k in keys})
        for k, plan in plans.items():
            if k not in out:
                out[k] = self.reported(landed[plan.hour], plan, to_land[k] if k in to_land else archived[k].plan)
        return out

    def frozen(self, partition_keys: list[str], out: dict) -> dict[str, SlicePlan]:
        """{key: the hour's frozen slice}; an hour not frozen yet fails, in `out`."""
        plans: dict[str, SlicePlan] = {}
        for k in partition_keys:
            plan = frozen_slice(self.store, self.cfg.topic, Hour.from_key(k))
            if plan is None:
                out[k] = failure(LandingError(f"the slice of {self.cfg.topic} for {k} is not frozen yet: materialise "
                                              f"{slice_key(self.cfg.topic).to_user_string()} for that hour first"))
            else:
                plans[k] = plan
        return plans

    def still_in_kafka(self, plans: dict[str, SlicePlan], out: dict,
                       gone: dict[str, str] | None = None) -> tuple[dict[str, SlicePlan], bool]:
        """({key: the slice to land}, whether the topic is compacted): each slice less what retention
        deleted, when skipping it was asked for. An hour Kafka no longer holds goes to `gone` with
        why, where given (the topic deleted: every hour); else it fails, in `out`, and leaves `plans`."""
        to_land: dict[str, SlicePlan] = {}
        with self.kafka.log_view() as log:  # one consumer for every hour of the run
            if gone is not None and log.partitions(self.cfg.topic) is None:
                gone.update(dict.fromkeys(plans, f"topic {self.cfg.topic!r} is not in Kafka"))
                return to_land, False
            compacted = log.compacted(self.cfg.topic)
            marks: dict[int, tuple[int, int]] = {}
            for k, plan in list(plans.items()):
                try:
                    to_land[k] = check_still_in_kafka(log, plan, marks, self.skip_retention_gaps)
                except LandingError as exc:
                    if gone is not None:
                        gone[k] = str(exc)
                        continue
                    out[k] = failure(exc)
                    del plans[k]
        return to_land, compacted

    def archived(self, plans: dict[str, SlicePlan], gone: dict[str, str], out: dict) -> dict:
        """{key: the hour's archive} of the hours in `gone`; an hour whose archive is refused fails, in
        `out` (with why Kafka could not serve it, for `auto`), and leaves `plans`."""
        from kafka_landing.avro_landing.archive import ArchiveError, find_archive

        found = {}
        for k in sorted(gone):
            try:
                found[k] = find_archive(self.store, plans[k])
            except ArchiveError as exc:
                why = "" if self.source is LandingSource.archive else f" Kafka could not serve it either: {gone[k]}"
                out[k] = failure(LandingError(f"{exc}{why}"))
                del plans[k]
            else:
                self.context.log.info(f"{self.cfg.topic} {plans[k].hour}: landing from its archive (attempt "
                                      f"{found[k].attempt}, {found[k].records} records)"
                                      + ("" if self.source is LandingSource.archive else f": {gone[k]}"))
        return found

    def land(self, plans: list[SlicePlan], compacted: bool,
             archives: tuple = ()) -> "dict[str, LandingResult | LandingError]":
        """The slices landed in one run: from Kafka, or from `archives` (the same decode, routing and
        checks; Kafka is not read)."""
        from kafka_landing.avro_landing.job import HoursToLand, Sources, land_hours

        attempt = f"{self.context.run_id[:8]}-{uuid.uuid4().hex[:8]}"
        first = min(p.hour for p in plans)
        sources = Sources(lambda: self.pyspark.spark_session, {} if archives else self.kafka.spark_options(), self.fetch)
        hours = HoursToLand(self.cfg, plans, attempt, likely_ids=likely_schema_ids(self.store, self.registry, self.cfg,
                                                                                 first),
                            snapshot=compacted, archives=archives)
        return land_hours(sources, self.store, hours, log=self.context.log.info)

    def reported(self, result: "LandingResult | LandingError", plan: SlicePlan, landed: SlicePlan):
        """The hour's metadata and checks (`plan` as frozen, `landed` less what was skipped), or its failure."""
        if isinstance(result, LandingError):
            return failure(result)
        for w in result.warnings:
            self.context.log.warning(w)
        self.context.log.info(f"{self.cfg.topic} {plan.hour}: read {result.records_read}, landed {result.rows}, "
                              f"dead letters {result.dead_letters.rows}")
        return landing_metadata(result, self.store, self.cfg, landed), landing_checks(result, self.store, self.cfg, plan)


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
        # The routing and event time: hours landed under another are shown as changed (replay them).
        code_version=cfg.landing_shape,
        op_tags={SPARK_TAG: "true"},
        metadata={"topic": cfg.topic, "dataset": cfg.dataset, "tables": ", ".join(cfg.tables)},
    )
    def _landing(
        context: AssetExecutionContext,
        kafka: KafkaResource,
        registry: SchemaRegistryResource,
        landing: LandingResource,
        pyspark: SparkResource,
        config: LandingRunConfig,
    ):
        hours = LandingPass(context, cfg, landing.store(), kafka, registry, pyspark, config.skip_retention_gaps,
                            config.source)
        return run_hours(context, key, all_hours=hours)

    return _landing


def build_landing_assets(config: LandingConfig) -> list:
    return [build_landing_asset(cfg) for cfg in config.topics.values()]
