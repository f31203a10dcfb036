"""The hourly partitions every layer shares (UTC), and how an asset reports a
run over one hour or over a backfill range of hours."""

import os
from typing import Callable

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    BackfillPolicy,
    HourlyPartitionsDefinition,
    MaterializeResult,
)

FIRST_HOUR_ENV = "KAFKA_LANDING_FIRST_HOUR"

# Only ended hours are partitions; whether an hour is *closed* (grace period
# passed) is checked when its slice is planned.
hourly = HourlyPartitionsDefinition(
    start_date=os.environ.get(FIRST_HOUR_ENV, "2026-01-01-00:00"), timezone="UTC"
)

# A backfill of many hours runs as one run: one Spark session for all of them.
single_run = BackfillPolicy.single_run()


def run_hours(
    context: AssetExecutionContext,
    key: AssetKey,
    one_hour: Callable[[str], tuple[dict, list[AssetCheckResult]]],
) -> MaterializeResult:
    """Run `one_hour` for every hour of the run, oldest first. One hour reports its
    metadata and checks directly; a range reports each hour as an observation of
    that partition, and its checks as one result over all hours."""
    keys = sorted(context.partition_keys)
    results = []
    for i, k in enumerate(keys, 1):
        if len(keys) > 1:
            context.log.info(f"{key.to_user_string()}: hour {i}/{len(keys)} ({k})")
        results.append((k, *one_hour(k)))
    if len(results) == 1:
        _, metadata, checks = results[0]
        return MaterializeResult(metadata=metadata, check_results=checks)
    for k, metadata, _ in results:
        context.log_event(AssetObservation(asset_key=key, partition=k, metadata=metadata))
    merged = {}
    for k, _, checks in results:
        for c in checks:
            m = merged.setdefault(c.check_name, {"passed": True, "severity": AssetCheckSeverity.WARN, "failed": []})
            if not c.passed:
                m["passed"] = False
                m["failed"].append(k)
                if c.severity == AssetCheckSeverity.ERROR:
                    m["severity"] = AssetCheckSeverity.ERROR
    rows = sum(int(md.get("dagster/row_count", 0)) for _, md, _ in results)
    return MaterializeResult(
        metadata={"hours": len(keys), "first_hour": keys[0], "last_hour": keys[-1], "dagster/row_count": rows},
        check_results=[
            AssetCheckResult(check_name=name, passed=m["passed"], severity=m["severity"],
                             metadata={"hours": len(keys), "failed_hours": m["failed"]})
            for name, m in merged.items()
        ],
    )
