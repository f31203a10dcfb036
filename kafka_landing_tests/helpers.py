"""What several test files need and the product does not: readers of what landing, Dagster runs and loads
wrote (`table_rows` reads a warehouse table), and one builder of landed hours (Avro files and their done
file) for the warehouse's tests."""

from __future__ import annotations

import io
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import fastavro

from kafka_landing.handoff.manifests import DeadLetters, DoneFile, LandedFile
from kafka_landing.naming import OffsetRange, done_file_path, hour_from_tag, landing_file_name, table_hour_dir
from kafka_landing.store.local import LocalStore

if TYPE_CHECKING:
    import pandas as pd


def parse_landing_file_name(name: str) -> dict:
    """The fields `naming.landing_file_name` put in a landing file's name."""
    stem = name[:-5] if name.endswith(".avro") else name
    parts = stem.split("+")
    if len(parts) not in (6, 7):
        raise ValueError(f"{name!r} is not a landing file name")
    dataset, _, table = parts[2].partition(".")
    return {
        "topic": parts[0], "partition": int(parts[1]), "dataset": dataset, "table": table,
        "schema_id": int(parts[3]), "first_offset": int(parts[4]), "last_offset": int(parts[5]),
        "event_hour": parts[6] if len(parts) == 7 else None,
    }


def content_key(done: DoneFile) -> dict:
    """What a done file's hour contains, without when or by which attempt it was landed, nor
    the files' bytes (Avro sync markers are random: same rows, other bytes)."""
    d = done.to_dict()
    d.pop("attempt"), d.pop("landed_at")
    for f in d["files"] + d["dead_letters"]["files"]:
        f.pop("bytes"), f.pop("crc32c", None)
    return d


def land_hour(spark_factory, store, fetch_schema, kafka_options: dict, cfg, plan, attempt: str,
              likely_ids: tuple[int, ...] = ()):
    """One hour: `job.land_hours` of one plan, its LandingError raised (the product lands runs)."""
    from kafka_landing.avro_landing.job import HoursToLand, Sources, land_hours
    from kafka_landing.errors import LandingError

    result = land_hours(Sources(spark_factory, kafka_options, fetch_schema), store,
                        HoursToLand(cfg, [plan], attempt, likely_ids))[plan.hour]
    if isinstance(result, LandingError):
        raise result
    return result


def avro_file(schema: dict, records: list[dict]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    return buf.getvalue()


def done_file(topic: str, dataset: str, table: str, hour: str, files: list[LandedFile]) -> DoneFile:
    """The done file landing would write for `files` (no dead letters, every offset a record)."""
    rows = sum(f.rows for f in files)
    return DoneFile(topic=topic, dataset=dataset, table=table, hour=hour, rows=rows,
                    schema_ids=tuple(sorted({f.schema_id for f in files})), files=tuple(files),
                    dead_letters=DeadLetters(0, {}, ()), slice={"manifest": "m", "records": rows, "partitions": []},
                    topic_records_read=rows, offsets_without_record=0, attempt=uuid.uuid4().hex,
                    landed_at=datetime.now(timezone.utc).isoformat())


def write_hour(store, dataset: str, table: str, hour: str, parts: list[tuple[int, int, dict, list[dict]]],
               topic: str = "topic") -> str:
    """An hour's landing files and done file, as landing writes them; the done file's path.
    `parts`: (Kafka partition, schema id, Avro record schema, records as written), one file
    each, its offsets from 1000, 2000, ... in the order given."""
    files = []
    for n, (partition, schema_id, schema, records) in enumerate(parts):
        first = 1000 * (n + 1)
        last = first + max(len(records) - 1, 0)
        rel = (f"{table_hour_dir(dataset, table, hour_from_tag(hour))}/"
               f"{landing_file_name(OffsetRange(topic, partition, first, last), dataset, table, schema_id)}")
        data = avro_file(schema, records)
        store.write_atomic(rel, data)
        files.append(LandedFile(rel, len(records), len(data), partition, first, last, schema_id))
    rel = done_file_path(dataset, table, hour_from_tag(hour))
    store.write_json_atomic(rel, done_file(topic, dataset, table, hour, files).to_dict())
    return rel


class GsLikeStore(LocalStore):
    """A local landing root that names its files gs://unit/...: what BigQuery loads from."""

    def __init__(self, root):
        super().__init__(root)
        self.root = "gs://unit"

    def location(self, rel: str) -> str:
        return f"gs://unit/{self.check_rel(rel)}"


# --- what a Dagster run left on the instance ---------------------------------------------------


def materializations(instance, key) -> dict[str, list]:
    """Every materialisation of `key` on the instance, by partition, oldest first."""
    by_partition: dict[str, list] = {}
    for rec in reversed(instance.fetch_materializations(key, limit=1000).records):
        by_partition.setdefault(rec.partition_key, []).append(rec)
    return by_partition


def row_count(rec) -> int:
    return rec.asset_materialization.metadata["dagster/row_count"].value


def step_failures(result) -> dict[str, str]:
    return {e.step_key: e.event_specific_data.error.message
            for e in result.all_events if e.event_type_value == "STEP_FAILURE"}


def write_event_hour(store, dataset: str, table: str, hour: str, by_event: dict, schema: dict,
                     granularity: str = "day", topic: str = "topic", partition: int = 0, first: int = 1000) -> str:
    """A landing hour of a topic with an event-time table, as publish writes it: one file per event
    hour (`by_event`: {event hour tag or None: records}), the event partitions marked, then the done
    file. Offsets run from `first` in the order given; the done file's path."""
    from kafka_landing.handoff.event_index import mark_event_partitions
    from kafka_landing.handoff.markers import content_sha

    files = []
    for event_hour, records in by_event.items():
        if not records:
            continue
        last = first + len(records) - 1
        name = landing_file_name(OffsetRange(topic, partition, first, last), dataset, table, 1,
                                 hour_from_tag(event_hour) if event_hour else None)
        rel = f"{table_hour_dir(dataset, table, hour_from_tag(hour))}/{name}"
        data = avro_file(schema, records)
        store.write_atomic(rel, data)
        files.append(LandedFile(rel, len(records), len(data), partition, first, last, 1, event_hour))
        first = last + 1
    rel = done_file_path(dataset, table, hour_from_tag(hour))
    done = done_file(topic, dataset, table, hour, files)
    content = done.to_bytes()
    raw = store.read_json(rel) if store.exists(rel) else None
    mark_event_partitions(store, done, content_sha(content), DoneFile.from_dict(raw) if raw else None, granularity)
    store.write_atomic(rel, content)
    for old in store.list(table_hour_dir(dataset, table, hour_from_tag(hour)), "*.avro"):
        if old not in {f.path for f in files}:
            store.delete(old)  # what the new done file no longer lists, as publish removes it
    return rel


def table_rows(root, dataset: str, table: str, catalog=None, **equal) -> pd.DataFrame:
    """The rows of an Iceberg table of the warehouse at `root` (its current snapshot), as a reader
    outside the product reads them: pyiceberg through the catalog (docs/concepts.md), the root's
    SQLite one unless another is given. `equal` keeps the rows whose column holds the value
    (hour="2026-01-31T10", event_day=...)."""
    from pathlib import Path

    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo

    catalog = catalog or SqlCatalog("kafka_landing", uri=f"sqlite:///{Path(root).resolve()}/_catalog.db")
    where = AlwaysTrue()
    for column, value in equal.items():
        where = And(where, EqualTo(column, value))
    return catalog.load_table(f"{dataset}.{table}").scan(row_filter=where).to_pandas()


def drop_dataset(warehouse, dataset: str) -> None:
    """A dataset's tables and namespace dropped from the warehouse's catalog (the session's REST
    catalog outlives each test), leaving their files where they are."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    catalog = warehouse.tables.catalog
    try:
        for ident in catalog.list_tables(dataset):
            catalog.drop_table(ident)
        catalog.drop_namespace(dataset)
    except NoSuchNamespaceError:
        pass
