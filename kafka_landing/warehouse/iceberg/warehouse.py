"""`IcebergWarehouse`: the `Warehouse` interface over the root's tables (`tables`), their commits
(`commits`), a run's stage (`stage`) and the Spark side of a load (`files`).

Loading a partition: what changed since the load the table holds (a landing hour's table: the
hour itself; an event partition: the landing hours whose files changed) -> those hours' files
written as Parquet under the table's schema -> one commit that drops the rows they replace and
adds the new files, tried again on the new snapshot when another writer committed first. A reload
of content the table already holds (a load killed after its commit, or one `stage` committed)
makes no new snapshot: it only records the load.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from kafka_landing.crash_points import crash_point
from kafka_landing.errors import KafkaLandingError, is_transient
from kafka_landing.handoff.manifests import LandedFile, Manifest
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError, LoadResult, SparkFactory, StagedRun, Warehouse, verify_files
from kafka_landing.warehouse.iceberg.catalogs import CatalogConfig, on_gcs, sql_uri
from kafka_landing.warehouse.iceberg.commits import COMMIT_ATTEMPTS, Commits, Lineage, Written, hour_keys, load_props
from kafka_landing.warehouse.iceberg.files import read_landed, spark_table, write_parquet
from kafka_landing.warehouse.iceberg.stage import StagedHour, stage
from kafka_landing.warehouse.iceberg.tables import HOUR_COLUMN, Replaced, Tables, schema_of
from kafka_landing.warehouse.schema_evolution import merge_schemas


@dataclass(frozen=True)
class _Plan:
    """What one load of a partition replaces, and what its snapshots will say."""

    manifest: Manifest
    keys: dict[str, str]  # `hour_keys`: the content of each landing hour of the partition
    changed: dict[str, tuple[LandedFile, ...]]  # the landing hours to replace (no files: the hour left the partition)
    whole: bool  # the whole partition is replaced (a landing hour's table, or one held as who knows what)
    props: dict  # the snapshots' summary (`load_props`)
    replaced: Replaced  # the rows the commit drops
    where: str  # the load, in messages

    @property
    def ident(self) -> tuple[str, str]:
        return self.manifest.dataset, self.manifest.target

    @property
    def rows(self) -> int:
        return sum(f.rows for fs in self.changed.values() for f in fs)


class IcebergWarehouse(Warehouse):
    """Iceberg tables in a SQL or REST catalog, written with Spark (Parquet files) and committed with pyiceberg."""

    kind = "iceberg"

    def __init__(self, root: str, catalog: CatalogConfig | str | None = None, column: str = HOUR_COLUMN):
        """`catalog`: None for SQLite under the root, a SQLAlchemy URL (PostgreSQL), a REST catalog's
        URL, or a `CatalogConfig` with its settings; `column`: the partition a load replaces: hour,
        or event_day / event_hour (`by_event`)."""
        self.tables = Tables(root, CatalogConfig.of(catalog), column)
        self.commits = Commits(self.tables)
        self._lineages: dict[tuple[str, str], Lineage] = {}  # tables as `loaded` read them, once per backend

    @property
    def root(self) -> str:
        return self.tables.root

    @property
    def store(self) -> LandingStore:
        return self.tables.store

    def by_event(self, granularity: str, field: str | None) -> IcebergWarehouse:
        """The event-time tables: <dataset>.<table>__by_event, partitioned by event_<granularity> (the
        landing hour a column of theirs)."""
        return IcebergWarehouse(self.root, self.tables.config, column=f"event_{granularity}")

    def table(self, dataset: str, table: str):
        """The Iceberg table, or None before its first load."""
        return self.tables.table(dataset, table)

    def table_dir(self, dataset: str, table: str) -> Path:
        """The table's folder on a local root (tools and tests look into it); `table_location` for any root."""
        if on_gcs(self.root):
            raise ValueError(f"{dataset}.{table}: the Iceberg warehouse root {self.root} is a bucket, not a "
                             "folder; use table_location")
        return Path(self.root).expanduser().resolve().joinpath(*self.tables.identifier(dataset, table))

    def table_location(self, dataset: str, table: str) -> str:
        """The table's folder as people and Spark name it: a plain path, or a gs:// URI."""
        return self.tables.uri(dataset, table)

    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        return f"{dataset}.{table} ({self.table_location(dataset, table)}) where {self.tables.column} = '{partition}'"

    def check_writable(self) -> None:
        config = self.tables.config
        config.check()  # settings that cannot work: terminal, first
        if not config.rest:
            sql_uri(self.root, config.uri)  # a bucket without a catalog database: the same
        root = self.root
        try:
            self.store.check_writable()
            root = self.store.root
        except OSError as exc:
            raise LoadError(f"Iceberg warehouse root {root} cannot be written ({exc.strerror or exc}): check "
                            "KAFKA_LANDING_WAREHOUSE_ROOT and its permissions") from None
        try:
            self.tables.catalog.list_namespaces()
        except Exception as exc:  # the catalog's database (SQLAlchemy's errors, by driver) or its REST server
            if config.rest:
                raise LoadError(f"{config.named()} (the catalog of {root}) cannot be reached or refused us "
                                f"({type(exc).__name__}: {exc}): check KAFKA_LANDING_ICEBERG_CATALOG_URI, that the "
                                "server is up, and its credentials (KAFKA_LANDING_ICEBERG_CREDENTIAL, _TOKEN or _AUTH)",
                                transient=is_transient(exc)) from None
            raise LoadError(f"the Iceberg catalog of {root} cannot be opened ({type(exc).__name__}: {exc}): check "
                            "KAFKA_LANDING_ICEBERG_CATALOG_URI and that its database is up", transient=True) from None

    def partition_files(self, dataset: str, table: str, partition: str) -> list:
        """The data files (pyiceberg `DataFile`) the current snapshot holds for a partition: metadata only."""
        from pyiceberg.expressions import EqualTo

        t = self.table(dataset, table)
        if t is None or t.current_snapshot() is None:
            return []
        return [task.file for task in t.scan(row_filter=EqualTo(self.tables.column, partition)).plan_files()]

    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """Rows of a partition: its data files' record counts, from the table's metadata; a landing
        day compacted into one file is counted from its row groups (`Tables.partition_rows`). None if
        it holds no file."""
        from pyiceberg.expressions import EqualTo

        t = self.table(dataset, table)
        if t is None or t.current_snapshot() is None:
            return None
        files = [task.file for task in t.scan(row_filter=EqualTo(self.tables.column, partition)).plan_files()]
        return sum(self.tables.partition_rows(t, f, partition) for f in files) or None  # no file, or none holds it

    def spark_table(self, spark, dataset: str, table: str, snapshot_id: int | None = None):
        """The table as a Spark DataFrame, its current snapshot or `snapshot_id`'s (`files.spark_table`)."""
        t = self.table(dataset, table)
        if t is None:
            raise KafkaLandingError(f"{dataset}.{table} is no table of the Iceberg warehouse {self.root} "
                                    "(it is made by its first load)")
        return spark_table(self.tables, spark, t, snapshot_id)

    # --- what was loaded ----------------------------------------------------------

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        """The load record, unless the table holds a newer load of the partition than it names (a load
        that died between its commit and its record): then what that load's snapshot says. The
        records outlive the snapshots (upkeep expires them), and one listing of them tells the
        queue what is loaded; the snapshots are the truth while they are kept."""
        record = self.tables.records.read(dataset, table, partition)
        key = (dataset, table)
        if key not in self._lineages:  # one metadata read per table for the life of this backend
            self._lineages[key] = Lineage(self.table(dataset, table), self.tables.column)
        done = self._lineages[key].newest(partition)
        if done is None or (record and record.get("snapshot_id") == done["snapshot_id"]):
            return record
        return {"done_file": done["done-file"] or None, "sha256": done["sha256"] or None, "rows": int(done["rows"]),
                "attempt": done["attempt"], "snapshot_id": done["snapshot_id"],
                "hours": json.loads(done["hours"] or "{}")}

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        return self.tables.records.partitions(dataset, table)

    def committed(self, t, partition: str) -> dict | None:
        """The summary of the newest snapshot of table `t` that loaded a partition (`commits.Lineage`)."""
        return Lineage(t, self.tables.column).newest(partition)

    def _record_load(self, manifest: Manifest, done_file: str | None, sha: str | None, snapshot_id: int | None,
                     hours: dict[str, str]) -> None:
        self.tables.records.write(manifest.dataset, manifest.target, manifest.partition, {
            "done_file": done_file, "sha256": sha, "rows": manifest.rows, "attempt": manifest.attempt,
            "snapshot_id": snapshot_id, "hours": hours})

    # --- loading ------------------------------------------------------------------

    def stage(self, store: LandingStore, loads: list[tuple[Manifest, str | None, str | None]],
              spark: SparkFactory) -> StagedRun:
        """A run's landing hours in one Spark job and one commit per table (`stage`)."""
        return stage(self.tables, store, loads, spark)

    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None,
                       staged: StagedRun | None = None) -> LoadResult:
        """Replace the landing hours of the partition whose files changed since the load the table
        holds (a landing hour's table: the hour itself), in one commit. `staged`: what `stage` did
        for the run, which this load takes its part of."""
        verify_files(store, manifest)
        name, key = f"{manifest.dataset}.{manifest.target}", (manifest.dataset, manifest.target, manifest.partition)
        location = self.partition_location(manifest.dataset, manifest.target, manifest.partition)
        keys, staged = hour_keys(manifest), staged or StagedRun()
        done = self.committed(self.table(manifest.dataset, manifest.target), manifest.partition)
        if done_sha256 and done and done.get("sha256") == done_sha256:  # committed before its record was written
            ahead = staged.committed.get(key)  # by `stage`: this load reports its files and columns
            self._record_load(manifest, done_file, done_sha256, done["snapshot_id"], keys)
            files = 0 if ahead is None else len(manifest.landed_files)
            return LoadResult(name, manifest.partition, manifest.rows, files, tuple(manifest.schema_ids), ahead or (),
                              location, done_file, done_sha256, snapshot_id=done["snapshot_id"],
                              committed_at=done.get("committed_at"))
        plan = self._plan(manifest, done, keys, done_file, done_sha256)
        added = self._write_and_commit(store, plan, spark, staged.written.get(key))
        if added is None:  # nothing to make a table of yet: an empty first load
            self._record_load(manifest, done_file, done_sha256, None, keys)
            return LoadResult(name, manifest.partition, 0, 0, (), (), location, done_file, done_sha256)
        crash_point("warehouse:swapped")
        self._lineages.pop(plan.ident, None)
        now = self.committed(self.table(*plan.ident), manifest.partition)
        self._record_load(manifest, done_file, done_sha256, now["snapshot_id"] if now else None, keys)
        return LoadResult(name, manifest.partition, manifest.rows, sum(len(fs) for fs in plan.changed.values()),
                          tuple(manifest.schema_ids), tuple(added), location, done_file, done_sha256,
                          snapshot_id=now["snapshot_id"] if now else None,
                          committed_at=now.get("committed_at") if now else None)

    def _plan(self, manifest: Manifest, done: dict | None, keys: dict[str, str], done_file: str | None,
              sha: str | None) -> _Plan:
        """What the load replaces: the landing hours whose content differs from what the partition
        holds, as its newest snapshot of it says (true even where a load died before its record),
        else as recorded (snapshots expire); every hour where neither says."""
        column, groups = self.tables.column, manifest.by_landing_hour()
        held = json.loads(done["hours"]) if done and done.get("hours") else None
        if held is None:  # no kept snapshot says it (they expire): the record does
            held = (self.tables.records.read(manifest.dataset, manifest.target, manifest.partition) or {}).get("hours")
        if column == HOUR_COLUMN or not isinstance(held, dict):
            changed, whole = dict(groups), True  # a landing hour, or an event partition held as who knows what
        else:
            changed = {h: fs for h, fs in groups.items() if held.get(h) != keys[h]}
            changed.update({h: () for h in held if h not in groups})  # landing hours that left the partition
            whole = False
        where = (f"{manifest.dataset}.{manifest.target} {column} {manifest.partition} "
                 f"(schema ids {list(manifest.schema_ids)})")
        return _Plan(manifest, keys, changed, whole, load_props(manifest, column, done_file, sha, changed, keys),
                     self.commits.replaced(manifest.partition, None if whole else sorted(changed)), where)

    def _write_and_commit(self, store: LandingStore, plan: _Plan, spark: SparkFactory,
                          staged: StagedHour | None) -> list[str] | None:
        """The changed hours' files written under the table's schema and committed: the columns the
        load added, or None if there is nothing to make a table of yet (an empty first load). Written
        again whenever another writer widened the table first; `staged` files are taken as they are
        where their content and schema still match."""
        reads, hour_schema, written, staging = self._source(store, plan, spark, staged)
        for _ in range(COMMIT_ATTEMPTS):
            try:
                base = schema_of(self.table(*plan.ident))
                merged, added = merge_schemas(base, hour_schema, plan.where) if hour_schema else (base, [])
                if merged is None:
                    return None
                if hour_schema and written != merged:  # (re)write the changed hours under the table's schema
                    if reads is None:  # staged under another schema than the table's now
                        reads, _ = read_landed(store, plan.changed, spark, plan.where, plan.manifest.partition)
                    self.store.delete(staging)
                    write_parquet(self.tables, reads, merged, self.tables.location(staging))
                    written = merged
                files = self._checked(plan, staging)
            except BaseException:
                self.store.delete(staging)  # never committed: nobody references these files
                raise
            # What the commit leaves on an error is the commit's to decide: it may have gone through.
            if self.commits.commit(plan.ident, Written(staging, files, merged, base), plan.props, plan.replaced, spark,
                                   plan.where):
                return added
        self.store.delete(staging)
        raise LoadError(f"{plan.where}: {COMMIT_ATTEMPTS} commits lost to other writers of {'.'.join(plan.ident)}; "
                        "nothing was committed. The load is asked for again", transient=True)

    def _source(self, store: LandingStore, plan: _Plan, spark: SparkFactory, staged: StagedHour | None):
        """(Spark reads of the changed hours or None, their schema, the schema their files were
        written under or None, the staging folder): the staged hour's files where `stage` wrote this
        content whole and they are still there, else a read of the landing files."""
        if staged is not None and (staged.keys != plan.keys or not plan.whole
                                   or not self.tables.parquet_files(staged.folder)):
            self.store.delete(staged.folder)  # staged from other content (or gone since): not this load's
            staged = None
        if staged is not None:
            return None, staged.hour_schema, staged.schema, staged.folder
        reads, hour_schema = read_landed(store, plan.changed, spark, plan.where, plan.manifest.partition)
        staging = self.tables.rel(*plan.ident, "data", f"{self.tables.column}={plan.manifest.partition}",
                                  uuid.uuid4().hex)
        return reads, hour_schema, None, staging

    def _checked(self, plan: _Plan, staging: str) -> list[str]:
        """The staging folder's files, once their footers hold the rows the changed hours list."""
        files = self.tables.parquet_files(staging)
        n = self.tables.rows_in(files)
        if n != plan.rows:
            raise LoadError(f"{plan.where}: wrote {n} rows, the manifest lists {plan.rows} for landing hours "
                            f"{sorted(plan.changed)}; nothing was committed. Look at {self.tables.location(staging)}")
        crash_point("warehouse:staged")
        return files
