"""LOAD: the one interface every warehouse backend implements, and what all of them share.

Loading (table, partition) reads exactly the files its manifest lists (a landing
hour's done file, or an event partition's version: `handoff.manifests.Manifest`)
and replaces that partition of the table, atomically: a reader sees the old
partition or the new one, never both, and a reload never duplicates rows. Before
that, every listed file is checked against the rows it promises. After it, the
backend records the content it loaded (the manifest's hash), so the queue and
`hours_behind` know what is loaded without asking Dagster.

Backends: `iceberg.IcebergWarehouse` (the embedded default: Spark writes, pyiceberg
commits) and `bigquery.BigQueryWarehouse` (production, free load jobs, no Spark). The load step
that owns the hand-off around them is `load.load_unit`. Pure: no Dagster; Spark only
through the factory a backend may call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from kafka_landing.avro_files import AvroFileError
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.manifests import Manifest
from kafka_landing.naming import check_identifier
from kafka_landing.store.base import LandingStore

SparkFactory = Callable[[], object]  # () -> SparkSession, started only by a backend that needs it


class LoadError(KafkaLandingError, RuntimeError):
    """A load that did not happen; the table and the landing files are untouched."""


@dataclass(frozen=True)
class LoadResult:
    table: str  # dataset.table
    partition: str  # a landing hour tag, or an event partition
    rows: int
    files: int
    schema_ids: tuple[int, ...]
    added_columns: tuple[str, ...]
    location: str  # where the partition now is: an Iceberg table and filter, or project.dataset.table$YYYYMMDD[HH]
    done_file: str | None = None  # the manifest (a done file, or an event version), relative to the landing root
    done_sha256: str | None = None  # the content loaded: the manifest's hash
    job_id: str | None = None  # the backend's job, where it has one
    warnings: tuple[str, ...] = ()  # what a person should know before it becomes a failure
    also_loaded: tuple[tuple[str, str], ...] = ()  # (hour, done-file hash) of other hours the load recorded (a day)


class Warehouse(ABC):
    """A warehouse backend: tables partitioned by landing hour (or, the event-time tables of
    `by_event`, by event partition), each partition replaced whole."""

    #: shown in metadata and messages ("iceberg", "bigquery")
    kind: str

    @abstractmethod
    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        """Replace (manifest.dataset.manifest.target, manifest.partition) with exactly the rows of
        `manifest.landed_files`, then record the load as the content `done_sha256` of the manifest at
        `done_file`. LoadError / IncompatibleSchemaError leave everything untouched."""

    @abstractmethod
    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """Rows the warehouse holds now for a partition, read back from the warehouse itself
        (Iceberg's record counts, BigQuery INFORMATION_SCHEMA.PARTITIONS); None if the partition is absent."""

    @abstractmethod
    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        """Where a partition is, for people: the Iceberg table and its filter, or
        `project.dataset.table$YYYYMMDD` (a landing hour's day)."""

    @abstractmethod
    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        """The record of the last load of a partition ({"done_file", "sha256", "rows", ...}), or None;
        {} if a record exists but cannot be read."""

    @abstractmethod
    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        """Partitions (hour tags, or event partitions) with a recorded load."""

    @abstractmethod
    def check_writable(self) -> None:
        """Raise (naming the warehouse and what to check) unless loads can be written."""

    @abstractmethod
    def by_event(self, granularity: str, field: str) -> Warehouse:
        """The backend of the event-time tables (`<table>__by_event`, partitioned by event "day" or
        "hour" of column `field`): the same interface, whose partitions are event partitions, each
        loaded from a version of it (`event_partitions.EventManifest`)."""

    def stage(self, store: LandingStore, loads: list[tuple[Manifest, str | None, str | None]],
              spark: SparkFactory) -> int:
        """Optionally load many partitions ((manifest, done file, its hash): the hours of a run)
        together, ahead of their own `load_partition`, which then finds its content loaded, or
        staged, and only records it. Returns how many it took; a backend that does not returns 0.
        Never needed for a load to be right: what was not taken, or whose content changed since,
        loads alone."""
        return 0

    def loaded_sha(self, dataset: str, table: str, partition: str) -> str | None:
        return (self.loaded(dataset, table, partition) or {}).get("sha256")


class LoadRecords:
    """What an Iceberg warehouse loaded, a record per partition:
    `<dataset>/<table>/_loads/<column>=<partition>.json` in its root's store (a folder or a
    bucket), so the queue and `hours_behind` know what is loaded without reading the table.
    BigQuery keeps its own, beside the landing files (`bigquery/ledger.py`)."""

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


def verify_files(store: LandingStore, manifest: Manifest) -> None:
    """Every listed file exists and holds the rows the manifest promises. Transient when not:
    a tool that copies a done file before its data (or a copy still under way) completes the
    files later without changing the done file, so a later attempt can load it."""
    where = f"{manifest.dataset}.{manifest.target} {manifest.partition}"
    for f in manifest.landed_files:
        if not store.exists(f.path):
            raise LoadError(f"{where}: listed file {store.location(f.path)} does not exist (yet?)", transient=True)
        try:
            n = store.avro_rows(f.path, counted=f.counted)
        except AvroFileError as exc:
            raise LoadError(f"{where}: {store.location(f.path)} is not a whole Avro file: {exc}",
                            transient=True) from None
        if n != f.rows:
            raise LoadError(f"{where}: {store.location(f.path)} holds {n} rows, the done file says {f.rows}",
                            transient=True)
