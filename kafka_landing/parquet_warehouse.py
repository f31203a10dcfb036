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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

from dagster import ConfigurableResource
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kafka_landing.crash_points import crash_point
from kafka_landing.avro_files import AvroFileError, count_records
from kafka_landing.done_checks import DoneFileMismatch, check_done_file
from kafka_landing.landing_store import LandingStore
from kafka_landing.load_queue import clear_pending, content_sha
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import check_identifier
from kafka_landing.schema_evolution import IncompatibleSchemaError, merge_schemas


class LoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class LoadResult:
    table: str  # dataset.table
    hour: str
    rows: int
    files: int
    schema_ids: tuple[int, ...]
    added_columns: tuple[str, ...]
    path: str
    done_file: str | None = None  # relative to the landing root
    done_sha256: str | None = None  # the content loaded


def verify_files(store: LandingStore, done: DoneFile) -> None:
    """Every listed file exists and holds the rows the manifest promises."""
    for f in done.files:
        path = store.path(f.path)
        if not path.exists():
            raise LoadError(f"{done.dataset}.{done.table} {done.hour}: listed file {f.path} does not exist")
        try:
            n = count_records(str(path))
        except AvroFileError as exc:
            raise LoadError(f"{done.dataset}.{done.table} {done.hour}: {f.path} is not a whole Avro file: {exc}") from None
        if n != f.rows:
            raise LoadError(f"{done.dataset}.{done.table} {done.hour}: {f.path} holds {n} rows, the done file says {f.rows}")


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


class ParquetWarehouse(ConfigurableResource):
    """Local Parquet tables, readable by Spark, DuckDB and pandas."""

    root: str

    def table_dir(self, dataset: str, table: str) -> Path:
        return _resolved(self.root) / check_identifier(dataset, "dataset") / check_identifier(table, "table")

    def hour_file(self, dataset: str, table: str, hour: str) -> Path:
        return self.table_dir(dataset, table) / f"hour={hour}" / "data.parquet"

    def table_schema(self, dataset: str, table: str) -> dict | None:
        p = self.table_dir(dataset, table) / "_schema.json"
        return json.loads(p.read_text()) if p.exists() else None

    def footer_rows(self, dataset: str, table: str, hour: str) -> int | None:
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
        """The record of the last load of an hour ({"done_file", "sha256", "rows", ...}), or None."""
        try:
            with open(self._ledger(dataset, table, hour), "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except ValueError:
            return {}  # unreadable: loaded, content unknown (a reload will rewrite it)

    def loaded_sha(self, dataset: str, table: str, hour: str) -> str | None:
        return (self.loaded(dataset, table, hour) or {}).get("sha256")

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

    def load_done_file(self, spark: SparkSession, store: LandingStore, done_file: str) -> LoadResult:
        """Load the hour of one done file (relative to the landing root), after checking it
        is what its path says; record the content loaded and clear its pending marker if
        the marker still names that content. DoneFileMismatch, LoadError or
        IncompatibleSchemaError leave the table and the landing files untouched."""
        try:
            content = store.read_bytes(done_file)
        except FileNotFoundError:
            raise LoadError(f"done file {done_file} does not exist: land the hour first") from None
        try:
            raw = json.loads(content)
        except ValueError as exc:
            raise DoneFileMismatch(f"done file {done_file} is not JSON ({exc}); nothing was loaded from it: "
                                   "re-land the hour or fix the tool that wrote it") from None
        done = check_done_file(done_file, raw)
        sha = content_sha(content)
        result = self.load_hour(spark, store, done, done_file=done_file, done_sha256=sha)
        clear_pending(store, done_file, sha)
        return result

    def load_hour(self, spark: SparkSession, store: LandingStore, done: DoneFile,
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
            # One read per schema id: each file group is read with its own writer schema.
            parts, hour_schema = [], None
            for sid in sorted(done.schema_ids):
                paths = [str(store.path(f.path)) for f in done.files if f.schema_id == sid]
                df = spark.read.format("avro").load(paths)
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
                n = spark.read.parquet(str(written)).count()  # from the footer, no data read
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


__all__ = ["DoneFileMismatch", "IncompatibleSchemaError", "LoadError", "LoadResult", "ParquetWarehouse", "verify_files"]
