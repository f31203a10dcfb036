"""The tables of one warehouse root: where each lives, the catalog that names it, and the store
every other file goes through. What the loads, the commits, the stage and upkeep share.

    <root>/_catalog.db                              the SQL catalog by default (SQLite: nothing to start)
    <root>/<dataset>/<table>/metadata/...           the table's Iceberg metadata: schema, snapshots
    <root>/<dataset>/<table>/data/hour=<H>/<load>/  the Parquet files one load of hour H wrote
    <root>/<dataset>/<table>/_loads/hour=<H>.json   what was loaded: the done file's content hash
    <root>/<dataset>/<table>/_commit.lock           held by each commit to the table (and a rewrite)

The root is a local folder or a `gs://bucket/prefix`: Spark writes the Parquet files there (the
GCS connector), pyiceberg its metadata (`gcs_io`), and the load records, the listing and the
removing of files go through the root's store (`store.open_store`), one code path for both. The
catalog (`catalogs.py`) is that SQLite file, another SQL database (a bucket holds no SQLite file:
a gs:// root needs one) or a REST catalog.
"""

from __future__ import annotations

import fnmatch
import functools
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_landing.naming import check_identifier
from kafka_landing.store import open_store
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError
from kafka_landing.warehouse.iceberg.catalogs import CatalogConfig, on_gcs, open_catalog

HOUR_COLUMN = "hour"  # the landing hour of each row (`2026-01-31T13`), in every table
# A landing-hour table is partitioned by its hours' day (`truncate(10, hour)`), not by hour: a load
# still writes a file per hour, and upkeep compacts a day over into one (`compact`).
LANDING_DAY, DAY_CHARS = "landing_day", 10
SCHEMA_PROPERTY = "kafka-landing.schema"  # the table's schema in Spark's terms: what `merge_schemas` widens
# Every table's: old metadata files dropped as commits go; appends merge small manifests once 100
# pile up (Iceberg Java's default, not pyiceberg's), so a year of hourly commits stays a few
# manifests a full scan plans in a fraction of a second, not 8,760 files to open. Merged manifests
# of 32 KB, not 8 MB: commits come in time order, so a merged manifest holds a day or so of files
# and a reader's plan of one day opens one small manifest, not one of half the year (a year of an
# event table: 7 ms against 214 ms, a week-old table's 5 ms; docs/benchmark.md).
TABLE_PROPERTIES = {"format-version": "2", "write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "100", "commit.manifest-merge.enabled": "true",
                    "commit.manifest.target-size-bytes": "32768"}
PARTITION_COLUMNS = ("hour", "event_day", "event_hour")  # what our tables add to their records' columns


def table_properties(columns) -> dict[str, str]:
    """`TABLE_PROPERTIES`, and whole values, not 16 characters, in the files' statistics of the
    table's partition columns, which a load's delete selects by (`Commits.replaced`): an
    `__unknown__<day>` partition's name is longer, and a bound cut short leaves pyiceberg unsure a
    file holds only that partition's rows. Only columns the table has: a catalog may refuse others
    (Iceberg's REST server does)."""
    return {**TABLE_PROPERTIES, **{f"write.metadata.metrics.column.{c}": "full" for c in columns}}


def _io_properties(root: str) -> tuple[tuple[str, str], ...]:
    """The catalog's FileIO properties: none for a local root; `gcs_io`'s for gs://."""
    if not on_gcs(root):
        return ()
    from kafka_landing.warehouse.iceberg.gcs_io import emulator_host, gcs_properties

    return tuple(sorted(gcs_properties(emulator_host()).items()))


@functools.lru_cache(maxsize=8)
def _file_io(root: str, props: tuple[tuple[str, str], ...]):
    """What reads the Parquet footers of files not yet committed: the catalog's FileIO."""
    from pyiceberg.io import load_file_io

    return load_file_io(dict(props), location=root)


@dataclass(frozen=True)
class Replaced:
    """The rows a load drops: those whose every named column holds one of its values (a landing
    hour: {hour: [h]}; an event partition's changed hours: {event_day: [d], hour: [...]}). What the
    commit's delete selects (`expression`) and what a rewrite of a compacted file leaves out
    (`files.kept`)."""

    values: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def of(cls, **values) -> Replaced:
        return cls(tuple((c, tuple(v)) for c, v in values.items()))

    def expression(self):
        from pyiceberg.expressions import AlwaysTrue, And, EqualTo, In

        out = AlwaysTrue()
        for column, values in self.values:
            out = And(out, EqualTo(column, values[0]) if len(values) == 1 else In(column, values))
        return out


def spans_hours(t, data_file) -> bool:
    """Whether a data file holds rows of several landing hours: a compacted day's (`compact`), which
    a load replacing one hour cannot drop whole."""
    field = t.schema().find_field(HOUR_COLUMN).field_id
    return data_file.lower_bounds.get(field) != data_file.upper_bounds.get(field)


def schema_of(t) -> dict | None:
    """A table's schema in Spark's terms (`SCHEMA_PROPERTY`); None for no table."""
    return json.loads(t.properties[SCHEMA_PROPERTY]) if t is not None else None


def snapshot_id(t) -> int | None:
    snap = t.current_snapshot() if t is not None else None
    return snap.snapshot_id if snap is not None else None


class Tables:
    """The tables of one root, partitioned by `column`: hour, or event_day / event_hour (their rows
    keep the landing hour as a column: `columns`)."""

    def __init__(self, root: str, config: CatalogConfig, column: str):
        self.root = root
        self.config = config  # the catalog: SQL (SQLite under the root by default) or REST
        self.column = column

    @property
    def catalog(self):
        return open_catalog(self.root, self.config, _io_properties(self.root))

    @functools.cached_property
    def store(self) -> LandingStore:
        """The root as a store (a folder or a bucket): the load records, and listing and removing files."""
        return open_store(self.root)

    @functools.cached_property
    def records(self) -> LoadRecords:
        return LoadRecords(self.store, self.column)

    @property
    def columns(self) -> tuple[str, ...]:
        """The tables' partition columns, in their spec's order."""
        return (HOUR_COLUMN,) if self.column == HOUR_COLUMN else (self.column, HOUR_COLUMN)

    def partition_by(self, spec) -> None:
        """The tables' spec: the event partition (the landing hour a column), or a landing-hour
        table's day (`LANDING_DAY`). Never the hour itself: a file may then hold a day's hours."""
        from pyiceberg.transforms import TruncateTransform

        if self.column == HOUR_COLUMN:
            spec.add_field(HOUR_COLUMN, TruncateTransform(DAY_CHARS), LANDING_DAY)
        else:
            spec.add_identity(self.column)

    def identifier(self, dataset: str, table: str) -> tuple[str, str]:
        return check_identifier(dataset, "dataset"), check_identifier(table, "table")

    def table(self, dataset: str, table: str):
        """The Iceberg table, or None before its first load. A table of that name elsewhere than this
        root is refused (terminal): a catalog shared by deployments (PostgreSQL, REST) may hold
        another's, and loading into it would write this root's files into that table's history."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            t = self.catalog.load_table(self.identifier(dataset, table))
        except NoSuchTableError:
            return None
        if not self.ours(t, dataset, table):
            raise LoadError(f"{dataset}.{table}: {self.config.named()} holds this table at {t.location()}, not in "
                            f"this warehouse's root ({self.uri(dataset, table)}): another deployment's table of the "
                            "same name, or a root that moved. Nothing was loaded. Give each deployment its own "
                            "catalog or its own datasets, or set KAFKA_LANDING_WAREHOUSE_ROOT to the root the table "
                            "is in", transient=False)
        return t

    def ours(self, t, dataset: str, table: str) -> bool:
        """Whether table `t` lives where this root keeps `dataset.table` (file:// and %-quoting aside:
        tables made by earlier releases keep locations written so)."""
        return _place(t.location()) == _place(self.uri(dataset, table))

    def rel(self, dataset: str, table: str, *parts: str) -> str:
        """A path in the table's folder, relative to the root (what the store takes)."""
        return "/".join((*self.identifier(dataset, table), *parts))

    def location(self, rel: str) -> str:
        """Where Spark writes and pyiceberg reads `rel`: a plain path, or a gs:// URI."""
        return self.store.location(rel)

    def uri(self, dataset: str, table: str) -> str:
        """The table's location in its metadata: the plain path on a local root, the gs:// URI on a
        bucket. Not a file:// URI: pyiceberg writes metadata to its location's path as written, never
        unquoted, so a root with a space kept its tables' metadata in a `%20` folder beside it
        (tables made so keep their location)."""
        return self.location(self.rel(dataset, table))

    def lock(self, dataset: str, table: str):
        """The table's commit lock, in the root's store: every load's commit holds it, and a load that
        rewrites the table holds it for the rewrite too (hours of it; a crashed holder loses it)."""
        return self.store.lock(self.rel(dataset, table, "_commit.lock"))

    def parquet_files(self, rel_dir: str) -> list[str]:
        """The part-*.parquet files Spark wrote under `rel_dir`, at any depth, by location."""
        return [self.location(r) for r in self.store.walk(rel_dir, ".parquet")
                if fnmatch.fnmatchcase(r.rsplit("/", 1)[-1], "part-*.parquet")]

    def partition_rows(self, t, data_file, partition: str) -> int:
        """A data file's rows of `partition`: its record count when its statistics say it holds that
        partition alone (every load's file); otherwise (a landing day compacted into one file) read
        from its row groups' statistics, each row group of several partitions counted from its
        column. Exact either way; no data read for a load's file."""
        field = t.schema().find_field(self.column).field_id
        value = partition.encode()
        if data_file.lower_bounds.get(field) == value == data_file.upper_bounds.get(field) \
                and not data_file.null_value_counts.get(field):
            return data_file.record_count
        io = _file_io(self.root, _io_properties(self.root))
        with io.new_input(data_file.file_path).open() as f:
            parquet = pq.ParquetFile(f)
            index = parquet.schema_arrow.get_field_index(self.column)
            rows = 0
            for g in range(parquet.metadata.num_row_groups):
                group = parquet.metadata.row_group(g)
                stats = group.column(index).statistics
                if stats is not None and stats.has_min_max and not stats.null_count:
                    if stats.min == stats.max == partition:
                        rows += group.num_rows
                        continue
                    if not stats.min <= partition <= stats.max:
                        continue
                column = parquet.read_row_group(g, columns=[self.column]).column(0)
                rows += pc.sum(pc.equal(column, partition)).as_py() or 0
        return rows

    def rows_of(self, data_file, replaced: Replaced) -> int:
        """A data file's rows that `replaced` selects, from their columns (a compacted day's file)."""
        io = _file_io(self.root, _io_properties(self.root))
        with io.new_input(data_file.file_path).open() as f:
            table = pq.read_table(f, columns=[c for c, _ in replaced.values])
        selected = pa.array([True] * table.num_rows)
        for column, values in replaced.values:
            selected = pc.and_(selected, pc.fill_null(pc.is_in(table[column], pa.array(values)), False))
        return pc.sum(selected).as_py() or 0

    def rows_in(self, files: list[str]) -> int:
        """Rows of Parquet files from their footers (a ranged read each on gs://)."""
        io = _file_io(self.root, _io_properties(self.root))
        rows = 0
        for f in files:
            with io.new_input(f).open() as footer:
                rows += pq.read_metadata(footer).num_rows
        return rows

    def parquet_reader(self, session):
        """`session.read`, for this root's Parquet files. On gs:// without Parquet's vectored reads,
        which call a Hadoop method the GCS connector needs and Hadoop 3.5 lacks (`spark_setup.gcs_config`
        sets the same for the processes it starts; a session may run on a server started otherwise)."""
        if on_gcs(self.root):
            session.conf.set("parquet.hadoop.vectored.io.enabled", "false")  # the session's Hadoop conf
        return session.read


def _place(location: str) -> str:
    if location.startswith("file:"):
        location = unquote(location[len("file:"):])
        location = "/" + location.lstrip("/")
    return location.rstrip("/")


class LoadRecords:
    """What the warehouse loaded, a record per partition: `<dataset>/<table>/_loads/<column>=<partition>.json`
    in its root's store (a folder or a bucket), so the queue and `hours_behind` know what is loaded
    without reading the table. The snapshots say it too (`commits`); the records outlive them."""

    def __init__(self, store: LandingStore, column: str):
        self.store = store
        self.column = column  # hour, or event_day / event_hour

    def path(self, dataset: str, table: str, partition: str) -> str:
        return f"{self._dir(dataset, table)}/{self.column}={partition}.json"

    def _dir(self, dataset: str, table: str) -> str:
        return f"{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}/_loads"

    def read(self, dataset: str, table: str, partition: str) -> dict | None:
        """The record; None if there is none, {} if it cannot be read (loaded, content unknown)."""
        try:
            return self.store.read_json(self.path(dataset, table, partition))
        except ValueError:
            return {}

    def partitions(self, dataset: str, table: str) -> set[str]:
        """Partitions with a record: one listing."""
        prefix = f"{self.column}="
        return {rel.rsplit("/", 1)[-1][len(prefix):-len(".json")]
                for rel in self.store.list(self._dir(dataset, table), f"{prefix}*.json")}

    def write(self, dataset: str, table: str, partition: str, record: dict) -> None:
        self.store.write_json_atomic(self.path(dataset, table, partition), {
            **record, "loaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
