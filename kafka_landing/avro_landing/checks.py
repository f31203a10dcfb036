"""CHECK: each landed hour's checks, evaluated by the landing itself as soon as the
hour is published (so they are never missing for an hour that landed):

- `conservation` (ERROR): slice records = rows in the listed files + dead letters
  (both recounted from the published files' Avro block headers, not from what the
  run believes it wrote) + offsets Kafka returned no record for;
- `no_dead_letters` (WARN): the hour has none;
- `every_offset_has_a_record` (ERROR): on a topic neither transactional (`transactional: true`
  in its config) nor compacted, Kafka gave a record for every offset of the slice. Conservation
  takes the offsets without a record as the reader says; here they are named (the direct reader
  reports the ranges it saw), because on such a topic each one is a record lost.
"""

from typing import TYPE_CHECKING

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    PartitionsDefinition,
)

from kafka_landing.avro_landing.conservation import check_landed_hour
from kafka_landing.config import TopicConfig
from kafka_landing.errors import is_transient
from kafka_landing.hours import CONSERVATION
from kafka_landing.kafka_slices.plan import SlicePlan
from kafka_landing.store.base import LandingStore

if TYPE_CHECKING:  # the landing job imports Spark; these checks only read its result
    from kafka_landing.avro_landing.job import LandingResult


def landing_check_specs(key: AssetKey, hours: PartitionsDefinition) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(CONSERVATION, asset=key, partitions_def=hours,
                       description="Slice records = rows in the listed files + dead letters (both counted from the "
                                   "files' Avro block headers) + offsets Kafka returned no record for."),
        AssetCheckSpec("no_dead_letters", asset=key, partitions_def=hours,
                       description="Warns when the hour has dead letters."),
        AssetCheckSpec(EVERY_OFFSET, asset=key, partitions_def=hours,
                       description="On a topic neither transactional nor compacted, Kafka gave a record for every "
                                   "offset of the slice: an offset without one is a record lost, named here."),
    ]


EVERY_OFFSET = "every_offset_has_a_record"


def every_offset_check(result: "LandingResult", cfg: TopicConfig, plan: SlicePlan) -> AssetCheckResult:
    """Offsets without a record are expected on a transactional or compacted topic, and are records
    lost on any other: the check names the first ranges the reader saw."""
    without = result.offsets_without_record
    shown = [f"partition {p} offsets {first}..{first + n - 1}" if n > 1 else f"partition {p} offset {first}"
             for p, first, n in result.gaps_shown]
    expected = cfg.transactional or result.compacted
    meta = {"offsets_without_record": without, "transactional": cfg.transactional, "compacted": result.compacted,
            "ranges": MetadataValue.json(shown)}
    if result.gaps_seen is not None:
        meta["offsets_seen_without_record"] = result.gaps_seen  # the direct reader's own count, offset by offset
    if without == 0 or expected:
        return AssetCheckResult(check_name=EVERY_OFFSET, passed=True, metadata=meta)
    where = f" ({', '.join(shown)}{' ...' if without > sum(n for *_, n in result.gaps_shown) else ''})" if shown else ""
    return AssetCheckResult(
        check_name=EVERY_OFFSET, passed=False, metadata=meta,
        description=f"{plan.topic} {plan.hour}: Kafka gave no record for {without} offset(s) of the slice{where}, on a "
                    "topic that is neither transactional nor compacted: records the broker held when the slice was "
                    "frozen are gone (a truncated log after an unclean leader election, a deleted and re-created "
                    "partition). If the topic's producers write in transactions, whose markers are such offsets, set "
                    "`transactional: true` in its config; otherwise find the records, then land the hour again.")


def landing_checks(result: "LandingResult", store: LandingStore, cfg: TopicConfig, plan: SlicePlan
                   ) -> list[AssetCheckResult]:
    try:
        conserved = check_landed_hour(store, cfg, plan)
        conservation = AssetCheckResult(check_name=CONSERVATION, passed=conserved.passed,
                                        metadata=conserved.metadata())
    except Exception as exc:  # noqa: BLE001 - the hour is published: a check that could not count says so
        conservation = AssetCheckResult(
            check_name=CONSERVATION, passed=False,
            description=f"could not re-count {plan.topic} {plan.hour} from its files ({type(exc).__name__}: {exc}); "
                        "the hour is published; land it again to re-run the check",
            metadata={"error": f"{type(exc).__name__}: {exc}"[:500], "transient": is_transient(exc)})
    return [
        conservation,
        AssetCheckResult(
            check_name="no_dead_letters",
            passed=result.dead_letters.rows == 0,
            severity=AssetCheckSeverity.WARN,
            metadata={"dead_letters": result.dead_letters.rows,
                      "by_reason": MetadataValue.json(result.dead_letters.by_reason)},
        ),
        every_offset_check(result, cfg, plan),
    ]
