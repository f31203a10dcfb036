"""LOAD: one interface for every warehouse backend, and what all of them share.

Loading (table, hour) reads exactly the files the hour's done file lists and
replaces that hour's partition of the table, atomically: a reader sees the old
hour or the new one, never both, and a reload never duplicates rows. Before
that, the done file is checked against its path (`done_checks`) and every
listed file against the rows it promises. After it, the backend records the
content it loaded (the done file's hash), so the sensor and `hours_behind` know
what is loaded without asking Dagster.

Backends: `parquet.ParquetWarehouse` (the embedded default, Spark) and
`bigquery.BigQueryWarehouse` (production, free load jobs, no Spark). Pure: no
Dagster; Spark only through the factory a backend may call.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from kafka_landing.avro_files import AvroFileError
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff import clear_pending, content_sha, refuse_pending
from kafka_landing.manifests import DoneFile
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.done_checks import DoneFileMismatch, check_done_file
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

SparkFactory = Callable[[], object]  # () -> SparkSession, started only by a backend that needs it


class LoadError(KafkaLandingError, RuntimeError):
    """A load that did not happen; the table and the landing files are untouched."""


@dataclass(frozen=True)
class LoadResult:
    table: str  # dataset.table
    hour: str
    rows: int
    files: int
    schema_ids: tuple[int, ...]
    added_columns: tuple[str, ...]
    location: str  # where the hour now is: a file path, or project.dataset.table$YYYYMMDD[HH]
    done_file: str | None = None  # relative to the landing root
    done_sha256: str | None = None  # the content loaded
    job_id: str | None = None  # the backend's job, where it has one
    warnings: tuple[str, ...] = ()  # what a person should know before it becomes a failure


class Warehouse(ABC):
    """A warehouse backend: tables partitioned by landing hour, each hour replaced whole."""

    #: shown in metadata and messages ("parquet", "bigquery")
    kind: str

    @abstractmethod
    def load_hour(self, store: LandingStore, done: DoneFile, spark: SparkFactory,
                  done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        """Replace (done.dataset.done.table, done.hour) with exactly the rows of `done.files`,
        then record the load. LoadError / IncompatibleSchemaError leave everything untouched."""

    @abstractmethod
    def hour_rows(self, dataset: str, table: str, hour: str) -> int | None:
        """Rows the warehouse holds now for an hour, read back from the warehouse itself
        (Parquet footer, BigQuery INFORMATION_SCHEMA.PARTITIONS); None if the hour is absent."""

    @abstractmethod
    def hour_location(self, dataset: str, table: str, hour: str) -> str:
        """Where an hour is, for people: a file path or `project.dataset.table$YYYYMMDD` (its day)."""

    @abstractmethod
    def loaded(self, dataset: str, table: str, hour: str) -> dict | None:
        """The record of the last load of an hour ({"done_file", "sha256", "rows", ...}), or None;
        {} if a record exists but cannot be read."""

    @abstractmethod
    def loaded_hours(self, dataset: str, table: str) -> set[str]:
        """Hour tags with a recorded load."""

    @abstractmethod
    def check_writable(self) -> None:
        """Raise (naming the warehouse and what to check) unless loads can be written."""

    @abstractmethod
    def by_event(self, granularity: str, field: str) -> Warehouse:
        """The backend of the event-time tables (`<table>__by_event`, partitioned by event "day" or
        "hour" of column `field`): the same interface, where an "hour" is an event partition and a done file is a
        manifest version (`event_partitions.EventManifest.as_done_file`)."""

    def loaded_sha(self, dataset: str, table: str, hour: str) -> str | None:
        return (self.loaded(dataset, table, hour) or {}).get("sha256")


def verify_files(store: LandingStore, done: DoneFile) -> None:
    """Every listed file exists and holds the rows the manifest promises. Transient when not:
    a tool that copies a done file before its data (or a copy still under way) completes the
    files later without changing the done file, so a later attempt can load it."""
    for f in done.files:
        if not store.exists(f.path):
            raise LoadError(f"{done.dataset}.{done.table} {done.hour}: listed file {store.location(f.path)} does not "
                            "exist (yet?)", transient=True)
        try:
            n = store.avro_rows(f.path, counted=f.counted)
        except AvroFileError as exc:
            raise LoadError(f"{done.dataset}.{done.table} {done.hour}: {store.location(f.path)} is not a whole "
                            f"Avro file: {exc}", transient=True) from None
        if n != f.rows:
            raise LoadError(f"{done.dataset}.{done.table} {done.hour}: {store.location(f.path)} holds {n} rows, "
                            f"the done file says {f.rows}", transient=True)


def load_done_file(warehouse: Warehouse, store: LandingStore, done_file: str, spark: SparkFactory) -> LoadResult:
    """Load the hour of one done file (relative to the landing root), after checking it is
    what its path says; clear its pending marker if the marker still names that content, or
    mark that content refused if the load failed terminally."""
    try:
        content = store.read_bytes(done_file)
    except FileNotFoundError:
        raise LoadError(f"done file {store.location(done_file)} does not exist: land the hour first") from None
    try:
        raw = json.loads(content)
    except ValueError as exc:
        raise DoneFileMismatch(f"done file {store.location(done_file)} is not JSON ({exc}); nothing was loaded from "
                               "it: re-land the hour or fix the tool that wrote it") from None
    done = check_done_file(done_file, raw)
    sha = content_sha(content)
    try:
        result = warehouse.load_hour(store, done, spark, done_file=done_file, done_sha256=sha)
    except KafkaLandingError as exc:
        if not exc.transient:  # the same content fails the same way: the sensor must not ask again
            refuse_pending(store, done_file, sha, str(exc))
        raise
    clear_pending(store, done_file, sha)
    return result


__all__ = ["DoneFileMismatch", "IncompatibleSchemaError", "LoadError", "LoadResult", "SparkFactory", "Warehouse",
           "load_done_file", "verify_files"]
