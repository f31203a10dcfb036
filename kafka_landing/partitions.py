"""The hourly partitions every layer shares (UTC)."""

import os

from dagster import HourlyPartitionsDefinition

FIRST_HOUR_ENV = "KAFKA_LANDING_FIRST_HOUR"

# Only ended hours are partitions; whether an hour is *closed* (grace period
# passed) is checked when its slice is planned.
hourly = HourlyPartitionsDefinition(
    start_date=os.environ.get(FIRST_HOUR_ENV, "2026-01-01-00:00"), timezone="UTC"
)
