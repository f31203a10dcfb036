"""LOAD: one interface for every warehouse backend, and what all of them share.

Loading (table, hour) reads exactly the files the hour's done file lists and
replaces that hour's partition of the table, atomically: a reader sees the old
hour or the new one, never both, and a reload never duplicates rows. Before
that, the done file is checked against its path (`handoff.manifests`) and every
listed file against the rows it promises. After it, the backend records the
content it loaded (the done file's hash), so the sensor and `hours_behind` know
what is loaded without asking Dagster.

Backends: `parquet.ParquetWarehouse` (the embedded default, Spark) and
`bigquery.BigQueryWarehouse` (production, free load jobs, no Spark). Pure: no
Dagster; Spark only through the factory a backend may call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from datetime import datetime, timedelta, timezone

from kafka_landing.avro_files import AvroFileError
from kafka_landing.config import TopicConfig
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff import markers
from kafka_landing.handoff.manifests import DoneFile, DoneFileMismatch, read_done_file
from kafka_landing.handoff.units import EVENT, HOUR, LoadUnit, hour_unit
from kafka_landing.store.base import LandingStore
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
    also_loaded: tuple[tuple[str, str], ...] = ()  # (hour, done-file hash) of other hours the load recorded (a day)


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


def load_unit(warehouse: Warehouse, store: LandingStore, unit: LoadUnit, spark: SparkFactory,
              cfg: TopicConfig | None = None) -> LoadResult | EventLoad:
    """Load one unit and own its markers: the one load step every asset and job calls.

    Reads the unit's markers first (a marker written after the read is newer content), loads, then
    clears what the load satisfied: for a landing hour, its marker and every hour the load recorded
    besides it (a BigQuery day load holds the whole day), given-up ones included; for an event
    partition, the markers its versioning saw (`event_load`). A terminal failure refuses the marks
    it saw (until `heals_after` where the cause heals with time), so the queue does not ask again
    until they change; a failure about another unit (`elsewhere`: another hour of the day, a source
    file replaced meanwhile) refuses nothing. `cfg`: the topic of an event partition."""
    seen = markers.marks_of(store, unit)
    sha = None  # the content a landing hour's load tried: what a refusal names
    try:
        if unit.kind == EVENT:
            if cfg is None:
                raise ValueError(f"{unit}: an event partition is loaded with its topic's config")
            return load_event_partition(warehouse, store, cfg, unit.table, unit.partition, spark)
        done, sha = read_done_file(store, unit.done_file)
        result = warehouse.load_hour(store, done, spark, done_file=unit.done_file, done_sha256=sha)
    except KafkaLandingError as exc:
        if not exc.transient and not exc.elsewhere and seen and (unit.kind == EVENT or sha is not None):
            if unit.kind == HOUR:  # a done file that cannot be read is moved aside by the queue, not refused
                seen = markers.Marks({unit.partition: sha})
            after = exc.heals_after
            markers.refuse(store, unit, seen, str(exc),
                           datetime.now(timezone.utc) + timedelta(seconds=after) if after else None)
        raise
    markers.clear(store, unit, {unit.partition: sha})
    for hour, hour_sha in result.also_loaded:  # the day now holds these hours as this content
        markers.clear(store, hour_unit(unit.dataset, unit.table, hour), {hour: hour_sha})
    return result


def load_done_file(warehouse: Warehouse, store: LandingStore, done_file: str, spark: SparkFactory) -> LoadResult:
    """`load_unit` of the landing hour of one done file (relative to the landing root)."""
    return load_unit(warehouse, store, markers.parse_done_path(done_file), spark)


from kafka_landing.warehouse.event_load import EventLoad, load_event_partition  # noqa: E402 (it uses the interface above)

__all__ = ["DoneFileMismatch", "EventLoad", "IncompatibleSchemaError", "LoadError", "LoadResult", "SparkFactory",
           "Warehouse", "load_done_file", "load_unit", "verify_files"]
