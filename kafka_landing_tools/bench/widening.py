"""A new field on an Iceberg table that holds a year of landing hours: its first hour loaded
through the warehouse (Spark writes it), the other 8,759 added as copies of that file with their
own hour in one commit (what a year of loads leaves: a file per hour), then the hour whose schema
adds a field, timed. A widening that rewrote history would replace every data file."""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from kafka_landing_tools.bench.measure import BenchError, Job
from kafka_landing_tools.bench.world import Bench, Case

YEAR_HOURS = 8_760  # the widening case's table: a year of landing hours
_V1 = {"type": "record", "name": "Click", "namespace": "bench",
       "fields": [{"name": "id", "type": "long"}, {"name": "url", "type": "string"}]}
_V2 = {**_V1, "fields": _V1["fields"] + [{"name": "referrer", "type": ["null", "string"], "default": None}]}


def _land_hour(store, hour, schema: dict, records: list[dict], schema_id: int) -> str:
    """One landing file and the done file of an hour of `bench.year`, as landing writes them."""
    import io

    import fastavro

    from kafka_landing.handoff.manifests import DeadLetters, DoneFile, LandedFile
    from kafka_landing.naming import OffsetRange, done_file_path, hour_tag, landing_file_name, table_hour_dir

    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    name = landing_file_name(OffsetRange('year', 0, 0, len(records) - 1), 'bench', 'year', schema_id)
    rel = f"{table_hour_dir('bench', 'year', hour)}/{name}"
    store.write_atomic(rel, buf.getvalue())
    files = (LandedFile(rel, len(records), len(buf.getvalue()), 0, 0, len(records) - 1, schema_id),)
    done = DoneFile(topic="year", dataset="bench", table="year", hour=hour_tag(hour), rows=len(records),
                    schema_ids=(schema_id,), files=files, dead_letters=DeadLetters(0, {}, ()),
                    slice={"manifest": "bench", "records": len(records), "partitions": []},
                    topic_records_read=len(records), offsets_without_record=0, attempt=uuid.uuid4().hex,
                    landed_at=datetime.now(timezone.utc).isoformat())
    store.write_json_atomic(done_file_path("bench", "year", hour), done.to_dict())
    return done_file_path("bench", "year", hour)


def _a_year_of_copies(table, first, root: Path) -> None:
    """The first hour's data file copied for each other hour of the year, its hour column set,
    added to the table in one commit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafka_landing.naming import ONE_HOUR, hour_tag
    from kafka_landing.warehouse.iceberg import HOUR_COLUMN

    template = pq.read_table(next(iter(table.scan().plan_files())).file.file_path)
    at = template.schema.get_field_index(HOUR_COLUMN)
    history = root / "history"
    history.mkdir()
    paths = []
    for i in range(1, YEAR_HOURS):
        path = history / f"{i}.parquet"
        pq.write_table(template.set_column(at, HOUR_COLUMN, pa.array([hour_tag(first + ONE_HOUR * i)])), path)
        paths.append(str(path))
    with table.transaction() as tx:
        tx.add_files(paths, check_duplicate_files=False)


def contender_widening_year(args) -> dict:
    """The data files before and after the widening hour's load, and its seconds."""
    from kafka_landing import defaults
    from kafka_landing.handoff.manifests import read_done_file
    from kafka_landing.naming import ONE_HOUR, floor_hour
    from kafka_landing.spark_setup import open_session, session_config
    from kafka_landing.store.local import LocalStore
    from kafka_landing.warehouse.iceberg import IcebergWarehouse

    root = Path(args.warehouse_root)
    store, wh = LocalStore(root / "landing"), IcebergWarehouse(str(root / "warehouse"))
    spark = open_session(os.environ.get("SPARK_REMOTE") or defaults.SPARK_CONNECT_URL, session_config())
    first = floor_hour(datetime.now(timezone.utc)) - ONE_HOUR * (YEAR_HOURS + 1)
    manifest, _ = read_done_file(store, _land_hour(store, first, _V1, [{"id": 0, "url": "/"}], 1))
    wh.load_partition(store, manifest, lambda: spark)
    _a_year_of_copies(wh.table("bench", "year"), first, root)
    before = {task.file.file_path for task in wh.table("bench", "year").scan().plan_files()}
    manifest, _ = read_done_file(store, _land_hour(store, first + ONE_HOUR * YEAR_HOURS, _V2,
                                                   [{"id": 1, "url": "/new", "referrer": "r"}], 2))
    t0 = time.monotonic()
    result = wh.load_partition(store, manifest, lambda: spark)
    seconds = round(time.monotonic() - t0, 2)
    after = {task.file.file_path for task in wh.table("bench", "year").scan().plan_files()}
    if result.added_columns != ("referrer",):
        raise BenchError(f"the widening hour added {result.added_columns}, not the new field 'referrer'")
    return {"records": len(after), "hours": YEAR_HOURS + 1, "files_before": len(before),
            "files_rewritten": len(before - after), "files_added": len(after - before), "load_seconds": seconds}


def jobs(bench: Bench) -> list[Job]:
    return [Job("widening a year of hours", "widening_year",
                ["--warehouse-root", str(bench.work / "widening_year"), "--out-dir", str(bench.work)], None,
                f"an Iceberg table of {YEAR_HOURS:,} landing hours gains a field")]


def report(bench: Bench, m: dict) -> dict:
    return {"widening": m["widening a year of hours"]}


CASE = Case("widening", jobs, report, {"widening_year": contender_widening_year})

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
