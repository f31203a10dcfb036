"""The embedded warehouse: one Parquet table per destination, one file per hour.

    <root>/<dataset>/<table>/hour=2026-01-31T13/data.parquet
    <root>/<dataset>/<table>/_schema.json          the table's schema so far, the widest (schema_evolution)
    <root>/<dataset>/<table>/_rewrite.json         while older hours are rewritten under a widened schema
    <root>/<dataset>/<table>/_loads/hour=2026-01-31T13.json
                                                   what was loaded: the done file's content hash
    <root>/<dataset>/<table>__by_event/event_day=2026-01-31/data.parquet
                                                   the event-time table (`by_event`): the same, per
                                                   event day (or event_hour=), from a manifest version

Loading hour H first checks that H's done file is what its path says (dataset,
table, hour, files only from H's folder: `handoff.manifests`), reads exactly the files
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
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from kafka_landing.crash_points import crash_point
from kafka_landing.handoff.manifests import Manifest
from kafka_landing.naming import check_identifier
from kafka_landing.spark_setup import spark_readable, type_ddl
from kafka_landing.store.base import STAGING_MAX_AGE_SECONDS, LandingStore
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.backend import (
    LoadRecords,
    LoadError,
    LoadResult,
    SparkFactory,
    Warehouse,
    verify_files,
)
from kafka_landing.warehouse.schema_evolution import merge_schemas


def _conform(df: DataFrame, schema: dict) -> DataFrame:
    """The rows under the table's schema: its columns in its order, each value widened to the
    column's type (`schema_evolution`), nested fields and columns the rows lack as typed nulls.
    Expressions only: Spark does it in the JVM as it writes. Casts name their types as DDL
    (`spark_setup.type_ddl`), so every file of a table has the one Spark schema."""
    want = StructType.fromJson(schema)
    have = {f.name: f.dataType for f in df.schema.fields}
    return df.select(*[(_conformed(F.col(f.name), have[f.name], f.dataType) if f.name in have
                        else F.lit(None).cast(type_ddl(f.dataType))).alias(f.name) for f in want.fields])


def _conformed(col: Column, have: DataType, want: DataType) -> Column:
    if have == want:
        return col
    if isinstance(have, StructType) and isinstance(want, StructType):
        by_name = {f.name: f.dataType for f in have.fields}
        fields = [(_conformed(col.getField(f.name), by_name[f.name], f.dataType) if f.name in by_name
                   else F.lit(None).cast(type_ddl(f.dataType))).alias(f.name) for f in want.fields]
        return F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*fields)).cast(type_ddl(want))
    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        return F.transform(col, lambda x: _conformed(x, have.elementType, want.elementType)).cast(type_ddl(want))
    if isinstance(have, MapType) and isinstance(want, MapType):
        return F.transform_values(col, lambda _k, v: _conformed(v, have.valueType, want.valueType)).cast(type_ddl(want))
    return col.cast(type_ddl(want))  # a widening merge_schemas allowed: long -> double, string -> binary, decimals


@functools.lru_cache(maxsize=16)
def _resolved(root: str) -> Path:
    return Path(root).expanduser().resolve()


def _sweep_staging(staging_root: Path) -> None:
    """Loads killed before they could clean up leave staging folders behind: swept after a day.
    Runs under the table's load lock, so no live load of this table owns one."""
    cutoff = time.time() - STAGING_MAX_AGE_SECONDS
    for p in staging_root.glob("*") if staging_root.is_dir() else ():
        if p.stat().st_mtime < cutoff:
            shutil.rmtree(p, ignore_errors=True)


REWRITE_FILE = "_rewrite.json"  # the schema older hours are being rewritten to, while they are


def _partition_of(path: Path) -> str:
    return path.parent.name.split("=", 1)[1]


class ParquetWarehouse(Warehouse):
    """Local Parquet tables, readable by Spark, DuckDB and pandas."""

    kind = "parquet"

    def __init__(self, root: str, column: str = "hour"):
        self.root = root
        self.column = column  # the Hive partition column: hour, or event_day / event_hour (`by_event`)

    def by_event(self, granularity: str, field: str) -> ParquetWarehouse:
        """The event-time tables: <root>/<dataset>/<table>__by_event/event_day=<D>/data.parquet."""
        return ParquetWarehouse(self.root, column=f"event_{granularity}")

    def table_dir(self, dataset: str, table: str) -> Path:
        return _resolved(self.root) / check_identifier(dataset, "dataset") / check_identifier(table, "table")

    def partition_file(self, dataset: str, table: str, partition: str) -> Path:
        return self.table_dir(dataset, table) / f"{self.column}={partition}" / "data.parquet"

    def table_schema(self, dataset: str, table: str) -> dict | None:
        p = self.table_dir(dataset, table) / "_schema.json"
        return json.loads(p.read_text()) if p.exists() else None

    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        return str(self.partition_file(dataset, table, partition))

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

    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """Rows of a partition from its Parquet footer (no Spark, no data read); None if no file."""
        p = self.partition_file(dataset, table, partition)
        try:
            return pq.read_metadata(p).num_rows
        except FileNotFoundError:
            return None

    # --- what was loaded ----------------------------------------------------------

    @functools.cached_property
    def records(self) -> LoadRecords:
        return LoadRecords(LocalStore(_resolved(self.root)), self.column)

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        return self.records.read(dataset, table, partition)

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        return self.records.partitions(dataset, table)

    def _record_load(self, manifest: Manifest, rows: int, done_file: str | None, sha: str | None) -> None:
        self.records.write(manifest.dataset, manifest.target, manifest.partition, {
            "done_file": done_file, "sha256": sha, "rows": rows, "attempt": manifest.attempt})

    def _rewrite_partitions(self, session, tdir: Path, schema: dict, where: str) -> None:
        """Every hour file of the table rewritten under `schema` (a widening of the one they have),
        then `schema` made the table's: every file of a table has one schema, so every reader
        (pandas included, which takes the first file's schema) gets every row with the widened
        types. One Spark job for the whole table, under the table's lock; each hour swapped
        atomically. Killed half way, the next load of the table finishes it (`REWRITE_FILE`).
        A table with no hour yet (its first load) only gets `schema` as its own."""
        marker = tdir / REWRITE_FILE
        tmp = tdir / f".{REWRITE_FILE}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(schema))
        os.replace(tmp, marker)
        files = sorted(tdir.glob(f"{self.column}=*/data.parquet"))
        rows = {_partition_of(f): pq.read_metadata(f).num_rows for f in files}
        by_schema: dict[str, list[str]] = {}  # after a kill, some hours may be rewritten already
        for f in files:
            by_schema.setdefault(pq.read_schema(f).to_string(), []).append(str(f))
        staging = tdir / "_staging" / f"rewrite-{uuid.uuid4().hex}"
        try:
            if files:
                parts = []
                for paths in by_schema.values():
                    old = session.read.parquet(*paths)
                    hour = F.regexp_extract(F.col("_metadata.file_path"), rf"{self.column}=([^/]+)/data\.parquet$", 1)
                    parts.append(_conform(old, schema).withColumn("_kl_hour", hour))
                df = parts[0]
                for other in parts[1:]:
                    df = df.unionByName(other)
                df.repartition("_kl_hour").write.partitionBy("_kl_hour").mode("error").parquet(str(staging))
                staged = {d.name[len("_kl_hour="):]: next(d.glob("part-*.parquet")) for d in staging.glob("_kl_hour=*")}
                got = {h: pq.read_metadata(p).num_rows for h, p in staged.items()}
                if got != {h: n for h, n in rows.items() if n}:
                    raise LoadError(f"{where}: rewriting the table's hours under its widened schema gave other row "
                                    f"counts than they hold ({got} != {rows}); nothing was replaced. Look at {tdir}")
                for h, p in staged.items():
                    os.replace(p, tdir / f"{self.column}={h}" / "data.parquet")
            tmp = tdir / f"._schema.{uuid.uuid4().hex}"
            tmp.write_text(json.dumps(schema, indent=2))
            os.replace(tmp, tdir / "_schema.json")
            marker.unlink()
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        verify_files(store, manifest)
        name = f"{manifest.dataset}.{manifest.target}"
        tdir = self.table_dir(manifest.dataset, manifest.target)
        target = self.partition_file(manifest.dataset, manifest.target, manifest.partition)
        where = f"{name} hour {manifest.partition} (schema ids {list(manifest.schema_ids)})"
        tdir.mkdir(parents=True, exist_ok=True)
        with open(tdir / "_load.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one load per table at a time, whatever runs it
            unfinished = tdir / REWRITE_FILE
            if unfinished.exists():  # a load killed while it rewrote the table: finish that first
                self._rewrite_partitions(spark(), tdir, json.loads(unfinished.read_text()), where)
            table_schema = self.table_schema(manifest.dataset, manifest.target)
            if manifest.rows == 0:
                target.unlink(missing_ok=True)  # the hour is empty now: replace it with nothing
                self._record_load(manifest, 0, done_file, done_sha256)
                return LoadResult(name, manifest.partition, 0, 0, (), (), str(target),
                                  done_file, done_sha256)
            session = spark()
            # One read per schema id: each file group is read with its own writer schema.
            parts, hour_schema = [], None
            for sid in sorted(manifest.schema_ids):
                files = [f.path for f in manifest.landed_files if f.schema_id == sid]
                reader = spark_readable(store.avro_schema(files[0]))  # one header: the id's files share it
                df = session.read.format("avro").option("avroSchema", json.dumps(reader)) \
                    .load([store.location(p) for p in files])
                hour_schema, _ = merge_schemas(hour_schema, df.schema.jsonValue(), f"{where}, schema id {sid}")
                parts.append(df)
            merged, added = merge_schemas(table_schema, hour_schema, where)
            if merged != table_schema:
                self._rewrite_partitions(session, tdir, merged, where)
            df = _conform(parts[0], merged)
            for other in parts[1:]:
                df = df.unionByName(_conform(other, merged))
            _sweep_staging(tdir / "_staging")
            staging = tdir / "_staging" / uuid.uuid4().hex
            try:
                df.coalesce(1).write.mode("error").parquet(str(staging))
                written = next(staging.glob("part-*.parquet"))
                n = pq.read_metadata(written).num_rows  # from the footer: no Spark job for a count
                if n != manifest.rows:
                    raise LoadError(f"{where}: wrote {n} rows, the done file lists {manifest.rows}")
                crash_point("warehouse:staged")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(written, target)  # the atomic swap of the hour
                crash_point("warehouse:swapped")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            self._record_load(manifest, n, done_file, done_sha256)
        return LoadResult(name, manifest.partition, n, len(manifest.landed_files),
                          tuple(manifest.schema_ids), tuple(added), str(target), done_file, done_sha256)


__all__ = ["ParquetWarehouse"]
