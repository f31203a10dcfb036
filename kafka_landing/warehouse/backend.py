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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

from kafka_landing.avro_files import AvroFileError
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.manifests import Manifest
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
    snapshot_id: int | None = None  # the table's version that holds the load, where the backend has versions
    committed_at: str | None = None  # when that version was committed (UTC): readers see the load from then on


PartitionKey = tuple[str, str, str]  # (dataset, table, partition)


@dataclass(frozen=True)
class StagedRun:
    """What `Warehouse.stage` did for a run's partitions ahead of their own loads, handed to each of
    those loads (`load_partition(staged=...)`), which takes its own part: the partitions it
    committed, with the columns each added, and those it wrote but did not commit, with what the
    backend needs to commit them itself. A value: no load changes it, so a retried load is handed
    the same. Empty: nothing staged (a backend that does not stage)."""

    committed: Mapping[PartitionKey, tuple[str, ...]] = field(default_factory=dict)
    written: Mapping[PartitionKey, object] = field(default_factory=dict)


class Warehouse(ABC):
    """A warehouse backend: tables partitioned by landing hour (or, the event-time tables of
    `by_event`, by event partition), each partition replaced whole."""

    #: shown in metadata and messages ("iceberg", "bigquery")
    kind: str

    @abstractmethod
    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None,
                       staged: StagedRun | None = None) -> LoadResult:
        """Replace (manifest.dataset.manifest.target, manifest.partition) with exactly the rows of
        `manifest.landed_files`, then record the load as the content `done_sha256` of the manifest at
        `done_file`. `staged`: the run `stage` made, if any. LoadError / IncompatibleSchemaError
        leave everything untouched."""

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
        loaded from a version of it (`by_event.versions.EventManifest`)."""

    def stage(self, store: LandingStore, loads: list[tuple[Manifest, str | None, str | None]],
              spark: SparkFactory) -> StagedRun:
        """Optionally load many partitions ((manifest, done file, its hash): the hours of a run)
        together, ahead of their own `load_partition`, which is handed the run and then finds its
        content loaded, or staged, and only records it; a backend that does not stage returns an
        empty run. Never needed for a load to be right: what was not taken, or whose content
        changed since, loads alone."""
        return StagedRun()

    def loaded_sha(self, dataset: str, table: str, partition: str) -> str | None:
        return (self.loaded(dataset, table, partition) or {}).get("sha256")


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
