"""LOAD: one interface for every warehouse backend, and what all of them share.

Loading (table, partition) reads exactly the files its manifest lists (a landing
hour's done file, or an event partition's version: `handoff.manifests.Manifest`)
and replaces that partition of the table, atomically: a reader sees the old
partition or the new one, never both, and a reload never duplicates rows. Before
that, a done file is checked against its path (`handoff.manifests`) and every
listed file against the rows it promises. After it, the backend records the
content it loaded (the manifest's hash), so the sensor and `hours_behind` know
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
from kafka_landing.handoff.manifests import DoneFileMismatch, Manifest, read_done_file
from kafka_landing.handoff.units import EVENT, HOUR, LoadUnit, hour_unit
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

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
    location: str  # where the partition now is: a file path, or project.dataset.table$YYYYMMDD[HH]
    done_file: str | None = None  # the manifest (a done file, or an event version), relative to the landing root
    done_sha256: str | None = None  # the content loaded: the manifest's hash
    job_id: str | None = None  # the backend's job, where it has one
    warnings: tuple[str, ...] = ()  # what a person should know before it becomes a failure
    also_loaded: tuple[tuple[str, str], ...] = ()  # (hour, done-file hash) of other hours the load recorded (a day)


class Warehouse(ABC):
    """A warehouse backend: tables partitioned by landing hour (or, the event-time tables of
    `by_event`, by event partition), each partition replaced whole."""

    #: shown in metadata and messages ("parquet", "bigquery")
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
        (Parquet footer, BigQuery INFORMATION_SCHEMA.PARTITIONS); None if the partition is absent."""

    @abstractmethod
    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        """Where a partition is, for people: a file path or `project.dataset.table$YYYYMMDD` (a landing
        hour's day)."""

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
        result = warehouse.load_partition(store, done, spark, done_file=unit.done_file, done_sha256=sha)
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
