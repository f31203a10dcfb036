"""The embedded warehouse: one Parquet table per destination, one file per hour.

    <root>/<dataset>/<table>/hour=2026-01-31T13/data.parquet
    <root>/<dataset>/<table>/_schema.json          the table's schema so far
    <root>/<dataset>/<table>/_loads/hour=2026-01-31T13.json
                                                   what was loaded: the done file's content hash

Loading hour H first checks that H's done file is what its path says (dataset,
table, hour, files only from H's folder: `done_checks`), reads exactly the files
it lists (after checking that each exists and holds the rows the manifest says),
and replaces H's file with one atomic rename: a reader sees the old hour or the
new one, never both, and a reload can never duplicate rows. Then it records the
content it loaded, so the done-file sensor and the `hours_behind` check know
what is loaded without asking Dagster. Spark, DuckDB and pandas read the table
with Hive partitioning (`hour`) and by column name (older hours lack columns
added later); they skip `_`-prefixed entries.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kafka_landing.crash_points import crash_point
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import check_identifier
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.load import (
    LoadError,
    LoadResult,
    SparkFactory,
    Warehouse,
    verify_files,
)
from kafka_landing.warehouse.schema_evolution import (
    merge_schemas,
)


def _conform(df: DataFrame, schema: dict) -> DataFrame:
    """Columns in the table's order; columns this hour lacks are typed nulls."""
    struct = StructType.fromJson(schema)
    have = set(df.columns)
    return df.select(*[F.col(f.name) if f.name in have else F.lit(None).cast(f.dataType).alias(f.name) for f in struct.fields])


@functools.lru_cache(maxsize=16)
def _resolved(root: str) -> Path:
    return Path(root).expanduser().resolve()


STAGING_MAX_AGE_SECONDS = 24 * 3600


def _sweep_staging(staging_root: Path) -> None:
    """Loads killed before they could clean up leave staging folders behind: swept after a day.
    Runs under the table's load lock, so no live load of this table owns one."""
    cutoff = time.time() - STAGING_MAX_AGE_SECONDS
    for p in staging_root.glob("*") if staging_root.is_dir() else ():
        if p.stat().st_mtime < cutoff:
            shutil.rmtree(p, ignore_errors=True)


class ParquetWarehouse(Warehouse):
    """Local Parquet tables, readable by Spark, DuckDB and pandas."""

    kind = "parquet"

    def __init__(self, root: str):
        self.root = root

    def table_dir(self, dataset: str, table: str) -> Path:
        return _resolved(self.root) / check_identifier(dataset, "dataset") / check_identifier(table, "table")

    def hour_file(self, dataset: str, table: str, hour: str) -> Path:
        return self.table_dir(dataset, table) / f"hour={hour}" / "data.parquet"

    def table_schema(self, dataset: str, table: str) -> dict | None:
        p = self.table_dir(dataset, table) / "_schema.json"
        return json.loads(p.read_text()) if p.exists() else None

    def hour_location(self, dataset: str, table: str, hour: str) -> str:
        return str(self.hour_file(dataset, table, hour))

    def check_writable(self) -> None:
        root = _resolved(self.root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".write-probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise LoadError(f"Parquet warehouse root {root} cannot be written ({exc.strerror or exc}): check "
                            "KAFKA_LANDING_WAREHOUSE_ROOT and its permissions") from None

    def hour_rows(self, dataset: str, table: str, hour: str) -> int | None:
        """Rows of an hour from its Parquet footer (no Spark, no data read); None if no file."""
        p = self.hour_file(dataset, table, hour)
        try:
            return pq.read_metadata(p).num_rows
        except FileNotFoundError:
            return None

    # --- what was loaded ----------------------------------------------------------

    def _ledger(self, dataset: str, table: str, hour: str) -> Path:
        return self.table_dir(dataset, table) / "_loads" / f"hour={hour}.json"

    def loaded(self, dataset: str, table: str, hour: str) -> dict | None:
        try:
            with open(self._ledger(dataset, table, hour), "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except ValueError:
            return {}  # unreadable: loaded, content unknown (a reload will rewrite it)

    def loaded_hours(self, dataset: str, table: str) -> set[str]:
        """Hour tags with a recorded load: one directory listing."""
        try:
            with os.scandir(self.table_dir(dataset, table) / "_loads") as it:
                return {e.name[5:-5] for e in it if e.name.startswith("hour=") and e.name.endswith(".json")}
        except FileNotFoundError:
            return set()

    def _record_load(self, done: DoneFile, rows: int, done_file: str | None, sha: str | None) -> None:
        p = self._ledger(done.dataset, done.table, done.hour)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{p.name}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps({
            "done_file": done_file, "sha256": sha, "rows": rows, "attempt": done.attempt,
            "loaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }))
        os.replace(tmp, p)

    def load_hour(self, store: LandingStore, done: DoneFile, spark: SparkFactory,
                  done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        verify_files(store, done)
        tdir = self.table_dir(done.dataset, done.table)
        target = self.hour_file(done.dataset, done.table, done.hour)
        where = f"{done.dataset}.{done.table} hour {done.hour} (schema ids {list(done.schema_ids)})"
        tdir.mkdir(parents=True, exist_ok=True)
        with open(tdir / "_load.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one load per table at a time, whatever runs it
            table_schema = self.table_schema(done.dataset, done.table)
            if done.rows == 0:
                target.unlink(missing_ok=True)  # the hour is empty now: replace it with nothing
                self._record_load(done, 0, done_file, done_sha256)
                return LoadResult(f"{done.dataset}.{done.table}", done.hour, 0, 0, (), (), str(target),
                                  done_file, done_sha256)
            session = spark()
            # One read per schema id: each file group is read with its own writer schema.
            parts, hour_schema = [], None
            for sid in sorted(done.schema_ids):
                paths = [store.location(f.path) for f in done.files if f.schema_id == sid]
                df = session.read.format("avro").load(paths)
                hour_schema, _ = merge_schemas(hour_schema, df.schema.jsonValue(), f"{where}, schema id {sid}")
                parts.append(df)
            merged, added = merge_schemas(table_schema, hour_schema, where)
            df = parts[0]
            for other in parts[1:]:
                df = df.unionByName(other, allowMissingColumns=True)
            _sweep_staging(tdir / "_staging")
            staging = tdir / "_staging" / uuid.uuid4().hex
            try:
                _conform(df, merged).coalesce(1).write.mode("error").parquet(str(staging))
                written = next(staging.glob("part-*.parquet"))
                n = pq.read_metadata(written).num_rows  # from the footer: no Spark job for a count
                if n != done.rows:
                    raise LoadError(f"{where}: wrote {n} rows, the done file lists {done.rows}")
                crash_point("warehouse:staged")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(written, target)  # the atomic swap of the hour
                crash_point("warehouse:swapped")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            if merged != table_schema:
                tmp = tdir / f"._schema.{uuid.uuid4().hex}"
                tmp.write_text(json.dumps(merged, indent=2))
                os.replace(tmp, tdir / "_schema.json")
            self._record_load(done, n, done_file, done_sha256)
        return LoadResult(f"{done.dataset}.{done.table}", done.hour, n, len(done.files),
                          tuple(done.schema_ids), tuple(added), str(target), done_file, done_sha256)


__all__ = ["ParquetWarehouse"]
