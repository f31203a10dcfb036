"""CHECK: each landed hour's checks, evaluated by the landing itself as soon as the
hour is published (so they are never missing for an hour that landed):

- `conservation` (ERROR): slice records = rows in the listed files + dead letters
  (both recounted from the published files' Avro block headers, not from what the
  run believes it wrote) + offsets Kafka returned no record for;
- `no_dead_letters` (WARN): the hour has none.
"""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    PartitionsDefinition,
)

from kafka_landing.avro_landing.conservation import check_landed_hour
from kafka_landing.avro_landing.job import LandingResult
from kafka_landing.config import TopicConfig
from kafka_landing.errors import is_transient
from kafka_landing.hours import CONSERVATION
from kafka_landing.kafka_slices.plan import SlicePlan
from kafka_landing.store.base import LandingStore


def landing_check_specs(key: AssetKey, hours: PartitionsDefinition) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(CONSERVATION, asset=key, partitions_def=hours,
                       description="Slice records = rows in the listed files + dead letters (both counted from the "
                                   "files' Avro block headers) + offsets Kafka returned no record for."),
        AssetCheckSpec("no_dead_letters", asset=key, partitions_def=hours,
                       description="Warns when the hour has dead letters."),
    ]


def landing_checks(result: LandingResult, store: LandingStore, cfg: TopicConfig, plan: SlicePlan
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
    ]
