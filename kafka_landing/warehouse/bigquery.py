"""The production warehouse: BigQuery, loaded by free load jobs straight from the
landing files in the gs:// landing root.

    project.dataset.table                 partitioned by ingestion time per HOUR
    project.dataset.table$2026013113      landing hour 2026-01-31T13, whatever the records' timestamps
    <ledger>/warehouse_loads/bigquery/<dataset>/<table>/hour=2026-01-31T13.json
                                          what was loaded: the done file's content hash and the job

Loading hour H is one load job: source format Avro with logical types, from
exactly the gs:// files H's done file lists (never a wildcard, which could pick
up a file of another attempt), into the decorator `table$YYYYMMDDHH` with
WRITE_TRUNCATE, which replaces that partition only and atomically: a reader
sees the old hour or the new one. New optional fields are added and required
ones relaxed (ALLOW_FIELD_ADDITION, ALLOW_FIELD_RELAXATION); anything else fails
the job, and a failed job changes nothing. The dataset is created when missing,
the table by the first load (schema from its files, HOUR ingestion-time
partitioning).

Idempotence comes from the job id, derived from the done file's content:
`kafka_landing_<dataset>_<table>_<YYYYMMDDHH>_<sha256[:32]>`. A retried or
duplicated load of the same content answers 409 Already Exists, and the load
waits for that job and uses its result instead of loading twice. Job ids can
never be reused, so two cases take the next id of a fixed sequence (`_r1`,
`_r2`, ...; every process walks the same one, so duplicates still meet on one
job), each recorded in the ledger under "earlier_jobs" with the reason:
- the job with that id failed (a transient error, or a cause fixed since):
  a retry must really run again;
- the job finished before this load started and the ledger names a different
  load of the hour since (the hour holds other content now). If a process died
  between a job's end and its ledger record, this reloads once more: harmless.

Why an explicit schema when an hour mixes schema ids: BigQuery takes the schema
of a multi-file Avro load from "the alphabetically last file" and reads the
others by Avro schema resolution, which drops the fields that file lacks. Such
hours are loaded with the table's schema plus every file's fields, so no column
of any file is lost. An hour of one schema id gives no schema: BigQuery derives
it (and applies its own update rules), as documented.

After the job, its output_rows must equal the done file's rows; the conservation
check reads the partition back from BigQuery (INFORMATION_SCHEMA.PARTITIONS).
An empty hour cannot be a load job (a load needs a source file): its partition
is deleted through `tables.delete` on the decorator, BigQuery's documented way.

Loads of one (table, hour) are serialised by a lock in the ledger store, so an
older content can never finish after a newer one. Pure of Dagster and Spark;
the Dagster resource builds this from `BigQueryResource.get_client()`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import re
from datetime import datetime, timezone
from typing import Iterable, Iterator

import fastavro
from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from kafka_landing.manifests import DoneFile
from kafka_landing.naming import check_identifier, hour_from_tag
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.load import (
    LoadError,
    LoadResult,
    SparkFactory,
    Warehouse,
    verify_files,
)
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

LEDGER_DIR = "warehouse_loads/bigquery"
JOB_PREFIX = "kafka_landing"
PARTITION_FORMAT = "%Y%m%d%H"
PARTITIONS_SQL = ("SELECT total_rows FROM `{project}.{dataset}.INFORMATION_SCHEMA.PARTITIONS` "
                  "WHERE table_name = @table_name AND partition_id = @partition_id")
# BigQuery's words for a schema it will not apply to the table (job errorResult messages).
_SCHEMA_REFUSED = re.compile(r"Provided Schema does not match|Invalid schema update|Cannot add (required )?fields"
                             r"|has changed (type|mode)", re.IGNORECASE)
_PROJECT = re.compile(r"^(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")  # with a domain, or not
_ROLES = ("BigQuery Data Editor (roles/bigquery.dataEditor) on the dataset or project, and BigQuery Job User "
          "(roles/bigquery.jobUser) on the project")


def _said(exc: api_exceptions.GoogleAPICallError) -> str:
    """BigQuery's own words, without the request line the client puts before them."""
    errors = getattr(exc, "errors", None) or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    return first.get("message") or exc.message


def partition_id(hour: str) -> str:
    """The ingestion-time partition of a landing hour tag: 2026-01-31T13 -> 2026013113."""
    try:
        return hour_from_tag(hour).strftime(PARTITION_FORMAT)
    except (TypeError, ValueError):
        raise LoadError(f"hour {hour!r} is not an hour tag like 2026-01-31T13") from None


def job_id(dataset: str, table: str, hour: str, sha256: str, attempt: int = 0) -> str:
    """The load job's id for one content of an hour: only [A-Za-z0-9_-], far below 1024 characters."""
    base = (f"{JOB_PREFIX}_{check_identifier(dataset, 'dataset')}_{check_identifier(table, 'table')}_"
            f"{partition_id(hour)}_{sha256[:32]}")
    return base if attempt == 0 else f"{base}_r{attempt}"


def done_sha(done: DoneFile) -> str:
    """The content hash of a DoneFile handed over without its bytes."""
    return hashlib.sha256(json.dumps(done.to_dict(), sort_keys=True).encode()).hexdigest()


# --- Avro -> BigQuery columns, for hours that mix schema ids (BigQuery's documented conversions) ----

_PRIMITIVES = {"boolean": "BOOLEAN", "int": "INTEGER", "long": "INTEGER", "float": "FLOAT", "double": "FLOAT",
               "bytes": "BYTES", "string": "STRING"}
_LOGICAL = {"date": "DATE", "time-millis": "TIME", "time-micros": "TIME", "timestamp-millis": "TIMESTAMP",
            "timestamp-micros": "TIMESTAMP", "local-timestamp-millis": "DATETIME",
            "local-timestamp-micros": "DATETIME"}


def avro_columns(writer_schema: dict) -> list[dict]:
    """BigQuery fields (API form) for a record's fields with use_avro_logical_types and decimals
    as NUMERIC or BIGNUMERIC. Raises LoadError for what BigQuery cannot take."""
    named: dict[str, dict] = {}

    def resolve(t):
        if isinstance(t, str) and t not in _PRIMITIVES and t != "null":
            return named[t]
        if isinstance(t, dict) and t.get("type") in ("record", "enum", "fixed"):
            full = t["name"] if "." in t["name"] or not t.get("namespace") else f"{t['namespace']}.{t['name']}"
            named.setdefault(full, t)
            named.setdefault(t["name"], t)
        return t

    def column(name: str, t) -> dict | None:
        mode = "REQUIRED"
        if isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if len(branches) > 1:
                raise LoadError(f"field {name!r} is a union of several types, which kafka_landing does not load "
                                "into BigQuery")
            if not branches:
                return None
            mode, t = ("NULLABLE" if "null" in t else "REQUIRED"), branches[0]
        if t == "null":
            return None  # BigQuery ignores null-only fields
        t = resolve(t)
        kind = t if isinstance(t, str) else t.get("type")
        if kind == "array":
            inner = column(name, resolve(t["items"]))
            return None if inner is None else {**inner, "mode": "REPEATED"}
        if kind == "map":
            value = column("value", t["values"])
            return {"name": name, "type": "RECORD", "mode": "REPEATED",
                    "fields": [{"name": "key", "type": "STRING", "mode": "REQUIRED"}] + ([value] if value else [])}
        if kind == "record":
            return {"name": name, "type": "RECORD", "mode": mode, "fields": fields(t)}
        logical = None if isinstance(t, str) else t.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(t["precision"]), int(t.get("scale", 0))
            bq = "NUMERIC" if precision - scale <= 29 and scale <= 9 else "BIGNUMERIC"
        elif kind in ("enum",):
            bq = "STRING"
        elif kind == "fixed":
            bq = "BYTES"
        elif logical in _LOGICAL:
            bq = _LOGICAL[logical]
        else:
            bq = _PRIMITIVES[kind]
        return {"name": name, "type": bq, "mode": mode}

    def fields(record: dict) -> list[dict]:
        return [c for c in (column(f["name"], f["type"]) for f in record["fields"]) if c is not None]

    return fields(writer_schema)


def _union(table: list[dict] | None, files: list[tuple[str, list[dict]]], where: str) -> list[dict]:
    """The table's columns plus every file's, so a multi-file load drops none. Existing columns keep
    the table's definition (relaxed where a file has them optional); a new column is REQUIRED only
    if every file requires it (BigQuery then decides whether it may be added)."""

    def merge(base: list[dict] | None, sources: list[tuple[str, list[dict]]], path: str) -> list[dict]:
        out = {f["name"].lower(): dict(f) for f in base or []}
        existing = set(out)
        for src, cols in sources:
            for c in cols:
                key, full = c["name"].lower(), f"{path}{c['name']}"
                have = out.get(key)
                if have is None:
                    out[key] = dict(c)
                    continue
                if have["type"] != c["type"] or (have.get("mode") == "REPEATED") != (c["mode"] == "REPEATED"):
                    raise IncompatibleSchemaError(
                        f"{where}: column {full} is {have.get('mode', 'NULLABLE')} {have['type']} in "
                        f"{'the table' if key in existing else 'another file'} but {c['mode']} {c['type']} in {src}")
                if c["mode"] == "NULLABLE" and have.get("mode") == "REQUIRED":
                    have["mode"] = "NULLABLE"
        for key, col in out.items():
            missing = [src for src, cols in sources if key not in {c["name"].lower() for c in cols}]
            if missing and col.get("mode") == "REQUIRED":
                if key in existing:
                    raise IncompatibleSchemaError(f"{where}: required column {path}{col['name']} of the table is "
                                                  f"missing from {missing[0]}")
                col["mode"] = "NULLABLE"
            if col["type"] == "RECORD":
                subs = [(src, next((c.get("fields", []) for c in cols if c["name"].lower() == key), []))
                        for src, cols in sources if key in {c["name"].lower() for c in cols}]
                col["fields"] = merge(col.get("fields") if key in existing else None, subs, f"{path}{col['name']}.")
        return list(out.values())

    return merge(table, files, "")


class BigQueryWarehouse(Warehouse):
    """BigQuery tables partitioned by landing hour, each hour replaced whole by one free load job."""

    kind = "bigquery"

    def __init__(self, client: bigquery.Client, ledger: LandingStore, project: str, location: str | None = None, *,
                 datasets: Iterable[str] = (), job_timeout_seconds: float = 3600.0, max_job_attempts: int = 20):
        """`client`: e.g. from dagster-gcp's `BigQueryResource.get_client()`; `ledger`: where loads are
        recorded (the landing store); `project`: where the datasets live and jobs run; `location`: the
        datasets' location (None: BigQuery's default, US); `datasets`: those `check_writable` checks."""
        if not isinstance(project, str) or not _PROJECT.match(project):
            raise ValueError(f"BigQuery project {project!r} is not a Google Cloud project id (like my-project-123)")
        self.client = client
        self.ledger = ledger
        self.project = project  # checked: it is quoted into the INFORMATION_SCHEMA query
        self.location = location
        self.datasets = tuple(check_identifier(d, "dataset") for d in datasets)
        self.job_timeout_seconds = job_timeout_seconds
        self.max_job_attempts = max_job_attempts

    # --- names ----------------------------------------------------------------------------------------

    def table_id(self, dataset: str, table: str) -> str:
        return f"{self.project}.{check_identifier(dataset, 'dataset')}.{check_identifier(table, 'table')}"

    def hour_location(self, dataset: str, table: str, hour: str) -> str:
        return f"{self.table_id(dataset, table)}${partition_id(hour)}"

    def _ledger_path(self, dataset: str, table: str, hour: str) -> str:
        partition_id(hour)
        return f"{LEDGER_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}/hour={hour}.json"

    def _lock_path(self, dataset: str, table: str, hour: str) -> str:
        return f"locks/{self._ledger_path(dataset, table, hour)[:-5]}.lock"

    # --- errors -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _api(self, what: str) -> Iterator[None]:
        """BigQuery's refusals as LoadErrors that say what to do; a 403 names the missing role."""
        try:
            yield
        except api_exceptions.Forbidden as exc:
            said = _said(exc)
            role = ("BigQuery Job User (roles/bigquery.jobUser) on project " + self.project
                    if "jobs.create" in said else
                    "BigQuery Data Editor (roles/bigquery.dataEditor) on the dataset or project " + self.project)
            raise LoadError(f"BigQuery denied {what} ({said}): grant the identity running kafka_landing {role} "
                            f"(loads need {_ROLES})") from None
        except api_exceptions.GoogleAPICallError as exc:
            raise LoadError(f"BigQuery refused {what}: {exc.code} {_said(exc)}") from None

    # --- what was loaded --------------------------------------------------------------------------

    def loaded(self, dataset: str, table: str, hour: str) -> dict | None:
        try:
            return self.ledger.read_json(self._ledger_path(dataset, table, hour))
        except ValueError:
            return {}  # unreadable: loaded, content unknown (a reload rewrites it)

    def loaded_hours(self, dataset: str, table: str) -> set[str]:
        folder = f"{LEDGER_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}"
        names = (rel.rsplit("/", 1)[-1] for rel in self.ledger.list(folder, "hour=*.json"))
        return {n[5:-5] for n in names}

    def _record(self, done: DoneFile, rows: int, done_file: str | None, sha: str, job: str | None,
                earlier: list[dict], **extra) -> None:
        self.ledger.write_json_atomic(self._ledger_path(done.dataset, done.table, done.hour), {
            "done_file": done_file, "sha256": sha, "rows": rows, "attempt": done.attempt, "job_id": job,
            "location": self.hour_location(done.dataset, done.table, done.hour), "earlier_jobs": earlier,
            "loaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **extra,
        })

    # --- reading back -----------------------------------------------------------------------------

    def hour_rows(self, dataset: str, table: str, hour: str) -> int | None:
        """The partition's rows from INFORMATION_SCHEMA.PARTITIONS; None if it holds none (or no table)."""
        sql = PARTITIONS_SQL.format(project=self.project, dataset=check_identifier(dataset, "dataset"))
        config = bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter("table_name", "STRING", check_identifier(table, "table")),
            bigquery.ScalarQueryParameter("partition_id", "STRING", partition_id(hour)),
        ])
        with self._api(f"reading the row count of {self.hour_location(dataset, table, hour)}"):
            try:
                rows = list(self.client.query_and_wait(sql, job_config=config, location=self.location,
                                                       project=self.project))
            except api_exceptions.NotFound:
                return None  # no dataset: no hour
        return int(rows[0]["total_rows"]) if rows and rows[0]["total_rows"] is not None else None

    def check_writable(self) -> None:
        """Each configured dataset exists (created if missing) in the configured location."""
        if not self.datasets:
            with self._api(f"listing the datasets of project {self.project}"):
                list(self.client.list_datasets(project=self.project, max_results=1))
        for dataset in self.datasets:
            self._ensure_dataset(dataset)

    def _ensure_dataset(self, dataset: str) -> None:
        ref = f"{self.project}.{dataset}"
        with self._api(f"reading dataset {ref}"):
            try:
                found = self.client.get_dataset(ref)
            except api_exceptions.NotFound:
                found = None
        if found is None:
            new = bigquery.Dataset(ref)
            if self.location:
                new.location = self.location
            with self._api(f"creating dataset {ref}"):
                found = self.client.create_dataset(new, exists_ok=True)
        if self.location and (found.location or "").lower() != self.location.lower():
            raise LoadError(f"dataset {ref} is in {found.location}, the warehouse is configured for {self.location}: "
                            "set the warehouse location to the dataset's, or use another dataset")

    def _existing_table(self, dataset: str, table: str) -> bigquery.Table | None:
        """The table, if it exists and is partitioned as loads need; None if the first load creates it."""
        ref = self.table_id(dataset, table)
        with self._api(f"reading table {ref}"):
            try:
                found = self.client.get_table(ref)
            except api_exceptions.NotFound:
                return None
        tp = found.time_partitioning
        if tp is None or tp.type_ != bigquery.TimePartitioningType.HOUR or tp.field:
            how = "not partitioned" if tp is None else f"partitioned by {tp.type_}" + (f" on {tp.field}" if tp.field else "")
            raise LoadError(f"table {ref} exists but is {how}: kafka_landing loads landing hours into an "
                            "ingestion-time HOUR-partitioned table; drop or rename it, or route the topic elsewhere")
        return found

    # --- loading ----------------------------------------------------------------------------------

    def _source_uris(self, store: LandingStore, done: DoneFile) -> list[str]:
        if not str(store.root).startswith("gs://"):
            raise LoadError(f"BigQuery loads from Cloud Storage only, and the landing root is {store.root}: set the "
                            "landing root to gs://<bucket>/<prefix> to load into BigQuery")
        uris = [store.location(f.path) for f in done.files]
        for uri in uris:
            if not uri.startswith("gs://") or any(c in uri for c in "*?["):
                raise LoadError(f"{done.dataset}.{done.table} {done.hour}: {uri} is not a plain gs:// object URI; "
                                "a load names exactly the done file's objects, never a pattern")
        return uris

    def _hour_schema(self, store: LandingStore, done: DoneFile, table: bigquery.Table | None,
                     where: str) -> list[bigquery.SchemaField] | None:
        """None for an hour of one schema id; else the table's columns plus every file's (see module doc)."""
        ids = {f.schema_id for f in done.files}
        if len(ids) <= 1:
            return None
        files = []
        for sid in sorted(ids, key=lambda s: (s is None, s)):
            smallest = min((f for f in done.files if f.schema_id == sid), key=lambda f: f.bytes)
            header = fastavro.reader(io.BytesIO(store.read_bytes(smallest.path)))
            try:
                files.append((f"{store.location(smallest.path)} (schema id {sid})", avro_columns(header.writer_schema)))
            except LoadError as exc:
                raise IncompatibleSchemaError(f"{where}: {exc}. Nothing was loaded") from None
        current = [f.to_api_repr() for f in table.schema] if table is not None else None
        try:
            merged = _union(current, files, where)
        except IncompatibleSchemaError as exc:
            raise IncompatibleSchemaError(
                f"{exc}. Nothing was loaded: the table and the landing files are as they were; make the producer's "
                "change compatible (new optional fields only) or migrate the table, then reload the hour") from None
        return [bigquery.SchemaField.from_api_repr(c) for c in merged]

    def _job_config(self, schema: list[bigquery.SchemaField] | None, create: bool) -> bigquery.LoadJobConfig:
        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.AVRO,
            use_avro_logical_types=True,
            write_disposition=bigquery.WriteDisposition.WRITE_TRUNCATE,
            create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
            schema_update_options=[bigquery.SchemaUpdateOption.ALLOW_FIELD_ADDITION,
                                   bigquery.SchemaUpdateOption.ALLOW_FIELD_RELAXATION],
            # Without it a decimal wider than NUMERIC (scale > 9, or > 29 integer digits) fails the load.
            decimal_target_types=["NUMERIC", "BIGNUMERIC"],
        )
        if create:  # only for the first load: an existing table keeps its own partitioning settings
            config.time_partitioning = bigquery.TimePartitioning(type_=bigquery.TimePartitioningType.HOUR)
        if schema is not None:
            config.schema = schema
        return config

    def _wait(self, job: bigquery.LoadJob, where: str) -> dict | None:
        """The job's errorResult once it is DONE (None if it succeeded)."""
        try:
            job.result(timeout=self.job_timeout_seconds)
        except concurrent.futures.TimeoutError:
            raise LoadError(f"{where}: load job {job.job_id} is still running after {self.job_timeout_seconds:.0f}s; "
                            "it finishes on its own: run the load again to wait for it (same job id)") from None
        except api_exceptions.GoogleAPIError as exc:
            if job.state != "DONE":  # not the job's failure: asking about it failed
                raise LoadError(f"{where}: waiting for load job {job.job_id} failed ({exc}); the job may still run: "
                                "run the load again to wait for it (same job id)") from None
        return job.error_result  # a job that ran and failed says why here

    def _failure(self, job_id_: str, error: dict, where: str, location: str, earlier: list[dict]) -> Exception:
        message = error.get("message", "?")
        before = "".join(f"; earlier job {e['job_id']}: {e['why']}" for e in earlier)
        text = (f"{where}: BigQuery load job {job_id_} failed: {message} (reason {error.get('reason')}){before}. "
                f"Nothing was replaced: {location} holds what it held before, and the landing files are untouched.")
        if _SCHEMA_REFUSED.search(message):
            return IncompatibleSchemaError(
                text + " The landing files' schema cannot be applied to the table: only new optional fields and "
                       "relaxed required ones are; make the producer's change compatible or migrate the table, then "
                       "reload the hour")
        if error.get("reason") == "accessDenied":
            return LoadError(text + " BigQuery could not read the files or write the table: the identity (and "
                                    f"BigQuery's service agent) needs Storage Object Viewer on the bucket and {_ROLES}")
        return LoadError(text + " Fix the cause and run the load again: it uses the next job id")

    def _run_load(self, uris: list[str], destination: str, config: bigquery.LoadJobConfig, done: DoneFile, sha: str,
                  where: str, location: str) -> tuple[bigquery.LoadJob, list[dict]]:
        earlier: list[dict] = []
        recorded = (self.loaded(done.dataset, done.table, done.hour) or {})
        for attempt in range(self.max_job_attempts):
            jid = job_id(done.dataset, done.table, done.hour, sha, attempt)
            fresh = True
            try:
                with self._api(f"starting load job {jid} into {destination}"):
                    try:
                        job = self.client.load_table_from_uri(uris, destination, job_id=jid, project=self.project,
                                                              location=self.location, job_config=config)
                    except api_exceptions.Conflict:
                        fresh = False  # this content was loaded, or is loading, under this id already
                        job = self.client.get_job(jid, project=self.project, location=self.location)
            except LoadError as exc:
                raise LoadError(f"{where}: {exc}") from None
            finished_before = not fresh and job.state == "DONE"
            error = self._wait(job, where)
            if error is not None:
                if fresh:
                    raise self._failure(jid, error, where, location, earlier)
                earlier.append({"job_id": jid, "why": f"failed: {error.get('message')}"})
                continue
            if finished_before and recorded and recorded.get("job_id") != jid:
                earlier.append({"job_id": jid, "why": "succeeded before a later load of the hour "
                                                      f"({recorded.get('job_id') or 'an empty hour'})"})
                continue
            return job, earlier
        raise LoadError(f"{where}: {self.max_job_attempts} job ids of this content are used up "
                        f"({', '.join(e['job_id'] for e in earlier[-3:])} ...): look at these jobs in BigQuery")

    def load_hour(self, store: LandingStore, done: DoneFile, spark: SparkFactory,
                  done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        """Replace partition `table$YYYYMMDDHH` with exactly the done file's files (no Spark)."""
        dataset, table = check_identifier(done.dataset, "dataset"), check_identifier(done.table, "table")
        location = self.hour_location(dataset, table, done.hour)
        where = f"{self.table_id(dataset, table)} hour {done.hour}"
        uris = self._source_uris(store, done)
        verify_files(store, done)
        sha = done_sha256 or done_sha(done)
        name = f"{dataset}.{table}"
        with self.ledger.lock(self._lock_path(dataset, table, done.hour)):  # one load of an hour at a time
            if done.rows == 0:
                # A load job needs a source; deleting the partition by its decorator empties the hour.
                with self._api(f"deleting partition {location} (the hour is empty)"):
                    self.client.delete_table(location, not_found_ok=True)
                self._record(done, 0, done_file, sha, None, [], deleted_partition=True)
                return LoadResult(name, done.hour, 0, len(done.files), tuple(done.schema_ids), (), location,
                                  done_file, sha, None)
            self._ensure_dataset(dataset)
            before = self._existing_table(dataset, table)
            config = self._job_config(self._hour_schema(store, done, before, where), create=before is None)
            job, earlier = self._run_load(uris, location, config, done, sha, where, location)
            if job.output_rows != done.rows:
                raise LoadError(
                    f"{where}: load job {job.job_id} wrote {job.output_rows} rows, the done file lists {done.rows}. "
                    f"{location} now holds what the job loaded and is not recorded as loaded: check the files "
                    "(were they rewritten after landing?) and reload the hour")
            with self._api(f"reading table {self.table_id(dataset, table)}"):
                after = self.client.get_table(self.table_id(dataset, table))
            old = {f.name.lower() for f in before.schema} if before is not None else set()
            added = tuple(f.name for f in after.schema if f.name.lower() not in old) if before is not None else ()
            self._record(done, job.output_rows, done_file, sha, job.job_id, earlier)
        return LoadResult(name, done.hour, job.output_rows, len(done.files), tuple(done.schema_ids), added,
                          location, done_file, sha, job.job_id)


__all__ = ["BigQueryWarehouse", "avro_columns", "done_sha", "job_id", "partition_id"]
