"""The production warehouse: BigQuery, loaded by free load jobs from the gs:// landing root.

- `warehouse`: `BigQueryWarehouse`, the `Warehouse` interface over the five below.
- `layout`: where a load goes (landing tables by DAY or HOUR, event-time tables), and a day's hours.
- `jobs`: load jobs: ids from the content, run and awaited one at a time, failures classified, counted.
- `ledger`: what was loaded, and which job may still be loading.
- `schema`: what a load needs of the table's columns (widenings, a reader schema, or groups of readers).
- `swap`: a load one job cannot do (too many files or bytes, several readers): steps into a scratch
  table, swapped into the partition by one copy job.
"""

from kafka_landing.warehouse.bigquery.jobs import job_id
from kafka_landing.warehouse.bigquery.layout import DAY, HOUR, day_sha, partition_id
from kafka_landing.warehouse.bigquery.schema import avro_columns
from kafka_landing.warehouse.bigquery.warehouse import BigQueryWarehouse

__all__ = ["DAY", "HOUR", "BigQueryWarehouse", "avro_columns", "day_sha", "job_id", "partition_id"]
