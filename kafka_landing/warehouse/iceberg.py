"""The open warehouse: one Apache Iceberg table per destination, partitioned by landing hour.

    <root>/_catalog.db                              the SQL catalog (SQLite: nothing to start)
    <root>/<dataset>/<table>/metadata/...           the table's Iceberg metadata: schema, snapshots
    <root>/<dataset>/<table>/data/hour=<H>/<load>/  the Parquet files one load of hour H wrote
    <root>/<dataset>/<table>/_loads/hour=<H>.json   what was loaded: the done file's content hash

Loading hour H: Spark reads exactly the Avro files H's done file lists and writes them as Parquet
under the table's schema; then one Iceberg commit drops H's files and adds the new ones (two
snapshots in one metadata swap, so a reader sees the old hour or the new one, never both, and a
reload never duplicates rows). The commit's snapshot summary carries the hour, the done file and
its hash: a reload of content already committed makes no new snapshot.

Schema changes follow `schema_evolution`, the rules every backend shares. What Iceberg changes in
metadata (a new column anywhere, a decimal's precision with its scale kept) writes no data file
but the new hour's. What it cannot (long to double, string to binary, a decimal's scale) is the
one rule that rewrites: the table's files are read and written again under the wider type, in the
same commit as the schema change, so no reader sees mixed types and no value changes but by the
widening Avro itself applies. Concurrent loads need no lock: the catalog's commit is conditional
on the snapshot it started from, and a load that loses the race commits again on the new one.
Spark, DuckDB (through Arrow), pandas and pyiceberg read the tables; event-time tables are not
Iceberg yet (`by_event` says so).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from kafka_landing.crash_points import crash_point
from kafka_landing.handoff.manifests import Manifest
from kafka_landing.naming import check_identifier
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError, LoadResult, SparkFactory, Warehouse, verify_files
from kafka_landing.warehouse.parquet import _conform
from kafka_landing.warehouse.schema_evolution import merge_schemas

HOUR_COLUMN = "hour"  # the landing hour of each row, the table's partition (as in the Parquet tables)
SCHEMA_PROPERTY = "kafka-landing.schema"  # the table's schema in Spark's terms: what `merge_schemas` widens
SNAPSHOT_KEYS = ("hour", "done-file", "sha256", "rows", "attempt")  # kafka-landing.<key> on every load's snapshots
COMMIT_ATTEMPTS = 8  # commits lost to a concurrent writer of the same table before the load gives up (transient)


@functools.lru_cache(maxsize=8)
def _catalog(root: str, uri: str | None):
    from pyiceberg.catalog.sql import SqlCatalog

    base = Path(root).expanduser().resolve()
    base.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("kafka_landing", uri=uri or f"sqlite:///{base / '_catalog.db'}", warehouse=base.as_uri())


def _prop(key: str) -> str:
    return f"kafka-landing.{key}"


def _needs_rewrite(old, new) -> bool:
    """True if going from Spark type `old` to `new` (a widening `merge_schemas` allowed) changes a
    column's type in a way Iceberg cannot apply in metadata: every primitive change but a decimal
    precision grown at the same scale. pyiceberg 0.12 wrongly accepts a scale change in metadata,
    which would reread old values at the new scale: that is why scale is decided here."""
    if old == new:
        return False
    if isinstance(old, str) and isinstance(new, str):
        if old.startswith("decimal(") and new.startswith("decimal("):
            return old.split(",")[1] != new.split(",")[1]
        return True
    if isinstance(old, dict) and isinstance(new, dict):
        kind = new.get("type")
        if kind == "struct":
            before = {f["name"]: f["type"] for f in old["fields"]}
            return any(_needs_rewrite(before[f["name"]], f["type"]) for f in new["fields"] if f["name"] in before)
        if kind == "array":
            return _needs_rewrite(old["elementType"], new["elementType"])
        if kind == "map":
            return _needs_rewrite(old["keyType"], new["keyType"]) or _needs_rewrite(old["valueType"], new["valueType"])
    return True


def _type_changes(old, new, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """(column path, new Spark type) of every primitive whose type `merge_schemas` changed, nested
    ones by Iceberg's names (`element`, `value`). Applied one by one: pyiceberg's union_by_name
    keeps string where binary was asked (it reads binary as string) and cannot be trusted here."""
    if old == new:
        return []
    if isinstance(old, str) and isinstance(new, str):
        return [(path, new)]
    kind = new.get("type") if isinstance(new, dict) else None
    if kind == "struct":
        before = {f["name"]: f["type"] for f in old["fields"]}
        return [c for f in new["fields"] if f["name"] in before
                for c in _type_changes(before[f["name"]], f["type"], path + (f["name"],))]
    if kind == "array":
        return _type_changes(old["elementType"], new["elementType"], path + ("element",))
    if kind == "map":
        return _type_changes(old["valueType"], new["valueType"], path + ("value",))
    return []


def _iceberg_type(spark_type: str):
    from pyiceberg.types import BinaryType, DecimalType, DoubleType, LongType

    simple = {"long": LongType(), "double": DoubleType(), "binary": BinaryType()}
    if spark_type in simple:
        return simple[spark_type]
    precision, scale = spark_type[len("decimal("):-1].split(",")
    return DecimalType(int(precision), int(scale))


def _arrow_schema(schema: dict):
    """The table's columns as Arrow (what pyiceberg takes), the landing hour last."""
    import pyarrow as pa

    arrow = to_arrow_schema(StructType.fromJson(schema))
    return arrow.append(pa.field(HOUR_COLUMN, pa.string(), nullable=True))


class IcebergWarehouse(Warehouse):
    """Iceberg tables in a SQL catalog, written with Spark (Parquet files) and committed with pyiceberg."""

    kind = "iceberg"

    def __init__(self, root: str, catalog_uri: str | None = None):
        self.root = root
        self.catalog_uri = catalog_uri  # None: SQLite under the root; or a SQLAlchemy URL (PostgreSQL)

    @property
    def catalog(self):
        return _catalog(self.root, self.catalog_uri)

    def by_event(self, granularity: str, field: str) -> Warehouse:
        raise LoadError(f"event-time tables (event_time_field {field!r}) are not Iceberg tables yet: load them "
                        "into the Parquet warehouse (KAFKA_LANDING_WAREHOUSE=parquet) or BigQuery, or remove "
                        "event_time_field from the topic")

    def table_dir(self, dataset: str, table: str) -> Path:
        return (Path(self.root).expanduser().resolve() / check_identifier(dataset, "dataset")
                / check_identifier(table, "table"))

    def _identifier(self, dataset: str, table: str) -> tuple[str, str]:
        return check_identifier(dataset, "dataset"), check_identifier(table, "table")

    def table(self, dataset: str, table: str):
        """The Iceberg table, or None before its first load."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self._identifier(dataset, table))
        except NoSuchTableError:
            return None

    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        return f"{dataset}.{table} ({self.table_dir(dataset, table)}) where {HOUR_COLUMN} = '{partition}'"

    def check_writable(self) -> None:
        root = Path(self.root).expanduser().resolve()
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = root / f".write-probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
            self.catalog.list_namespaces()
        except OSError as exc:
            raise LoadError(f"Iceberg warehouse root {root} cannot be written ({exc.strerror or exc}): check "
                            "KAFKA_LANDING_WAREHOUSE_ROOT and its permissions") from None
        except Exception as exc:  # the catalog's database: SQLAlchemy's errors, by driver
            raise LoadError(f"the Iceberg catalog of {root} cannot be opened ({type(exc).__name__}: {exc}): check "
                            "KAFKA_LANDING_ICEBERG_CATALOG_URI and that its database is up", transient=True) from None

    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """Rows of an hour from the table's metadata (its data files' record counts): no data read.
        None if the hour holds no file."""
        from pyiceberg.expressions import EqualTo

        t = self.table(dataset, table)
        if t is None or t.current_snapshot() is None:
            return None
        files = list(t.scan(row_filter=EqualTo(HOUR_COLUMN, partition)).plan_files())
        return sum(f.file.record_count for f in files) if files else None

    def hour_files(self, dataset: str, table: str, partition: str) -> list[str]:
        """The data files the current snapshot holds for an hour."""
        from pyiceberg.expressions import EqualTo

        t = self.table(dataset, table)
        if t is None or t.current_snapshot() is None:
            return []
        return sorted(f.file.file_path for f in t.scan(row_filter=EqualTo(HOUR_COLUMN, partition)).plan_files())

    # --- what was loaded ----------------------------------------------------------

    def _ledger(self, dataset: str, table: str, partition: str) -> Path:
        return self.table_dir(dataset, table) / "_loads" / f"{HOUR_COLUMN}={partition}.json"

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        try:
            with open(self._ledger(dataset, table, partition), "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None
        except ValueError:
            return {}

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        try:
            with os.scandir(self.table_dir(dataset, table) / "_loads") as it:
                prefix = f"{HOUR_COLUMN}="
                return {e.name[len(prefix):-5] for e in it if e.name.startswith(prefix) and e.name.endswith(".json")}
        except FileNotFoundError:
            return set()

    def _record_load(self, manifest: Manifest, rows: int, done_file: str | None, sha: str | None,
                     snapshot_id: int | None) -> None:
        p = self._ledger(manifest.dataset, manifest.target, manifest.partition)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{p.name}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps({
            "done_file": done_file, "sha256": sha, "rows": rows, "attempt": manifest.attempt,
            "snapshot_id": snapshot_id, "loaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }))
        os.replace(tmp, p)

    @staticmethod
    def committed(t, partition: str) -> dict | None:
        """The summary of the newest snapshot that loaded an hour, as the table itself records it."""
        if t is None:
            return None
        for snap in sorted(t.metadata.snapshots, key=lambda s: s.sequence_number, reverse=True):
            props = snap.summary.additional_properties if snap.summary else {}
            if props.get(_prop("hour")) == partition:
                return {k: props.get(_prop(k)) for k in SNAPSHOT_KEYS} | {"snapshot_id": snap.snapshot_id}
        return None

    # --- loading ------------------------------------------------------------------

    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        verify_files(store, manifest)
        name = f"{manifest.dataset}.{manifest.target}"
        where = f"{name} hour {manifest.partition} (schema ids {list(manifest.schema_ids)})"
        tdir = self.table_dir(manifest.dataset, manifest.target)
        t = self.table(manifest.dataset, manifest.target)
        done = self.committed(t, manifest.partition)
        if done_sha256 and done and done.get("sha256") == done_sha256:  # committed before its ledger was written
            self._record_load(manifest, int(done["rows"]), done_file, done_sha256, done["snapshot_id"])
            return LoadResult(name, manifest.partition, int(done["rows"]), len(manifest.landed_files),
                              tuple(manifest.schema_ids), (), self.partition_location(
                                  manifest.dataset, manifest.target, manifest.partition), done_file, done_sha256)
        props = {_prop("hour"): manifest.partition, _prop("done-file"): done_file or "",
                 _prop("sha256"): done_sha256 or "", _prop("rows"): str(manifest.rows),
                 _prop("attempt"): str(manifest.attempt)}
        hour_schema, parts, written, added = None, [], [], []
        if manifest.rows:
            session = spark()
            for sid in sorted(manifest.schema_ids):  # one read per schema id, each with its writer schema
                paths = [store.location(f.path) for f in manifest.landed_files if f.schema_id == sid]
                df = session.read.format("avro").load(paths)
                hour_schema, _ = merge_schemas(hour_schema, df.schema.jsonValue(), f"{where}, schema id {sid}")
                parts.append(df)
        staging = tdir / "data" / f"{HOUR_COLUMN}={manifest.partition}" / uuid.uuid4().hex
        try:
            for _ in range(COMMIT_ATTEMPTS):
                t = self.table(manifest.dataset, manifest.target)
                table_schema = json.loads(t.properties[SCHEMA_PROPERTY]) if t is not None else None
                merged, added = (merge_schemas(table_schema, hour_schema, where) if hour_schema
                                 else (table_schema, []))
                if merged is None:  # an empty first hour: nothing to make a table of
                    self._record_load(manifest, 0, done_file, done_sha256, None)
                    return LoadResult(name, manifest.partition, 0, 0, (), (),
                                      self.partition_location(manifest.dataset, manifest.target, manifest.partition),
                                      done_file, done_sha256)
                if parts and written != [merged]:  # (re)write the hour's Parquet under the table's schema
                    shutil.rmtree(staging, ignore_errors=True)
                    df = _conform(parts[0], merged)
                    for other in parts[1:]:
                        df = df.unionByName(_conform(other, merged))
                    df.withColumn(HOUR_COLUMN, F.lit(manifest.partition)).coalesce(1) \
                        .write.mode("error").parquet(str(staging))
                    written = [merged]
                files = sorted(str(p) for p in staging.glob("part-*.parquet"))
                n = sum(pq.read_metadata(p).num_rows for p in files)
                if n != manifest.rows:
                    raise LoadError(f"{where}: wrote {n} rows, the done file lists {manifest.rows}; nothing was "
                                    f"committed. Look at {staging}")
                crash_point("warehouse:staged")
                if self._commit(t, manifest, merged, table_schema, files, props, where, spark):
                    break
            else:
                raise LoadError(f"{where}: {COMMIT_ATTEMPTS} commits lost to other writers of {name}; nothing was "
                                "committed. The load is asked for again", transient=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # never committed: nobody references these files
            raise
        crash_point("warehouse:swapped")
        t = self.table(manifest.dataset, manifest.target)
        snap = t.current_snapshot()
        self._record_load(manifest, n, done_file, done_sha256, snap.snapshot_id if snap else None)
        return LoadResult(name, manifest.partition, n, len(manifest.landed_files), tuple(manifest.schema_ids),
                          tuple(added), self.partition_location(manifest.dataset, manifest.target, manifest.partition),
                          done_file, done_sha256)

    def _commit(self, t, manifest: Manifest, merged: dict, table_schema: dict | None, files: list[str],
                props: dict, where: str, spark: SparkFactory) -> bool:
        """One metadata commit: the schema widened if it must be, the hour's files dropped, the new
        ones added. False if another writer committed first (the caller tries again on its commit)."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.expressions import AlwaysTrue, EqualTo

        if t is None:
            return self._create(manifest, merged, files, props)
        rewrite = table_schema is not None and _needs_rewrite(table_schema, merged)
        rewritten: list[str] = []
        try:
            if rewrite:
                rewritten = self._rewrite(t, merged, spark, manifest.partition, where)
            with t.transaction() as tx:
                if merged != table_schema:
                    with tx.update_schema(allow_incompatible_changes=rewrite) as update:
                        for path, new_type in _type_changes(table_schema, merged):
                            update.update_column(path, field_type=_iceberg_type(new_type))
                        update.union_by_name(_arrow_schema(merged))
                    tx.set_properties({SCHEMA_PROPERTY: json.dumps(merged)})
                if rewrite:
                    tx.delete(AlwaysTrue(), snapshot_properties=props)
                    if rewritten:
                        tx.add_files(rewritten, snapshot_properties=props)
                elif self._holds(t, manifest.partition):
                    tx.delete(EqualTo(HOUR_COLUMN, manifest.partition), snapshot_properties=props)
                if files:
                    tx.add_files(files, snapshot_properties=props)
            return True
        except CommitFailedException:
            for f in rewritten:
                Path(f).unlink(missing_ok=True)
            return False

    @staticmethod
    def _holds(t, partition: str) -> bool:
        from pyiceberg.expressions import EqualTo

        return t.current_snapshot() is not None and any(
            True for _ in t.scan(row_filter=EqualTo(HOUR_COLUMN, partition)).plan_files())

    def _create(self, manifest: Manifest, schema: dict, files: list[str], props: dict) -> bool:
        from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError, TableAlreadyExistsError

        ident = self._identifier(manifest.dataset, manifest.target)
        try:
            self.catalog.create_namespace(ident[0])
        except NamespaceAlreadyExistsError:
            pass
        try:
            tx = self.catalog.create_table_transaction(
                ident, schema=_arrow_schema(schema),
                location=self.table_dir(*ident).as_uri(),
                properties={SCHEMA_PROPERTY: json.dumps(schema), "format-version": "2",
                            "write.metadata.delete-after-commit.enabled": "true",
                            "write.metadata.previous-versions-max": "100"})
            with tx.update_spec() as spec:
                spec.add_identity(HOUR_COLUMN)
            if files:
                tx.add_files(files, snapshot_properties=props)
            tx.commit_transaction()
            return True
        except (TableAlreadyExistsError, CommitFailedException):
            return False  # another load created it first: widen and commit on its table

    def _rewrite(self, t, merged: dict, spark: SparkFactory, partition: str, where: str) -> list[str]:
        """Every file of the table but `partition`'s (which the load replaces) read again and written
        under `merged` (one Spark job), to commit with the schema change; the old files stay for the
        snapshots before it. Each new file holds one hour, its column kept in the data, as an hour's
        partition needs."""
        from pyiceberg.expressions import NotEqualTo

        tasks = list(t.scan(row_filter=NotEqualTo(HOUR_COLUMN, partition)).plan_files())
        old = [task.file.file_path for task in tasks]
        if not old:
            return []
        target = self.table_dir(*t.name()[-2:]) / "data" / f"_rewrite-{uuid.uuid4().hex}"
        df = _conform(spark().read.parquet(*old), {**merged, "fields": merged["fields"] + [
            {"name": HOUR_COLUMN, "type": "string", "nullable": True, "metadata": {}}]})
        df.withColumn("_kl_hour", F.col(HOUR_COLUMN)).repartition("_kl_hour") \
            .write.partitionBy("_kl_hour").mode("error").parquet(str(target))
        paths = sorted(str(p) for p in target.glob("_kl_hour=*/part-*.parquet"))
        got = sum(pq.read_metadata(p).num_rows for p in paths)
        want = sum(task.file.record_count for task in tasks)
        if got != want:
            raise LoadError(f"{where}: rewriting the table under its widened schema gave {got} rows, it holds "
                            f"{want}; nothing was committed. Look at {target}")
        return paths


__all__ = ["IcebergWarehouse"]
