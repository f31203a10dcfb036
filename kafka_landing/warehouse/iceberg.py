"""The open warehouse: one Apache Iceberg table per destination, partitioned by landing hour.

    <root>/_catalog.db                              the SQL catalog (SQLite: nothing to start)
    <root>/<dataset>/<table>/metadata/...           the table's Iceberg metadata: schema, snapshots
    <root>/<dataset>/<table>/data/hour=<H>/<load>/  the Parquet files one load of hour H wrote
    <root>/<dataset>/<table>/_loads/hour=<H>.json   what was loaded: the done file's content hash
    <root>/<dataset>/<table>/_commit.lock           held by each commit to the table (and a rewrite)

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
widening Avro itself applies. Every commit holds the table's lock (in the root's store) for the
moment it takes; a load that rewrites holds it for its rewrite too, so the table's other loads
wait for it rather than make it start over. The catalog's commit is also conditional on the
snapshot it was made on: a load that loses to a writer outside commits again.

A commit whose answer is lost (the catalog's database committed, then the connection dropped) may
have gone through: its files are removed only when the commit is known not to have happened. Else
the load looks for its own snapshot (its summary) in the table, and if it is there, it is loaded.

The event-time tables (`by_event`) are Iceberg tables too, partitioned by event partition and
landing hour (`event_day`/`event_hour`, then `hour`: string columns; an event time may be a
long of epoch milliseconds, which no Iceberg transform takes, and records without a usable one
are in `__unknown__<landing day>`). A version of an event partition
replaces only the landing hours whose files changed since the version the table holds: a late
record costs its landing hour's part of the day, not the day.

The root is a local folder or a `gs://bucket/prefix`: Spark writes the Parquet files there (the
GCS connector), pyiceberg its metadata (`iceberg_io`), and the load records, the listing and the
removing of files go through the root's store (`store.open_store`), one code path for both. A
bucket holds no SQLite file: a gs:// root needs KAFKA_LANDING_ICEBERG_CATALOG_URI (PostgreSQL).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from kafka_landing.crash_points import crash_point
from kafka_landing.errors import KafkaLandingError, is_transient
from kafka_landing.handoff.manifests import LandedFile, Manifest, content_sha
from kafka_landing.naming import check_identifier
from kafka_landing.spark_setup import spark_readable, type_ddl
from kafka_landing.store import open_store
from kafka_landing.store.base import STAGING_MAX_AGE_SECONDS, LandingStore
from kafka_landing.warehouse.backend import (
    LoadError,
    LoadRecords,
    LoadResult,
    SparkFactory,
    Warehouse,
    verify_files,
)
from kafka_landing.warehouse.schema_evolution import merge_schemas

log = logging.getLogger(__name__)

HOUR_COLUMN = "hour"  # the landing hour of each row, a partition column of every table
SCHEMA_PROPERTY = "kafka-landing.schema"  # the table's schema in Spark's terms: what `merge_schemas` widens
# kafka-landing.<key> on every load's snapshots: what it loaded, and which landing hours it replaced
SNAPSHOT_KEYS = ("partition", "done-file", "sha256", "rows", "attempt", "landing-hours", "hours")
COMMIT_ATTEMPTS = 8  # commits lost to a concurrent writer of the same table before the load gives up (transient)
# Every table's: old metadata files dropped as commits go; appends merge small manifests once 100
# pile up (Iceberg Java's default, not pyiceberg's), so a year of hourly commits stays a few
# manifests a full scan plans in a fraction of a second, not 8,760 files to open.
TABLE_PROPERTIES = {"format-version": "2", "write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "100", "commit.manifest-merge.enabled": "true"}


def _on_gcs(root: str) -> bool:
    return str(root).startswith("gs://")


def _catalog_uri(root: str, uri: str | None) -> str:
    """The catalog's database: `uri`, else SQLite in a local root. A bucket cannot hold SQLite (no
    locks, no partial writes), so a gs:// root without one is refused: terminal, as config is."""
    if uri:
        return uri
    if _on_gcs(root):
        raise LoadError(f"the Iceberg warehouse root {root} is a bucket, which cannot hold the SQLite catalog: set "
                        "KAFKA_LANDING_ICEBERG_CATALOG_URI to the catalog's database (PostgreSQL in production, "
                        "e.g. postgresql+psycopg2://user:password@host/db; or a local sqlite:////path/catalog.db)",
                        transient=False)
    from sqlalchemy.engine import URL

    # Built, not formatted: a root's %, # or ? would be read as URL syntax (`per%20cent` as `per cent`).
    return URL.create("sqlite", database=str(Path(root).expanduser().resolve() / "_catalog.db")).render_as_string()


def _io_properties(root: str) -> dict[str, str]:
    """The catalog's FileIO properties: none for a local root; `iceberg_io`'s for gs://."""
    if not _on_gcs(root):
        return {}
    from kafka_landing.warehouse.iceberg_io import emulator_host, gcs_properties

    return gcs_properties(emulator_host())


def _catalog(root: str, uri: str | None):
    props = _io_properties(root)
    return _cached_catalog(root, _catalog_uri(root, uri), tuple(sorted(props.items())))


@functools.lru_cache(maxsize=8)
def _cached_catalog(root: str, uri: str, props: tuple[tuple[str, str], ...]):
    """One catalog per (root, database, FileIO properties: the emulator's endpoint among them)."""
    from pyiceberg.catalog.sql import SqlCatalog

    if _on_gcs(root):
        return SqlCatalog("kafka_landing", uri=uri, warehouse=root.rstrip("/"), **dict(props))
    base = Path(root).expanduser().resolve()
    base.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("kafka_landing", uri=uri, warehouse=str(base))  # a plain path: `_table_uri` says why


@functools.lru_cache(maxsize=8)
def _file_io(root: str, props: tuple[tuple[str, str], ...]):
    """What reads the Parquet footers of files not yet committed: the catalog's FileIO."""
    from pyiceberg.io import load_file_io

    return load_file_io(dict(props), location=root)


def _prop(key: str) -> str:
    return f"kafka-landing.{key}"


def _schema_of(t) -> dict | None:
    """A table's schema in Spark's terms (`SCHEMA_PROPERTY`); None for no table."""
    return json.loads(t.properties[SCHEMA_PROPERTY]) if t is not None else None


def _snapshot_id(t) -> int | None:
    snap = t.current_snapshot() if t is not None else None
    return snap.snapshot_id if snap is not None else None


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


def _iceberg_type(spark_type: str):
    from pyiceberg.types import BinaryType, DecimalType, DoubleType, LongType

    simple = {"long": LongType(), "double": DoubleType(), "binary": BinaryType()}
    if spark_type in simple:
        return simple[spark_type]
    precision, scale = spark_type[len("decimal("):-1].split(",")
    return DecimalType(int(precision), int(scale))


def _with_columns(schema: dict, columns: tuple[str, ...]) -> dict:
    return {**schema, "fields": schema["fields"] + [{"name": c, "type": "string", "nullable": True, "metadata": {}}
                                                    for c in columns]}


def _arrow_schema(schema: dict, columns: tuple[str, ...]):
    """The table's columns as Arrow (what pyiceberg takes), its partition columns last."""
    return to_arrow_schema(StructType.fromJson(_with_columns(schema, columns)), timezone="UTC")


@dataclass(frozen=True)
class _Staged:
    """A landing hour `stage` wrote ahead of its load."""

    keys: dict[str, str]  # its content (`_key` by landing hour): a load of other content writes its own
    hour_schema: dict  # the hour's own schema, as its `_read` merged it
    schema: dict  # the schema its file was written under
    folder: str  # its files: <folder>/part-*.parquet (the `_kl_hour=<hour>` folder of the stage), in the root


def _whole(store: LandingStore, manifest: Manifest) -> bool:
    """Every file the manifest lists is there with its rows; if not, its hour loads alone and says so."""
    try:
        verify_files(store, manifest)
    except LoadError:
        return False
    return True


def _key(files) -> str:
    """What a landing hour gives a partition: its files, rows and schema ids, hashed."""
    return content_sha(json.dumps(sorted([f.path, f.rows, f.schema_id] for f in files)).encode())


class IcebergWarehouse(Warehouse):
    """Iceberg tables in a SQL catalog, written with Spark (Parquet files) and committed with pyiceberg."""

    kind = "iceberg"

    def __init__(self, root: str, catalog_uri: str | None = None, column: str = HOUR_COLUMN):
        self.root = root
        self.catalog_uri = catalog_uri  # None: SQLite under the root; or a SQLAlchemy URL (PostgreSQL)
        self.column = column  # the partition a load replaces: hour, or event_day / event_hour (`by_event`)
        self._seen: dict[tuple[str, str], object] = {}  # tables as `loaded` read them
        self._staged: dict[tuple[str, str, str], _Staged] = {}  # what `stage` wrote, by (dataset, table, hour)
        self._ahead: dict[tuple[str, str, str], tuple[str, ...]] = {}  # what it committed: the columns each added

    @property
    def catalog(self):
        return _catalog(self.root, self.catalog_uri)

    @functools.cached_property
    def store(self) -> LandingStore:
        """The root as a store (a folder or a bucket): the load records, and listing and removing files."""
        return open_store(self.root)

    def _rel(self, dataset: str, table: str, *parts: str) -> str:
        """A path in the table's folder, relative to the root (what the store takes)."""
        return "/".join((check_identifier(dataset, "dataset"), check_identifier(table, "table"), *parts))

    def _location(self, rel: str) -> str:
        """Where Spark writes and pyiceberg reads `rel`: a plain path, or a gs:// URI."""
        return self.store.location(rel)

    def _parquet_files(self, rel_dir: str) -> list[str]:
        """The part-*.parquet files Spark wrote under `rel_dir`, at any depth, by location."""
        return [self._location(r) for r in self.store.walk(rel_dir, ".parquet")
                if fnmatch.fnmatchcase(r.rsplit("/", 1)[-1], "part-*.parquet")]

    def _rows_in(self, files: list[str]) -> int:
        """Rows of Parquet files from their footers (a ranged read each on gs://)."""
        io = _file_io(self.root, tuple(sorted(_io_properties(self.root).items())))
        rows = 0
        for f in files:
            with io.new_input(f).open() as footer:
                rows += pq.read_metadata(footer).num_rows
        return rows

    @property
    def columns(self) -> tuple[str, ...]:
        """The table's partition columns, in its spec's order."""
        return (HOUR_COLUMN,) if self.column == HOUR_COLUMN else (self.column, HOUR_COLUMN)

    def by_event(self, granularity: str, field: str | None) -> IcebergWarehouse:
        """The event-time tables: <dataset>.<table>__by_event, partitioned by event_<granularity> and hour."""
        return IcebergWarehouse(self.root, self.catalog_uri, column=f"event_{granularity}")

    def table_dir(self, dataset: str, table: str) -> Path:
        """The table's folder on a local root (tools and tests look into it); `table_location` for any root."""
        if _on_gcs(self.root):
            raise ValueError(f"{dataset}.{table}: the Iceberg warehouse root {self.root} is a bucket, not a "
                             "folder; use table_location")
        return (Path(self.root).expanduser().resolve() / check_identifier(dataset, "dataset")
                / check_identifier(table, "table"))

    def table_location(self, dataset: str, table: str) -> str:
        """The table's folder as people and Spark name it: a plain path, or a gs:// URI."""
        return self._location(self._rel(dataset, table))

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
        return f"{dataset}.{table} ({self.table_location(dataset, table)}) where {self.column} = '{partition}'"

    def check_writable(self) -> None:
        _catalog_uri(self.root, self.catalog_uri)  # a bucket without a catalog database: terminal, first
        root = self.root
        try:
            self.store.check_writable()
            root = self.store.root
        except OSError as exc:
            raise LoadError(f"Iceberg warehouse root {root} cannot be written ({exc.strerror or exc}): check "
                            "KAFKA_LANDING_WAREHOUSE_ROOT and its permissions") from None
        try:
            self.catalog.list_namespaces()
        except Exception as exc:  # the catalog's database: SQLAlchemy's errors, by driver
            raise LoadError(f"the Iceberg catalog of {root} cannot be opened ({type(exc).__name__}: {exc}): check "
                            "KAFKA_LANDING_ICEBERG_CATALOG_URI and that its database is up", transient=True) from None

    def partition_files(self, dataset: str, table: str, partition: str) -> list:
        """The data files (pyiceberg `DataFile`) the current snapshot holds for a partition: metadata only."""
        from pyiceberg.expressions import EqualTo

        t = self.table(dataset, table)
        if t is None or t.current_snapshot() is None:
            return []
        return [task.file for task in t.scan(row_filter=EqualTo(self.column, partition)).plan_files()]

    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """Rows of a partition from the table's metadata (its data files' record counts): no data
        read. None if it holds no file."""
        files = self.partition_files(dataset, table, partition)
        return sum(f.record_count for f in files) if files else None

    def spark_table(self, spark, dataset: str, table: str, snapshot_id: int | None = None):
        """The table as a Spark DataFrame: its current snapshot, or `snapshot_id`'s (time travel), under
        that snapshot's schema. pyiceberg lists the snapshot's data files; Spark reads them as Parquet by
        column name under that schema: a column a file lacks reads as nulls, a decimal a file holds at a
        smaller precision reads at the table's, as an Iceberg reader reads files without field ids (every
        load's: Spark wrote them). What Iceberg's own Spark catalog would give, were there one that
        loads on Spark 4.2 (jvm/pom.xml). Exact for these tables: loads write no delete file, and every
        other widening rewrites the files in the commit that widens the schema."""
        t = self.table(dataset, table)
        if t is None:
            raise KafkaLandingError(f"{dataset}.{table} is no table of the Iceberg warehouse {self.root} "
                                    "(it is made by its first load)")
        scan = t.scan(snapshot_id=snapshot_id)
        schema = from_arrow_schema(scan.projection().as_arrow())
        tasks = list(scan.plan_files())
        if any(task.delete_files for task in tasks):
            raise KafkaLandingError(f"{dataset}.{table}: the snapshot holds delete files, which no load writes "
                                    "and this reader does not apply")
        if not tasks:
            return spark.createDataFrame([], schema)
        return self._parquet_reader(spark).schema(schema).parquet(*[task.file.file_path for task in tasks])

    def _parquet_reader(self, session):
        """`session.read`, for this root's Parquet files. On gs:// without Parquet's vectored reads,
        which call a Hadoop method the GCS connector needs and Hadoop 3.5 lacks (`spark_setup.gcs_config`
        sets the same for the processes it starts; a session may run on a server started otherwise)."""
        if _on_gcs(self.root):
            session.conf.set("parquet.hadoop.vectored.io.enabled", "false")  # the session's Hadoop conf
        return session.read

    # --- what was loaded ----------------------------------------------------------

    @functools.cached_property
    def records(self) -> LoadRecords:
        return LoadRecords(self.store, self.column)

    def _ledger(self, dataset: str, table: str, partition: str) -> str:
        """The load record of a partition, relative to the root (`store`)."""
        return self.records.path(dataset, table, partition)

    def _recorded(self, dataset: str, table: str, partition: str) -> dict | None:
        return self.records.read(dataset, table, partition)

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        """The load record, unless the table holds a newer load of the partition than it names (a load
        that died between its commit and its record): then what that load's snapshot says."""
        record = self._recorded(dataset, table, partition)
        key = (dataset, table)
        if key not in self._seen:  # one metadata read per table for the life of this backend
            self._seen[key] = self.table(dataset, table)
        done = self.committed(self._seen[key], partition)
        if done is None or (record and record.get("snapshot_id") == done["snapshot_id"]):
            return record
        return {"done_file": done["done-file"] or None, "sha256": done["sha256"] or None, "rows": int(done["rows"]),
                "attempt": done["attempt"], "snapshot_id": done["snapshot_id"], "hours": json.loads(done["hours"] or "{}")}

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        return self.records.partitions(dataset, table)

    def _record_load(self, manifest: Manifest, done_file: str | None, sha: str | None, snapshot_id: int | None,
                     hours: dict[str, str]) -> None:
        self.records.write(manifest.dataset, manifest.target, manifest.partition, {
            "done_file": done_file, "sha256": sha, "rows": manifest.rows, "attempt": manifest.attempt,
            "snapshot_id": snapshot_id, "hours": hours})

    def committed(self, t, partition: str) -> dict | None:
        """The summary of the newest snapshot that loaded a partition, as the table itself records it."""
        if t is None:
            return None
        for snap in sorted(t.metadata.snapshots, key=lambda s: s.sequence_number, reverse=True):
            props = snap.summary.additional_properties if snap.summary else {}
            if props.get(_prop("column"), HOUR_COLUMN) != self.column:
                continue
            if props.get(_prop("partition")) == partition:
                return {k: props.get(_prop(k)) for k in SNAPSHOT_KEYS} | {"snapshot_id": snap.snapshot_id}
            together = props.get(_prop("loads"), "")  # the hours of a run committed together (`stage`)
            if f'"{partition}"' in together and partition in (loads := json.loads(together)):
                return {k: loads[partition].get(k) for k in SNAPSHOT_KEYS} | {"snapshot_id": snap.snapshot_id}
        return None

    # --- loading ------------------------------------------------------------------

    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        """Replace the landing hours of the partition whose files changed since the load the table
        holds (a landing hour's table: the hour itself), in one commit."""
        verify_files(store, manifest)
        name = f"{manifest.dataset}.{manifest.target}"
        where = f"{name} {self.column} {manifest.partition} (schema ids {list(manifest.schema_ids)})"
        location = self.partition_location(manifest.dataset, manifest.target, manifest.partition)
        groups = manifest.by_landing_hour()
        keys = {h: _key(fs) for h, fs in groups.items()}
        t = self.table(manifest.dataset, manifest.target)
        done = self.committed(t, manifest.partition)
        if done_sha256 and done and done.get("sha256") == done_sha256:  # committed before its ledger was written
            ahead = self._ahead.pop((manifest.dataset, manifest.target, manifest.partition), None)  # by `stage`
            self._record_load(manifest, done_file, done_sha256, done["snapshot_id"], keys)
            return LoadResult(name, manifest.partition, manifest.rows, 0 if ahead is None else len(manifest.landed_files),
                              tuple(manifest.schema_ids), ahead or (), location, done_file, done_sha256)
        # What each landing hour gave the partition the table holds: as its newest snapshot of it says
        # (true even where a load died before its record), else as recorded (snapshots expire).
        held = (json.loads(done["hours"]) if done and done.get("hours")
                else (self._recorded(manifest.dataset, manifest.target, manifest.partition) or {}).get("hours"))
        if self.column == HOUR_COLUMN or not isinstance(held, dict):
            changed, whole = dict(groups), True  # a landing hour, or an event partition held as who knows what
        else:
            changed = {h: fs for h, fs in groups.items() if held.get(h) != keys[h]}
            changed.update({h: () for h in held if h not in groups})  # landing hours that left the partition
            whole = False
        props = self._props(manifest, done_file, done_sha256, changed, keys)
        replaced = self._replaced(manifest.partition, None if whole else sorted(changed))
        staged = self._staged.pop((manifest.dataset, manifest.target, manifest.partition), None)
        if staged is not None and (staged.keys != keys or not whole):
            self.store.delete(staged.folder)  # staged from other content: not this load's
            staged = None
        reads, hour_schema = (None, staged.hour_schema) if staged else self._read(store, changed, spark, where, manifest.partition)
        want = sum(f.rows for fs in changed.values() for f in fs)
        staging = staged.folder if staged else self._rel(manifest.dataset, manifest.target, "data",
                                                          f"{self.column}={manifest.partition}", uuid.uuid4().hex)
        written, added = (staged.schema if staged else None), []
        for _ in range(COMMIT_ATTEMPTS):
            try:
                t = self.table(manifest.dataset, manifest.target)
                table_schema = _schema_of(t)
                merged, added = (merge_schemas(table_schema, hour_schema, where) if hour_schema
                                 else (table_schema, []))
                if merged is None:  # nothing to make a table of yet: an empty first load
                    self._record_load(manifest, done_file, done_sha256, None, keys)
                    return LoadResult(name, manifest.partition, 0, 0, (), (), location, done_file, done_sha256)
                if hour_schema and written != merged:  # (re)write the changed hours under the table's schema
                    if reads is None:  # staged under another schema than the table's now
                        reads, _ = self._read(store, changed, spark, where, manifest.partition)
                    self.store.delete(staging)
                    self._write(reads, merged, self._location(staging))
                    written = merged
                files = self._parquet_files(staging)
                n = self._rows_in(files)
                if n != want:
                    raise LoadError(f"{where}: wrote {n} rows, the manifest lists {want} for landing hours "
                                    f"{sorted(changed)}; nothing was committed. Look at {self._location(staging)}")
                crash_point("warehouse:staged")
            except BaseException:
                self.store.delete(staging)  # never committed: nobody references these files
                raise
            # What the commit leaves on an error is `_commit`'s to decide: it may have gone through.
            if self._commit(manifest, merged, table_schema, files, props, replaced, spark, where, staging):
                break
        else:
            self.store.delete(staging)
            raise LoadError(f"{where}: {COMMIT_ATTEMPTS} commits lost to other writers of {name}; nothing was "
                            "committed. The load is asked for again", transient=True)
        crash_point("warehouse:swapped")
        self._seen.pop((manifest.dataset, manifest.target), None)
        now = self.committed(self.table(manifest.dataset, manifest.target), manifest.partition)
        self._record_load(manifest, done_file, done_sha256, now["snapshot_id"] if now else None, keys)
        return LoadResult(name, manifest.partition, manifest.rows, sum(len(fs) for fs in changed.values()),
                          tuple(manifest.schema_ids), tuple(added), location, done_file, done_sha256)

    def _replaced(self, partition: str, hours: list[str] | None):
        """The rows a load replaces: the whole partition, or these landing hours' part of it."""
        from pyiceberg.expressions import And, EqualTo, In

        whole = EqualTo(self.column, partition)
        return whole if hours is None or self.column == HOUR_COLUMN else And(whole, In(HOUR_COLUMN, hours))

    @staticmethod
    def _read(store: LandingStore, changed: dict[str, tuple[LandedFile, ...]], spark: SparkFactory, where: str,
              partition: str):
        """One Spark read per (landing hour, schema id) of the partition, each with its writer schema,
        and their schema merged: nothing is read yet (Spark reads as it writes)."""
        reads, schema = [], None
        session = None
        for hour, files in sorted(changed.items()):
            for sid in sorted({f.schema_id for f in files if f.rows}):
                session = session or spark()
                paths = [f.path for f in files if f.schema_id == sid and f.rows]
                reader = spark_readable(store.avro_schema(paths[0]))  # one header: the id's files share it
                df = session.read.format("avro").option("avroSchema", json.dumps(reader)) \
                    .load([store.location(p) for p in paths])
                schema, _ = merge_schemas(schema, df.schema.jsonValue(), f"{where}, landing hour {hour}, schema id {sid}")
                reads.append((partition, hour, df))
        return reads, schema

    @staticmethod
    def _read_together(store: LandingStore, manifests: list[Manifest], spark: SparkFactory, where: str):
        """The landing hours' files, one Spark read per writer schema across all of them (each file's
        hour from its folder, `_kl_hour`), and each hour's schema: what `_read` gives one hour. The
        writer schema is read from each (hour, schema id)'s files, never assumed from the id."""
        by_schema: dict[str, list[str]] = {}  # reader schema (JSON) -> its files
        of_hour: dict[str, set[str]] = {}
        for m in manifests:
            for sid in sorted({f.schema_id for f in m.landed_files if f.rows}):
                paths = [f.path for f in m.landed_files if f.schema_id == sid and f.rows]
                reader = json.dumps(spark_readable(store.avro_schema(paths[0])), sort_keys=True)
                by_schema.setdefault(reader, []).extend(paths)
                of_hour.setdefault(m.partition, set()).add(reader)
        session, reads, spark_schema = spark(), [], {}
        hour = F.regexp_extract(F.col("_metadata.file_path"), rf"/{HOUR_COLUMN}=([^/]+)/[^/]+$", 1)
        for reader, paths in by_schema.items():
            df = session.read.format("avro").option("avroSchema", reader).load([store.location(p) for p in paths])
            spark_schema[reader] = df.schema.jsonValue()
            reads.append((None, None, df.withColumn("_kl_hour", hour)))
        schemas = {}
        for partition, readers in of_hour.items():
            schema = None
            for reader in sorted(readers):
                schema, _ = merge_schemas(schema, spark_schema[reader], f"{where}, landing hour {partition}")
            schemas[partition] = schema
        return reads, schemas

    def stage(self, store: LandingStore, loads: list[tuple[Manifest, str | None, str | None]],
              spark: SparkFactory) -> int:
        """Load the landing hours of a run together, ahead of their own loads: per table, one Spark
        job writes them all and one metadata commit adds each as a snapshot of its own (with its
        properties, as its own load would have made it). Each hour's `load_partition` then finds
        its content committed and only records it: a day costs one job and one commit, not 24 of
        each. An hour joins only where its rows would be written as they are here, under the schema
        the table will have after it; the others, and every hour staged whose commit fails, load
        alone (from the staged files where their content and schema still match). Files of a stage
        never committed are removed by `upkeep` after a day, as a killed load's are."""
        if self.column != HOUR_COLUMN:
            return 0
        by_table: dict[tuple[str, str], list[tuple[Manifest, str | None, str | None]]] = {}
        for load in loads:
            by_table.setdefault((load[0].dataset, load[0].target), []).append(load)
        committed = 0
        for (dataset, table), group in sorted(by_table.items()):
            where = f"{dataset}.{table} hours {group[0][0].partition}..{group[-1][0].partition} (loaded together)"
            t = self.table(dataset, table)
            table_schema = _schema_of(t)
            todo = [load for load in group if load[0].rows and _whole(store, load[0])
                    and (self.committed(t, load[0].partition) or {}).get("sha256") != load[2]]
            if len(todo) < 2:
                continue
            reads, schemas = self._read_together(store, [m for m, _, _ in todo], spark, where)
            schema = table_schema
            for hour_schema in schemas.values():
                schema, _ = merge_schemas(schema, hour_schema, where)
            # The table's schema after each hour's own load must be the run's: else that hour loads alone.
            alike = [ld for ld in todo if merge_schemas(table_schema, schemas[ld[0].partition], where)[0] == schema]
            if len(alike) < 2 or (table_schema is not None and _needs_rewrite(table_schema, schema)):
                continue
            folder = self._rel(dataset, table, "data", f"_stage-{uuid.uuid4().hex}")
            hours = sorted(m.partition for m, _, _ in alike)
            if len(alike) < len(todo):
                reads = [(p, h, df.where(F.col("_kl_hour").isin(hours))) for p, h, df in reads]
            self._write(reads, schema, self._location(folder))
            files, loads = [], {}
            for m, done_file, sha in alike:
                keys = {h: _key(fs) for h, fs in m.by_landing_hour().items()}
                hour_dir = f"{folder}/_kl_hour={m.partition}"
                mine = [self._location(r) for r in self.store.list(hour_dir, "part-*.parquet")]
                if self._rows_in(mine) != m.rows:
                    self.store.delete(hour_dir)  # it loads alone, and says what it finds
                    continue
                self._staged[(dataset, table, m.partition)] = _Staged(keys, schemas[m.partition], schema, hour_dir)
                files += mine
                loads[m.partition] = {k[len("kafka-landing."):]: v
                                      for k, v in self._props(m, done_file, sha, keys, keys).items()}
            crash_point("warehouse:staged")
            try:
                together = self._commit_together(dataset, table, t, table_schema, schema, files, loads, folder, where)
            except BaseException:
                for m, _, _ in alike:  # it may have committed: each hour loads alone, from files of its own
                    self._staged.pop((dataset, table, m.partition), None)
                raise
            if together:
                _, added = merge_schemas(table_schema, schema, where)
                for m, _, _ in alike:  # committed: each hour's load only records it
                    if self._staged.pop((dataset, table, m.partition), None) is not None:
                        self._ahead[(dataset, table, m.partition)] = tuple(added)
                        added = []  # the run's first hour added the columns
                crash_point("warehouse:swapped")
                committed += len(loads)
        return committed

    def _commit_together(self, dataset: str, table: str, t, table_schema: dict | None, schema: dict,
                         files: list[str], loads: dict[str, dict], folder: str, where: str) -> bool:
        """One commit of many landing hours, under the table's lock: their rows the table held dropped,
        their files (in `folder`) added, each hour's load (`_props`) in the snapshots'
        `kafka-landing.loads`. False if the table changed since `t`, the table `stage` planned on
        (its hours then load alone: one may have loaded newer content meanwhile)."""
        from pyiceberg.expressions import In

        if len(loads) < 2:
            return False
        props = {_prop("column"): self.column, _prop("loads"): json.dumps(loads, sort_keys=True)}
        with self._lock(dataset, table) as held:
            now = self.table(dataset, table)
            if _snapshot_id(now) != _snapshot_id(t) or _schema_of(now) != table_schema:
                return False
            held.fence()  # the catalog's commit is no write the store can make conditional
            if now is None:
                return self._create(dataset, table, schema, [(files, props)], where, (folder,))
            tx = now.transaction()
            self._widen(tx, table_schema, schema, rewrite=False)
            replaced = In(HOUR_COLUMN, sorted(loads))
            if self._holds(now, replaced):
                tx.delete(replaced, snapshot_properties=props)
            tx.add_files(files, snapshot_properties=props, check_duplicate_files=False)
            return self._send(tx, self._identifier(dataset, table), now, props, where, [folder])

    def _widen(self, tx, table_schema: dict, merged: dict, rewrite: bool) -> None:
        """The table's schema made `merged` in the transaction: each changed type by itself, then
        what is new (`_type_changes` says why not union_by_name alone)."""
        if merged == table_schema:
            return
        with tx.update_schema(allow_incompatible_changes=rewrite) as update:
            for path, new_type in _type_changes(table_schema, merged):
                update.update_column(path, field_type=_iceberg_type(new_type))
            update.union_by_name(_arrow_schema(merged, self.columns))
        tx.set_properties({SCHEMA_PROPERTY: json.dumps(merged)})

    def _props(self, manifest: Manifest, done_file: str | None, sha: str | None, changed, keys: dict) -> dict:
        """What a load's snapshots say (`SNAPSHOT_KEYS`, each `kafka-landing.<key>`): `committed` reads them."""
        return {_prop("partition"): manifest.partition, _prop("column"): self.column,
                _prop("done-file"): done_file or "", _prop("sha256"): sha or "",
                _prop("rows"): str(manifest.rows), _prop("attempt"): str(manifest.attempt),
                _prop("landing-hours"): ",".join(sorted(changed)), _prop("hours"): json.dumps(keys)}

    def _write(self, reads: list, schema: dict, staging: str) -> None:
        """The rows of `reads` ((partition, landing hour, dataframe); hour None: the dataframe's
        `_kl_hour` column says it) under the table's schema, in `staging/_kl_hour=<hour>/` (`staging`
        a path or a gs:// URI), their partition columns kept in the data (`add_files` takes a file's
        partition from its column statistics): one Spark job."""
        df = None
        for partition, hour, part in reads:
            if hour is None:
                part = _conform(part, _with_columns(schema, ("_kl_hour",))).withColumn(HOUR_COLUMN, F.col("_kl_hour"))
            else:
                part = _conform(part, schema).withColumns({HOUR_COLUMN: F.lit(hour), "_kl_hour": F.lit(hour)})
            if self.column != HOUR_COLUMN:
                part = part.withColumn(self.column, F.lit(partition))
            df = part if df is None else df.unionByName(part)
        hours = {h for _, h, _ in reads}
        if len(hours) == 1 and None not in hours:  # no partitioned write: Spark would sort the rows by a constant
            df.drop("_kl_hour").coalesce(1).write.mode("error").parquet(f"{staging}/_kl_hour={hours.pop()}")
            return
        df.repartition("_kl_hour").write.partitionBy("_kl_hour").mode("error").parquet(staging)  # a file each

    def _commit(self, manifest: Manifest, merged: dict, table_schema: dict | None, files: list[str], props: dict,
                replaced, spark: SparkFactory, where: str, staging: str) -> bool:
        """One metadata commit, under the table's lock (`_lock`): the schema widened if it must be, the
        replaced rows' files dropped, the new ones added. A widening Iceberg cannot make in metadata
        rewrites the table's other files here, holding the lock, so no load of the table commits
        meanwhile and the rewrite is done once. False if the table's schema is no longer `table_schema`
        (`files` were written for it) or another writer committed first: the caller tries again. An
        error before the commit call removes what the load wrote (`staging`); one from the call
        itself leaves what `_send` decides."""
        from pyiceberg.expressions import AlwaysTrue

        ident = (manifest.dataset, manifest.target)
        with self._lock(*ident) as held:
            t = self.table(*ident)
            if _schema_of(t) != table_schema:
                return False  # widened meanwhile: the caller writes its files again under the new schema
            if t is None:
                held.fence()  # the catalog's commit is no write the store can make conditional
                return self._create(*ident, merged, [(files, props)], where, (staging,))
            rewrite = _needs_rewrite(table_schema, merged)
            target, rewritten = None, []
            try:
                if rewrite:
                    target, rewritten = self._rewrite(t, merged, spark, replaced, where)
                tx = t.transaction()
                self._widen(tx, table_schema, merged, rewrite)
                if rewrite:
                    tx.delete(AlwaysTrue(), snapshot_properties=props)
                    if rewritten:
                        tx.add_files(rewritten, snapshot_properties=props, check_duplicate_files=False)
                elif self._holds(t, replaced):
                    tx.delete(replaced, snapshot_properties=props)
                if files:  # new files under fresh names: no need to scan the table for them (a year of hours)
                    tx.add_files(files, snapshot_properties=props, check_duplicate_files=False)
                held.fence()  # the catalog's commit is no write the store can make conditional
            except BaseException:
                self.store.delete(staging)  # never committed: nobody references these files
                if target is not None:
                    self.store.delete(target)
                raise
            if self._send(tx, ident, t, props, where, [staging, target]):
                return True
        if target is not None:
            self.store.delete(target)  # never committed: the next attempt rewrites on the new snapshot
        return False

    def _lock(self, dataset: str, table: str):
        """The table's commit lock, in the root's store: every load's commit holds it, and a load that
        rewrites the table holds it for the rewrite too (hours of it; a crashed holder loses it)."""
        return self.store.lock(self._rel(dataset, table, "_commit.lock"))

    def _send(self, tx, ident: tuple[str, str], base, props: dict, where: str, discard: list[str | None]) -> bool:
        """Ask the catalog to commit `tx`, made on table `ident` as `base` (None: a new one). True if it
        committed; False if it was refused (the table changed since `base`, or another load made it):
        nothing committed. Any other error leaves the outcome unknown: the database may have
        committed and lost its answer. Then the table is read again: if a snapshot since `base` has
        this commit's `props`, it committed. If none has, `discard` (folders only this commit
        lists) is removed and the error raised as it was. If the table cannot be read, nothing is
        removed: upkeep removes after a day what no snapshot lists."""
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

        try:
            tx.commit_transaction()
            crash_point("warehouse:committing")  # inside the commit: the catalog has it, the load has no answer yet
            return True
        except (CommitFailedException, ValidationException, TableAlreadyExistsError):
            return False  # pyiceberg's word that nothing committed
        except Exception as exc:  # noqa: BLE001 - classified below, and raised as it was unless found
            lost = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            kept = [self._location(rel) for rel in discard if rel]
            try:
                found = self._own_snapshot(ident, base, props)
            except Exception as looking:  # noqa: BLE001 - the database still away, most likely
                raise LoadError(f"{where}: the catalog's answer to the commit was lost ({lost}), and the table "
                                f"cannot be read to see whether the commit went through ({type(looking).__name__}: "
                                f"{looking}). Its files are kept: {kept}. The load is asked for again: it finds "
                                "the commit in the table's snapshots, or commits; files no snapshot lists are "
                                "removed by upkeep after a day", transient=is_transient(exc)) from exc
            if found is not None:
                log.warning("%s: the catalog's answer to the commit was lost (%s), but the table holds it "
                            "(snapshot %s): loaded", where, lost, found)
                return True
            for rel in discard:
                if rel:
                    self.store.delete(rel)  # the table holds no snapshot of it: nobody references these files
            raise

    def _own_snapshot(self, ident: tuple[str, str], base, props: dict) -> int | None:
        """The id of a snapshot made since `base` (the table a commit was made on; None: before the
        table) whose summary has `props`, or None: the current snapshot's parent chain, walked back
        to `base`'s current snapshot, not the whole history."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            t = self.catalog.load_table(ident)
        except NoSuchTableError:
            return None
        start = base.current_snapshot() if base is not None else None
        stop = start.snapshot_id if start is not None else None
        snap = t.current_snapshot()
        while snap is not None and snap.snapshot_id != stop:
            summary = snap.summary.additional_properties if snap.summary else {}
            if all(summary.get(k) == v for k, v in props.items()):
                return snap.snapshot_id
            snap = t.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
        return None

    @staticmethod
    def _holds(t, rows) -> bool:
        return t.current_snapshot() is not None and any(True for _ in t.scan(row_filter=rows).plan_files())

    def _create(self, dataset: str, table: str, schema: dict, adds: list[tuple[list[str], dict]],
                where: str | None = None, discard: tuple[str, ...] = ()) -> bool:
        """The table, made with its first loads' files ((files, snapshot properties) each) in one
        commit (`_send`); False if another load made it first. An error before the commit removes
        `discard`, the folders of those files."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError

        ident = self._identifier(dataset, table)
        try:
            try:
                self.catalog.create_namespace(ident[0])
            except NamespaceAlreadyExistsError:
                pass
            tx = self.catalog.create_table_transaction(
                ident, schema=_arrow_schema(schema, self.columns), location=self._table_uri(*ident),
                properties={SCHEMA_PROPERTY: json.dumps(schema), **TABLE_PROPERTIES})
            with tx.update_spec() as spec:
                for column in self.columns:
                    spec.add_identity(column)
            for files, props in adds:
                if files:
                    tx.add_files(files, snapshot_properties=props, check_duplicate_files=False)
        except BaseException:
            for rel in discard:
                self.store.delete(rel)  # never committed: nobody references these files
            raise
        return self._send(tx, ident, None, adds[-1][1], where or f"{dataset}.{table}", list(discard))

    def _table_uri(self, dataset: str, table: str) -> str:
        """The table's location in its metadata: the plain path on a local root, the gs:// URI on a
        bucket. Not a file:// URI: pyiceberg writes metadata to its location's path as written, never
        unquoted, so a root with a space kept its tables' metadata in a `%20` folder beside it
        (tables made so keep their location)."""
        return self.table_location(dataset, table)

    def _rewrite(self, t, merged: dict, spark: SparkFactory, replaced, where: str) -> tuple[str | None, list[str]]:
        """Every file of the table but the rows the load replaces read again and written under `merged`
        (one Spark job), to commit with the schema change; the old files stay for the snapshots before
        it. Each new file holds one partition, its columns kept in the data. (Its folder, relative to
        the root, for removing it if the commit loses; the files' locations.)"""
        from pyiceberg.expressions import Not

        tasks = list(t.scan(row_filter=Not(replaced)).plan_files())
        old = [task.file.file_path for task in tasks]
        if not old:
            return None, []
        target = self._rel(*t.name()[-2:], "data", f"_rewrite-{uuid.uuid4().hex}")
        copies = {f"_kl_{i}": c for i, c in enumerate(self.columns)}
        df = _conform(self._parquet_reader(spark()).parquet(*old), _with_columns(merged, self.columns))
        df.withColumns({k: F.col(c) for k, c in copies.items()}).repartition(*copies) \
            .write.partitionBy(*copies).mode("error").parquet(self._location(target))
        paths = [self._location(r) for r in self.store.glob(f"{target}/{'/'.join(['*'] * len(copies))}/part-*.parquet")]
        got = self._rows_in(paths)
        want = sum(task.file.record_count for task in tasks)
        if got != want:
            raise LoadError(f"{where}: rewriting the table under its widened schema gave {got} rows, it holds "
                            f"{want}; nothing was committed. Look at {self._location(target)}")
        return target, paths


@dataclass(frozen=True)
class Upkept:
    """What one table's upkeep did."""

    table: str  # dataset.table
    snapshots_expired: int
    snapshots_kept: int
    files_removed: int  # data and manifest files no kept snapshot lists any more
    bytes_removed: int


def upkeep(warehouse: IcebergWarehouse, keep: timedelta, now: datetime | None = None,
           tables: list[tuple[str, str]] | None = None) -> list[Upkept]:
    """Expire every table's snapshots older than `keep` (never the current one), then remove the
    files no kept snapshot lists, and that are older than a day: a load's files are on disk before
    its commit lists them, and no load runs for a day. What the checks and loads need is the
    current snapshot (they read it) and the load records; older snapshots are for time travel and
    for a load killed between its commit and its record, which the queue asks for again at once."""
    now = now or datetime.now(timezone.utc)
    catalog = warehouse.catalog
    if tables is None:
        tables = [ident[-2:] for ns in catalog.list_namespaces() for ident in catalog.list_tables(ns)]
    out = []
    for dataset, table in sorted(tables):
        t = warehouse.table(dataset, table)
        if t is None:
            continue
        missing = {k: v for k, v in TABLE_PROPERTIES.items() if k != "format-version" and t.properties.get(k) != v}
        if missing:  # a table made before a property was ours
            with t.transaction() as tx:
                tx.set_properties(missing)
            t = warehouse.table(dataset, table)
        current = t.current_snapshot()
        old = [snap.snapshot_id for snap in t.metadata.snapshots
               if datetime.fromtimestamp(snap.timestamp_ms / 1000, timezone.utc) < now - keep
               and (current is None or snap.snapshot_id != current.snapshot_id)]
        if old:
            t.maintenance.expire_snapshots().by_ids(old).commit()
            t = warehouse.table(dataset, table)
        listed = set()
        for snap in t.metadata.snapshots:
            listed.add(_local(snap.manifest_list))
            for m in snap.manifests(t.io):
                listed.add(_local(m.manifest_path))
                listed.update(_local(e.data_file.file_path) for e in m.fetch_manifest_entry(t.io))
        removed = removed_bytes = 0
        cutoff = now.timestamp() - STAGING_MAX_AGE_SECONDS
        store = warehouse.store
        for rel, size, written in [*store.walk_stats(warehouse._rel(dataset, table, "data"), ".parquet"),
                                   *store.walk_stats(warehouse._rel(dataset, table, "metadata"), ".avro")]:
            if store.location(rel) not in listed and written < cutoff:
                store.delete(rel)
                removed, removed_bytes = removed + 1, removed_bytes + size
        out.append(Upkept(f"{dataset}.{table}", len(old), len(t.metadata.snapshots), removed, removed_bytes))
    return out


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


__all__ = ["IcebergWarehouse", "Upkept", "upkeep"]
