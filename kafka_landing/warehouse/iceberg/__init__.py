"""The embedded warehouse: one Apache Iceberg table per destination, partitioned by landing day
(the event-time tables by event partition), written with Spark, committed with
pyiceberg. Read it in the direction a load goes:

- `warehouse`: `IcebergWarehouse`, the `Warehouse` interface over the modules below.
- `catalogs`: the catalog that names the tables: SQL (SQLite, PostgreSQL) or REST.
- `tables`: the root's tables: where each lives, its catalog, the store every other file goes through.
- `files`: Spark's part: the landing files read, written as Parquet under the table's schema.
- `commits`: every commit (under the table's lock, conditional on its snapshot), and the ledger the
  snapshots keep, read back by walking their parent chain.
- `stage`: a run's hours in one Spark job and one commit, handed to their own loads as a `StagedRun`.
- `compact`: the tables' finished days made one file each.
- `upkeep`: compaction, old snapshots expired, and the files no kept snapshot lists removed.
- `gcs_io`: how pyiceberg reaches a gs:// root (on the emulator too).
"""

from kafka_landing.warehouse.iceberg.tables import HOUR_COLUMN
from kafka_landing.warehouse.iceberg.upkeep import Upkept, upkeep
from kafka_landing.warehouse.iceberg.warehouse import IcebergWarehouse

__all__ = ["HOUR_COLUMN", "IcebergWarehouse", "Upkept", "upkeep"]
