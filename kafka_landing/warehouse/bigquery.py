"""The production warehouse: BigQuery, loaded by free load jobs straight from the
landing files in the gs:// landing root.

    project.dataset.table                 partitioned by ingestion time per DAY
    project.dataset.table$20260131        every landed hour of 2026-01-31 (UTC landing hours)
    <ledger>/warehouse_loads/bigquery/<dataset>/<table>/day=2026-01-31.json
                                          the day's last load: its content hash, job and hours
    <ledger>/warehouse_loads/bigquery/<dataset>/<table>/hour=2026-01-31T13.json
                                          what was loaded of each hour: its done file's content hash
                                          and the job; while a job may run, the day's (or hour's)
                                          record also holds "running_job" (its id and content hash)

Why days: BigQuery allows 10,000 partitions per table, so a table with one
partition per hour stops loading after 417 days; by day it lasts 27 years, and
a backfill of a year is 365 load jobs, not 8,760 (BigQuery allows 1,500 per
table a day, failed ones included). The price: each hour's load reloads the
hours of its day landed before it (on average 12 hours of files for an hourly
schedule; load jobs are free, and a backfill loads each day once). Tables that
kafka_landing created per HOUR before keep that layout and load as they did,
warned about when 9,000 partitions are reached.

Loading hour H is one load job: source format Avro with logical types, from
exactly the gs:// files the done files of H's day list (never a wildcard, which
could pick up a file of another attempt), into the decorator `table$YYYYMMDD`
with WRITE_TRUNCATE, which replaces that day only and atomically: a reader sees
the old day or the new one. The done files of the day are read under the day's
lock, so a load that waited for another sees the day as it is now. A failed job
changes nothing. The dataset is created when missing, the table by the first
load (DAY ingestion-time partitioning). A day whose hours hold no row is emptied
by deleting its partition.

Idempotence comes from the job id, derived from the content: the hash of the
day's (hour, done-file hash) pairs, `kafka_landing_<dataset>_<table>_<YYYYMMDD>_
<sha256[:32]>` (an HOUR table: the done file's hash, `<YYYYMMDDHH>`). A retried
or duplicated load of the same content answers 409 Already Exists, and the load
waits for that job and uses its result instead of loading twice; so the hours of
a day loaded in one run cost one job. Job ids can
never be reused, so two cases take the next id of a fixed sequence (`_r1`,
`_r2`, ...; every process walks the same one, so duplicates still meet on one
job), each recorded in the ledger under "earlier_jobs" with the reason:
- the job with that id failed (a transient error, or a cause fixed since):
  a retry must really run again;
- the job finished before this load started and the ledger names a different
  load of the partition since (it holds other content now). If a process died
  between a job's end and its ledger record, this reloads once more: harmless.

Schema changes, with no person involved and in any order of hours
(`bigquery_schema.plan_load` decides, from the table's columns and the writer
schema of each schema id of the hour). What the design relies on, and where
BigQuery documents it:
- "Load Avro data from Cloud Storage": the schema of a multi-file Avro load is
  the alphabetically last file's, "all schemas must be compatible with Avro's
  schema resolution"; and jobs.insert `referenceFileSchemaUri`: "a reference
  file with the reader schema ... enabled for AVRO". So when the hour's files
  do not give exactly the columns wanted, the load names a reader schema: a
  zero-record Avro file written once under the landing root,
  tables/<dataset>/<table>/_reader_schemas/<sha256 of the schema>.avro (never
  a source URI, so never loaded). Every file is then read by Avro's resolution,
  which promotes int -> long -> float -> double, fills a field a file lacks
  with the reader's default (null) and reads a [null, T] union of the file's T.
  An explicit `schema` is never sent: whether a load converts a file's long into
  a FLOAT column is not documented, and is not relied on.
- "Modifying table schemas": ALLOW_FIELD_ADDITION adds NULLABLE (or REPEATED)
  columns only, nested ones too; ALLOW_FIELD_RELAXATION makes REQUIRED columns
  NULLABLE; a REQUIRED column absent from the load's schema fails the load
  ("Field x is missing in new schema"). So a field new to an existing table or
  record, and a REQUIRED column the hour lacks, are nullable in the reader.
- The DDL reference (ALTER COLUMN SET DATA TYPE: a coercion to a less restrictive
  type, of a top-level column; DDL is free) and "Troubleshoot schema errors" ("has
  changed type": INT64 -> NUMERIC, INT64 -> FLOAT64, NUMERIC -> BIGNUMERIC by
  ALTER COLUMN). So int/long -> float/double widens the column to FLOAT64 and a
  decimal outgrowing NUMERIC widens it to BIGNUMERIC, by a query before the load;
  older hours of narrower files are then promoted by the reader schema.
- Not documented, assumed (Avro Java's resolution does it): a decimal is read
  into a decimal of the same scale and a larger precision (the same unscaled
  value); that is how a NUMERIC-sized file loads into a BIGNUMERIC column.
Refused before any job (IncompatibleSchemaError, terminal, naming the field, the
schema ids and what to do): STRING <-> BYTES, a type change of a nested or
repeated column, what Avro cannot resolve, and, within one load (a day), two
scales of a decimal or two units of a timestamp.

After the job, its output_rows must equal the done files' rows; the conservation
check reads the partition back from BigQuery (INFORMATION_SCHEMA.PARTITIONS): a
day's rows less those its last load wrote for its other hours. An empty partition
cannot be a load job (a load needs a source file): it is deleted through
`tables.delete` on the decorator, BigQuery's documented way. Each job started is
counted by UTC day in the ledger, and a load warns from 1,200 a day on.

Loads of one (table, day) are serialised by a lock in the ledger store. A job
outlives a loader that timed out or was killed, and of two jobs into one
partition the one that commits last holds it; so each job is recorded in the
partition's ledger record ("running_job") before it is started and waited for, and a load of
other content first waits until the recorded job is DONE (a wait that runs out
is a transient error naming the job). So an older content never finishes after
a newer one. Pure of Dagster and Spark;
the Dagster resource builds this from `BigQueryResource.get_client()`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Iterator

from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from kafka_landing.errors import KafkaLandingError, error_reason, heals_after, is_transient, transient_reason
from kafka_landing.handoff.markers import content_sha
from kafka_landing.handoff.manifests import Manifest
from kafka_landing.naming import (
    UNKNOWN_EVENT,
    check_event_partition,
    check_identifier,
    day_done_file_glob,
    day_of,
    event_load_ledger_path,
    event_load_lock_path,
    hour_folder_tag,
    hour_from_tag,
    load_day_ledger_path,
    load_day_lock_path,
    load_jobs_dir,
    load_jobs_root,
    load_ledger_dir,
    load_ledger_path,
    load_lock_path,
    reader_schema_path,
)
from kafka_landing.store.base import HeldLock, LandingStore
from kafka_landing.warehouse.bigquery_schema import FileSchema, LoadSchema, avro_columns, plan_load
from kafka_landing.handoff.manifests import DoneFileError, read_done_file
from kafka_landing.warehouse.load import (
    LoadError,
    LoadResult,
    SparkFactory,
    Warehouse,
    verify_files,
)
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

JOB_PREFIX = "kafka_landing"
HOUR, DAY = "HOUR", "DAY"  # how a table is partitioned: new tables by DAY, tables of before by HOUR
PARTITION_FORMAT, DAY_FORMAT = "%Y%m%d%H", "%Y%m%d"
MAX_PARTITIONS = 10_000  # per table (BigQuery's quotas): 417 days of hours, 27 years of days
PARTITIONS_WARNING = 9_000  # an HOUR table this full is months from refusing every load
MAX_LOAD_JOBS = 1_500  # per table and UTC day (BigQuery's quotas), failed jobs included
LOAD_JOBS_WARNING = 1_200
JOB_COUNTS_KEPT_SECONDS = 2 * 86_400  # BigQuery's quota looks back 24 hours; older counts are swept
RUNNING = "running_job"  # the ledger's key for the job started last, while it may still run
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


def partition_id(hour: str, layout: str = HOUR) -> str:
    """The ingestion-time partition of a landing hour tag: 2026-01-31T13 -> 2026013113 in a table
    partitioned by HOUR, 20260131 in one partitioned by DAY."""
    try:
        return hour_from_tag(hour).strftime(PARTITION_FORMAT if layout == HOUR else DAY_FORMAT)
    except (TypeError, ValueError):
        raise LoadError(f"hour {hour!r} is not an hour tag like 2026-01-31T13") from None


def job_id(dataset: str, table: str, hour: str, sha256: str, attempt: int = 0, layout: str = HOUR) -> str:
    """The load job's id for one content of an hour's partition (an hour, or its day): only
    [A-Za-z0-9_-], far below 1024 characters. A day's id has 8 digits, an hour's 10: never the same."""
    base = (f"{JOB_PREFIX}_{check_identifier(dataset, 'dataset')}_{check_identifier(table, 'table')}_"
            f"{partition_id(hour, layout)}_{sha256[:32]}")
    return base if attempt == 0 else f"{base}_r{attempt}"


def day_sha(hours: dict[str, str]) -> str:
    """The identity of a day's content: its hours' done-file hashes, empty hours included."""
    return content_sha(json.dumps(sorted(hours.items())).encode())


@dataclass(frozen=True)
class _Target:
    """What one load job replaces whole: a landing hour's partition (a table partitioned by HOUR)
    or its day's (by DAY), with the ledger record of its loads and the lock that serialises them."""

    dataset: str
    table: str
    hour: str  # the hour loaded; for a day, any hour of it
    layout: str  # HOUR or DAY
    location: str  # project.dataset.table$YYYYMMDD[HH]
    ledger: str
    lock: str
    pid: str | None = None  # an event partition's id in job ids (its hour is then the partition)

    def job_id(self, sha: str, attempt: int = 0) -> str:
        if self.pid is None:
            return job_id(self.dataset, self.table, self.hour, sha, attempt, self.layout)
        base = f"{JOB_PREFIX}_{self.dataset}_{self.table}_{self.pid}_{sha[:32]}"
        return base if attempt == 0 else f"{base}_r{attempt}"


@dataclass(frozen=True)
class _DayHour:
    """One landed hour of a day partition: its done file, as read under the day's lock."""

    done: Manifest
    done_file: str | None
    sha: str


class BigQueryWarehouse(Warehouse):
    """BigQuery tables partitioned by landing day (or, made so before, by hour), each replaced whole
    by one free load job."""

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
        self._layouts: dict[tuple[str, str], str] = {}  # (dataset, table) -> HOUR or DAY, once it exists

    # --- names ----------------------------------------------------------------------------------------

    def table_id(self, dataset: str, table: str) -> str:
        return f"{self.project}.{check_identifier(dataset, 'dataset')}.{check_identifier(table, 'table')}"

    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        """`table$YYYYMMDDHH` in a table partitioned by HOUR; `table$YYYYMMDD`, the day that holds the
        hour, in one partitioned by DAY (every table created since)."""
        return self._target(dataset, table, partition).location

    def _target(self, dataset: str, table: str, hour: str, layout: str | None = None) -> _Target:
        layout = layout or self.layout(dataset, table)
        location = f"{self.table_id(dataset, table)}${partition_id(hour, layout)}"
        if layout == HOUR:
            return _Target(dataset, table, hour, HOUR, location, load_ledger_path(dataset, table, hour),
                           load_lock_path(dataset, table, hour))
        return _Target(dataset, table, hour, DAY, location, load_day_ledger_path(dataset, table, hour),
                       load_day_lock_path(dataset, table, hour))

    def layout(self, dataset: str, table: str) -> str:
        """HOUR for a table created so (before days: kept as it is), DAY for any other, and for a
        table the first load will create."""
        key = (dataset, table)
        if key not in self._layouts:
            found = self._existing_table(dataset, table)
            if found is None:
                return DAY
            self._layouts[key] = found.time_partitioning.type_
        return self._layouts[key]

    # --- errors -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _api(self, what: str) -> Iterator[None]:
        """BigQuery's answers as LoadErrors that say what to do, transient or terminal by
        `errors.is_transient`; a 403 that is no rate limit names the missing role."""
        try:
            yield
        except KafkaLandingError:
            raise
        except api_exceptions.GoogleAPICallError as exc:
            if is_transient(exc):
                raise LoadError(f"BigQuery answered {what} with {exc.code} {_said(exc)}: not now, try again later",
                                transient=True) from None
            if isinstance(exc, api_exceptions.Forbidden) and error_reason(exc) in (None, "accessDenied"):
                said = _said(exc)
                role = ("BigQuery Job User (roles/bigquery.jobUser) on project " + self.project
                        if "jobs.create" in said else
                        "BigQuery Data Editor (roles/bigquery.dataEditor) on the dataset or project " + self.project)
                raise LoadError(f"BigQuery denied {what} ({said}): grant the identity running kafka_landing {role} "
                                f"(loads need {_ROLES})") from None
            if (after := heals_after(error_reason(exc))) is not None:
                raise LoadError(f"BigQuery refused {what}: {exc.code} {_said(exc)}; the quota refills with time: "
                                f"asked for again in {after / 3600:g} h", heals_after=after) from None
            raise LoadError(f"BigQuery refused {what}: {exc.code} {_said(exc)}") from None
        except Exception as exc:
            if not is_transient(exc):  # a bug, not BigQuery's answer: as it is
                raise
            # no answer, or the client's own retries ran out of time (RetryError)
            raise LoadError(f"BigQuery did not answer {what} ({type(exc).__name__}: {exc}): try again later",
                            transient=True) from None

    # --- what was loaded --------------------------------------------------------------------------

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        return self._read_record(load_ledger_path(dataset, table, partition))

    def _read_record(self, path: str) -> dict | None:
        try:
            record = self.ledger.read_json(path)
        except ValueError:
            return {}  # unreadable: loaded, content unknown (a reload rewrites it)
        if record is not None and set(record) == {RUNNING}:
            return None  # a first job started, no load recorded yet
        return record

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        """Hour tags with a recorded load: one listing, not a read per hour. An hour whose first job was
        started and may still run (see `_mark_running`) is listed too."""
        names = (rel.rsplit("/", 1)[-1] for rel in self.ledger.list(load_ledger_dir(dataset, table), "hour=*.json"))
        return {h for n in names if (h := hour_folder_tag(n))}

    def _record(self, held: HeldLock, path: str, record: dict) -> None:
        held.fence()
        self.ledger.write_json_atomic(path, {**record, "loaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})

    def _hour_record(self, done: Manifest, rows: int, done_file: str | None, sha: str, job: str | None,
                     location: str, earlier: list[dict], **extra) -> dict:
        return {"done_file": done_file, "sha256": sha, "rows": rows, "attempt": done.attempt, "job_id": job,
                "location": location, "earlier_jobs": earlier, **extra}

    def _mark_running(self, held: HeldLock, target: _Target, previous: dict | None, jid: str, sha: str) -> None:
        """Record the job before it is started and waited for: a loader that times out or is killed
        leaves it running, and the next load of the partition must find it (`_await_running`)."""
        base = previous if previous else {} if previous is None else {"sha256": None}  # unreadable stays "loaded"
        held.fence()
        self.ledger.write_json_atomic(target.ledger, {
            **base, RUNNING: {"job_id": jid, "sha256": sha,
                                          "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}})

    def _clear_running(self, held: HeldLock, target: _Target) -> None:
        """The job ended without a recorded load (it failed, or was refused): the ledger says again
        what it said before, so a failed first load leaves the partition unloaded."""
        record = self._read_record(target.ledger)
        if record is None:
            held.fence()
            self.ledger.delete(target.ledger)
        elif RUNNING in record:
            held.fence()
            self.ledger.write_json_atomic(target.ledger, {k: v for k, v in record.items() if k != RUNNING})

    # --- reading back -----------------------------------------------------------------------------

    def partition_rows(self, dataset: str, table: str, hour: str) -> int | None:
        """The hour's rows as BigQuery holds them; None if it holds none (or no table). In a table
        partitioned by HOUR, the partition's rows from INFORMATION_SCHEMA.PARTITIONS. In one by DAY,
        BigQuery knows only the day's rows: the hour's rows are those its day's last load wrote for
        it, plus any difference between what the day holds and what that load wrote in all (so a
        day changed by other hands shows in every hour of it)."""
        target = self._target(dataset, table, hour)
        held = self._rows_of_pid(dataset, table, target.location.rsplit("$", 1)[1])
        if target.layout == HOUR:
            return held
        day = self._read_record(target.ledger) or {}
        mine = (day.get("hours") or {}).get(hour, {}).get("rows", 0)
        rows = mine + (held or 0) - (day.get("rows") or 0)
        return rows or None

    def _rows_of_pid(self, dataset: str, table: str, pid: str) -> int | None:
        sql = PARTITIONS_SQL.format(project=self.project, dataset=check_identifier(dataset, "dataset"))
        config = bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter("table_name", "STRING", check_identifier(table, "table")),
            bigquery.ScalarQueryParameter("partition_id", "STRING", pid),
        ])
        with self._api(f"reading the row count of {self.table_id(dataset, table)}${pid}"):
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

    def _existing_table(self, dataset: str, table: str, layout: str | None = None) -> bigquery.Table | None:
        """The table, if it exists and is partitioned as loads need (by ingestion time, per HOUR or DAY;
        `layout`: that one); None if the first load creates it."""
        ref = self.table_id(dataset, table)
        with self._api(f"reading table {ref}"):
            try:
                found = self.client.get_table(ref)
            except api_exceptions.NotFound:
                return None
        tp = found.time_partitioning
        if tp is None or tp.type_ not in (HOUR, DAY) or tp.field or (layout and tp.type_ != layout):
            how = "not partitioned" if tp is None else f"partitioned by {tp.type_}" + (f" on {tp.field}" if tp.field else "")
            raise LoadError(f"table {ref} exists but is {how}: kafka_landing loads landing hours into a table "
                            f"partitioned by ingestion time, per DAY (or per HOUR for a table it created so"
                            f"{', as this one was when the load began' if layout else ''}); drop or rename it, or "
                            "route the topic elsewhere")
        self._layouts[(dataset, table)] = tp.type_
        return found

    # --- loading ----------------------------------------------------------------------------------

    def _source_uris(self, store: LandingStore, dones: list[Manifest]) -> list[str]:
        if not str(store.root).startswith("gs://"):
            raise LoadError(f"BigQuery loads from Cloud Storage only, and the landing root is {store.root}: set the "
                            "landing root to gs://<bucket>/<prefix> to load into BigQuery")
        uris = []
        for done in dones:
            for uri in (store.location(f.path) for f in done.landed_files):
                if not uri.startswith("gs://") or any(c in uri for c in "*?["):
                    raise LoadError(f"{done.dataset}.{done.target} {done.partition}: {uri} is not a plain gs:// "
                                    "object URI; a load names exactly the done files' objects, never a pattern")
                uris.append(uri)
        return uris

    def _plan(self, store: LandingStore, dones: list[Manifest], table: bigquery.Table | None, where: str) -> LoadSchema:
        """The widenings and the reader schema the files need (see the module doc): the writer
        schema of each schema id, from its smallest file."""
        every = [f for d in dones for f in d.landed_files]
        files = []
        for sid in sorted({f.schema_id for f in every}, key=lambda s: (s is None, s)):
            smallest = min((f for f in every if f.schema_id == sid), key=lambda f: f.bytes)
            files.append(FileSchema(sid, store.location(smallest.path), store.avro_schema(smallest.path)))
        current = [f.to_api_repr() for f in table.schema] if table is not None else None
        return plan_load(current, files, where)

    def _widen(self, plan: LoadSchema, dataset: str, table: str, where: str) -> None:
        """Apply the plan's column widenings (free DDL queries) before the load; each is idempotent."""
        table_id = self.table_id(dataset, table)
        for widening in plan.widenings:
            sql = widening.statement(table_id)
            try:
                with self._api(f"widening column {widening.column} of {table_id} ({sql})"):
                    try:
                        self.client.query_and_wait(sql, location=self.location, project=self.project)
                    except api_exceptions.BadRequest as exc:
                        raise IncompatibleSchemaError(
                            f"{where}: BigQuery refused to widen column {widening.column} from {widening.old} to "
                            f"{widening.new} ({_said(exc)}). Nothing was loaded; the landing files are untouched. "
                            "To go on: look at the column in BigQuery (was it changed by hand?), then load the hour "
                            "again") from None
            except IncompatibleSchemaError:
                raise
            except LoadError as exc:
                raise LoadError(f"{where}: {exc}", transient=exc.transient) from None

    def _reader_uri(self, store: LandingStore, dataset: str, table: str, plan: LoadSchema) -> str | None:
        """The gs:// URI of the plan's reader schema file, written once (content-addressed), or None."""
        if plan.reader is None:
            return None
        sha, data = plan.reader_file()
        rel = reader_schema_path(dataset, table, sha)
        if not store.exists(rel):
            store.create_exclusive(rel, data)  # False: another load wrote the same schema first
        return store.location(rel)

    def by_event(self, granularity: str, field: str) -> BigQueryEventWarehouse:
        return BigQueryEventWarehouse(self, granularity, field)

    def _job_config(self, reference: str | None, create: str | None, whole_table: bool = False
                    ) -> bigquery.LoadJobConfig:
        """`whole_table`: the load replaces a whole unpartitioned table, schema included, where BigQuery
        refuses schema update options."""
        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.AVRO,
            use_avro_logical_types=True,
            write_disposition=bigquery.WriteDisposition.WRITE_TRUNCATE,
            create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
            **({} if whole_table else {"schema_update_options": [bigquery.SchemaUpdateOption.ALLOW_FIELD_ADDITION,
                                                                 bigquery.SchemaUpdateOption.ALLOW_FIELD_RELAXATION]}),
            # Without it a decimal wider than NUMERIC (scale > 9, or > 29 integer digits) fails the load.
            decimal_target_types=["NUMERIC", "BIGNUMERIC"],
        )
        if create:  # only for the first load (DAY): an existing table keeps its own partitioning settings
            config.time_partitioning = bigquery.TimePartitioning(type_=create)
        if reference is not None:
            config.reference_file_schema_uri = reference
        return config

    def _wait(self, job: bigquery.LoadJob, where: str, then: str | None = None) -> dict | None:
        """The job's errorResult once it is DONE (None if it succeeded); `then`: what to do if it is not."""
        again = then or "run the load again to wait for it (same job id)"
        try:
            job.result(timeout=self.job_timeout_seconds)
        except concurrent.futures.TimeoutError:
            raise LoadError(f"{where}: load job {job.job_id} is still running after {self.job_timeout_seconds:.0f}s; "
                            + (then or f"it finishes on its own: {again}"), transient=True) from None
        except (api_exceptions.GoogleAPIError, OSError) as exc:
            if job.state != "DONE":  # not the job's failure: asking about it failed; only a denial is for good
                denied = isinstance(exc, api_exceptions.Forbidden) and not is_transient(exc)
                raise LoadError(f"{where}: waiting for load job {job.job_id} failed ({exc}); the job may still run: "
                                f"{again}", transient=not denied) from None
        return job.error_result  # a job that ran and failed says why here

    def _await_running(self, target: _Target, sha: str, where: str) -> None:
        """Before a job of other content (or an empty hour's partition delete): wait until the job the
        ledger records as started last is DONE, whatever its result. Why: the lock serialises loaders,
        not jobs; a job outlives a loader that timed out or was killed, and of two jobs into one
        partition the one that commits last holds it. Why wait rather than cancel: jobs.cancel is best
        effort (the job may still commit), so it must be waited for until DONE all the same; a load job
        is free and the next job replaces the partition whole; and waiting needs only jobs.get, which
        loads use anyway. The same content needs nothing here: its job id meets the job (409)."""
        try:
            running = (self.ledger.read_json(target.ledger) or {}).get(RUNNING)
        except ValueError:
            return  # unreadable: no job to know of
        if not running or not running.get("job_id") or running.get("sha256") == sha:
            return
        jid = running["job_id"]
        try:
            with self._api(f"reading load job {jid}"):
                try:
                    job = self.client.get_job(jid, project=self.project, location=self.location)
                except api_exceptions.NotFound:
                    return  # never created (its loader died before jobs.insert answered), or long gone
        except LoadError as exc:
            raise LoadError(f"{where}: {exc}", transient=exc.transient) from None
        if job.state == "DONE":
            return
        cancel = f"bq {f'--location={self.location} ' if self.location else ''}cancel {self.project}:{jid}"
        self._wait(job, where, then=(
            "it loads an earlier content of the partition (a loader gave up on it), and a job of other content must "
            "not run beside it: whichever ends last would hold the partition. This load changed nothing: run it again "
            "later "
            f"(it waits for that job again), or cancel that job ({cancel}) and then run the load again"))

    def _failure(self, job_id_: str, error: dict, where: str, location: str, earlier: list[dict]) -> Exception:
        """A failed job's errorResult as an error: transient by `errors.transient_reason`, a schema refusal
        as IncompatibleSchemaError, anything else a terminal LoadError."""
        message = error.get("message", "?")
        before = "".join(f"; earlier job {e['job_id']}: {e['why']}" for e in earlier)
        text = (f"{where}: BigQuery load job {job_id_} failed: {message} (reason {error.get('reason')}){before}. "
                f"Nothing was replaced: {location} holds what it held before, and the landing files are untouched.")
        if transient_reason(error.get("reason")):
            return LoadError(text + " BigQuery was briefly unable to run it: the load is tried again (next job id)",
                             transient=True)
        if (after := heals_after(error.get("reason"))) is not None:
            return LoadError(text + f" The quota refills with time: the load is asked for again in {after / 3600:g} h",
                             heals_after=after)
        if error.get("reason") == "notFound" and "URI" in message:
            # A source file removed after the job was planned: a re-land of one of the hours replaced its
            # files meanwhile. The next load reads the done files as they are then.
            return LoadError(text + " A landing file was replaced while the job ran (a re-land): the load is tried "
                                    "again with the files as they are now", transient=True)
        if _SCHEMA_REFUSED.search(message):
            return IncompatibleSchemaError(
                text + " The landing files' schema cannot be applied to the table: only new optional fields and "
                       "relaxed required ones are; make the producer's change compatible or migrate the table, then "
                       "reload the hour")
        if error.get("reason") == "accessDenied":
            return LoadError(text + " BigQuery could not read the files or write the table: the identity (and "
                                    f"BigQuery's service agent) needs Storage Object Viewer on the bucket and {_ROLES}")
        return LoadError(text + " Fix the cause and run the load again: it uses the next job id")

    def _run_load(self, held: HeldLock, uris: list[str], target: _Target, config: bigquery.LoadJobConfig,
                  sha: str, where: str) -> tuple[bigquery.LoadJob, list[dict], int]:
        """(the job that loaded this content, earlier job ids of it, the table's load jobs today)."""
        earlier: list[dict] = []
        recorded = self._read_record(target.ledger)
        for attempt in range(self.max_job_attempts):
            jid = target.job_id(sha, attempt)
            self._mark_running(held, target, recorded, jid, sha)
            jobs_today = self._count_job(held, target, jid)
            fresh = True
            held.fence()  # the job replaces the partition: a commit too
            try:
                with self._api(f"starting load job {jid} into {target.location}"):
                    try:
                        job = self.client.load_table_from_uri(uris, target.location, job_id=jid, project=self.project,
                                                              location=self.location, job_config=config)
                    except api_exceptions.Conflict:
                        fresh = False  # this content was loaded, or is loading, under this id already
                        job = self.client.get_job(jid, project=self.project, location=self.location)
            except LoadError as exc:
                if fresh and not exc.transient:  # jobs.insert refused: no job was created
                    self._clear_running(held, target)
                raise LoadError(f"{where}: {exc}", transient=exc.transient) from None
            finished_before = not fresh and job.state == "DONE"
            error = self._wait(job, where)
            if error is not None:
                if fresh:
                    self._clear_running(held, target)
                    raise self._failure(jid, error, where, target.location, earlier)
                earlier.append({"job_id": jid, "why": f"failed: {error.get('message')}"})
                continue
            if finished_before and recorded and recorded.get("job_id") != jid:
                earlier.append({"job_id": jid, "why": "succeeded before a later load of the partition "
                                                      f"({recorded.get('job_id') or 'an empty one'})"})
                continue
            return job, earlier, jobs_today
        self._clear_running(held, target)
        raise LoadError(f"{where}: {self.max_job_attempts} job ids of this content are used up "
                        f"({', '.join(e['job_id'] for e in earlier[-3:])} ...): look at these jobs in BigQuery")

    def _count_job(self, held: HeldLock, target: _Target, jid: str) -> int:
        """One empty object per job started, by UTC day: listing them is a count that concurrent loads
        of other days of the table cannot lose. A job met again (409) is counted once. Returns the
        table's jobs today, this one included (one listing: the warnings use it too)."""
        day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        today = load_jobs_dir(target.dataset, target.table, day)
        listed = self.ledger.list(today)
        if not listed:  # the table's first job today: the counts of two days ago are done with
            held.fence()
            self.ledger.sweep(load_jobs_root(target.dataset, target.table), "day=*/*", JOB_COUNTS_KEPT_SECONDS)
        held.fence()
        self.ledger.create_exclusive(f"{today}/{jid}", b"")
        return len(listed) + (f"{today}/{jid}" not in listed)

    def load_jobs_today(self, dataset: str, table: str) -> int:
        day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        return len(self.ledger.list(load_jobs_dir(dataset, table, day)))

    def _warnings(self, target: _Target, table: bigquery.Table | None, jobs: int) -> tuple[str, ...]:
        """`jobs`: the table's load jobs started today, as `_count_job` counted them."""
        out = []
        ref = self.table_id(target.dataset, target.table)
        if jobs >= LOAD_JOBS_WARNING:
            out.append(f"{ref}: {jobs} load jobs started today (UTC); BigQuery refuses the table's loads past "
                       f"{MAX_LOAD_JOBS} in 24 hours, failed ones included (its quota refills over 24 hours). Load "
                       "fewer, larger ranges (a backfill as one run: a day's hours share one job)")
        partitions = int(table.to_api_repr().get("numPartitions") or 0) if table is not None else 0
        if target.layout == HOUR and partitions >= PARTITIONS_WARNING:
            out.append(f"{ref} is partitioned by HOUR and holds {partitions} partitions; BigQuery refuses every load "
                       f"past {MAX_PARTITIONS} (about {(MAX_PARTITIONS - partitions) // 24} days of hours from now). "
                       "Recreate it partitioned by DAY (drop it, or rename it away, and load its hours again: "
                       "kafka_landing creates new tables by DAY), or set a partition expiration on it")
        return tuple(out)

    def _replace(self, held: HeldLock, store: LandingStore, target: _Target, dones: list[Manifest], sha: str,
                 where: str) -> tuple[bigquery.LoadJob | None, list[dict], tuple[str, ...], tuple[str, ...]]:
        """One job that replaces the target's partition with exactly the files of `dones` (or, when
        they hold no row, the partition deleted: a load job needs a source). Returns the job, the
        earlier job ids of this content, the columns it added to the table and warnings."""
        self._await_running(target, sha, where)
        rows = sum(d.rows for d in dones)
        if rows == 0:
            held.fence()
            with self._api(f"deleting partition {target.location} (it holds no row now)"):
                self.client.delete_table(target.location, not_found_ok=True)
            return None, [], (), ()
        dataset, table = target.dataset, target.table
        self._ensure_dataset(dataset)
        before = self._existing_table(dataset, table, target.layout)
        plan = self._plan(store, dones, before, where)
        if plan.widenings:
            self._widen(plan, dataset, table, where)
            before = self._existing_table(dataset, table, target.layout)
        config = self._job_config(self._reader_uri(store, dataset, table, plan),
                                  create=target.layout if before is None else None,
                                  whole_table=target.layout == UNPARTITIONED)
        try:
            job, earlier, jobs_today = self._run_load(held, self._source_uris(store, dones), target, config, sha,
                                                      where)
        except IncompatibleSchemaError:
            now = self._existing_table(dataset, table)
            if [f.to_api_repr() for f in (now.schema if now else [])] != \
                    [f.to_api_repr() for f in (before.schema if before else [])]:
                raise LoadError(f"{where}: the table's schema changed while this load ran (another load widened or "
                                "extended it), so BigQuery refused the schema planned before: loading the hour again "
                                "plans against the table as it is now", transient=True) from None
            raise
        if job.output_rows != rows:
            self._clear_running(held, target)
            raise LoadError(
                f"{where}: load job {job.job_id} wrote {job.output_rows} rows, the done files list {rows}. "
                f"{target.location} now holds what the job loaded and is not recorded as loaded: check the files "
                "(were they rewritten after landing?) and load the hour again")
        self._layouts[(dataset, table)] = target.layout
        with self._api(f"reading table {self.table_id(dataset, table)}"):
            after = self.client.get_table(self.table_id(dataset, table))
        old = {f.name.lower() for f in before.schema} if before is not None else set()
        added = tuple(f.name for f in after.schema if f.name.lower() not in old) if before is not None else ()
        return job, earlier, added, self._warnings(target, after, jobs_today)

    def load_partition(self, store: LandingStore, done: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        """Replace the hour's partition (no Spark): in a table partitioned by DAY, the day that holds
        the hour, with the files of every landed hour of it; in one by HOUR, `table$YYYYMMDDHH`."""
        dataset, table = check_identifier(done.dataset, "dataset"), check_identifier(done.target, "table")
        sha = done_sha256 or content_sha(done.to_bytes())  # handed over without its bytes: as publish wrote it
        target = self._target(dataset, table, done.partition)
        name = f"{dataset}.{table}"
        if target.layout == HOUR:
            where = f"{self.table_id(dataset, table)} hour {done.partition}"
            self._source_uris(store, [done])
            verify_files(store, done)
            with self.ledger.lock(target.lock) as held:  # one load of an hour at a time
                job, earlier, added, warnings = self._replace(held, store, target, [done], sha, where)
                jid = job.job_id if job else None
                self._record(held, target.ledger, self._hour_record(
                    done, done.rows, done_file, sha, jid, target.location, earlier,
                    **({} if job else {"deleted_partition": True})))
        else:
            where = f"{self.table_id(dataset, table)} day {day_of(done.partition)} (loading hour {done.partition})"
            self._source_uris(store, [done])
            with self.ledger.lock(target.lock) as held:  # one load of a day at a time: each replaces it whole
                hours = self._day_hours(store, target, done, done_file, sha, where)
                loaded = (self._read_record(target.ledger) or {}).get("hours") or {}
                for hour, h in hours.items():
                    # An hour the day's last load verified and loaded with this same content is not
                    # read again: an hourly schedule would otherwise verify the day's every file 24 times.
                    if hour == done.partition or (loaded.get(hour) or {}).get("sha256") != h.sha:
                        verify_files(store, h.done)
                content = day_sha({hour: h.sha for hour, h in hours.items()})
                job, earlier, added, warnings = self._replace(held, store, target, [h.done for h in hours.values()],
                                                              content, where)
                jid = job.job_id if job else None
                self._record(held, target.ledger, {
                    "sha256": content, "rows": sum(h.done.rows for h in hours.values()), "job_id": jid,
                    "location": target.location, "earlier_jobs": earlier,
                    "hours": {hour: {"done_file": h.done_file, "sha256": h.sha, "rows": h.done.rows}
                              for hour, h in hours.items()}, **({} if job else {"deleted_partition": True})})
                for hour, h in hours.items():  # what the sensor and the checks read, hour by hour
                    self._record(held, load_ledger_path(dataset, table, hour), self._hour_record(
                        h.done, h.done.rows, h.done_file, h.sha, jid, target.location, earlier, day_sha256=content,
                        **({} if job else {"deleted_partition": True})))
            return LoadResult(name, done.partition, done.rows, len(done.landed_files), tuple(done.schema_ids), added,
                              target.location, done_file, sha, jid, warnings,
                              tuple((hour, h.sha) for hour, h in hours.items() if hour != done.partition))
        return LoadResult(name, done.partition, done.rows, len(done.landed_files), tuple(done.schema_ids), added,
                          target.location, done_file, sha, job.job_id if job else None, warnings)

    def _day_hours(self, store: LandingStore, target: _Target, done: Manifest, done_file: str | None, sha: str,
                   where: str) -> dict[str, _DayHour]:
        """Every landed hour of the target's day, read under its lock (so a load that waited for it sees
        the day as it is now), the hour being loaded as handed over. An hour loaded into the day before
        whose done file is gone fails the load: replacing the day without it would drop its rows."""
        hours = {done.partition: _DayHour(done, done_file, sha)}
        for rel in store.glob(day_done_file_glob(target.dataset, target.table, done.partition)):
            hour = hour_folder_tag(rel.rsplit("/", 2)[-2])
            if hour is None or hour == done.partition:
                continue
            try:
                other, other_sha = read_done_file(store, rel)
            except DoneFileError as exc:
                if exc.gone:
                    continue  # removed since the listing: as if never listed (checked below against the ledger)
                raise LoadError(f"{where}: the day's partition holds every landed hour of it, and the done file of "
                                f"hour {hour}, {store.location(rel)}, cannot be read ({exc}). Nothing was loaded: "
                                f"re-land hour {hour} (or fix its done file), then load again",
                                transient=exc.transient, elsewhere=True) from None
            hours[hour] = _DayHour(other, rel, other_sha)
        day = self._read_record(target.ledger) or {}
        gone = sorted(h for h, r in (day.get("hours") or {}).items() if h not in hours and r.get("rows"))
        if gone:
            raise LoadError(f"{where}: hours {gone} were loaded into {target.location} and their done files are gone; "
                            "replacing the day without them would drop their rows. Nothing was loaded: re-land those "
                            "hours (or retire them, which leaves an empty done file), then load again", elsewhere=True)
        return dict(sorted(hours.items()))


UNPARTITIONED = "NONE"  # the layout of the table of an event-time table's records with no event time
UNKNOWN_TABLE_SUFFIX = "_unknown"


class BigQueryEventWarehouse(BigQueryWarehouse):
    """Event-time tables: `<table>__by_event` partitioned by DAY (or HOUR) on the event time column,
    each event partition replaced whole by one load job into its decorator with WRITE_TRUNCATE (a
    decorator load holds only that partition's rows by construction, and BigQuery refuses one whose
    rows fall outside it). Records with no event time (`__unknown__`) would be the table's NULL
    partition, which no documented decorator writes: they are `<table>__by_event_unknown`, an
    unpartitioned table replaced whole the same way. Loads are recorded per partition:

        <ledger>/warehouse_loads/bigquery/<dataset>/<table>__by_event/partition=2026-01-31.json
    """

    def __init__(self, base: BigQueryWarehouse, granularity: str, field: str | None):
        """`field` None: the column the table is partitioned on now (a retired table's, whose topic's
        config is gone); such a table is never created."""
        super().__init__(base.client, base.ledger, base.project, base.location, datasets=base.datasets,
                         job_timeout_seconds=base.job_timeout_seconds, max_job_attempts=base.max_job_attempts)
        if granularity not in ("day", "hour"):
            raise ValueError(f"event partitions are by 'day' or 'hour', not {granularity!r}")
        self.layout_type = DAY if granularity == "day" else HOUR
        self.field = field

    def by_event(self, granularity: str, field: str | None) -> BigQueryEventWarehouse:
        return BigQueryEventWarehouse(self, granularity, field)

    def _target(self, dataset: str, table: str, partition: str, layout: str | None = None) -> _Target:
        partition = check_event_partition(partition)
        ledger, lock = event_load_ledger_path(dataset, table, partition), event_load_lock_path(dataset, table, partition)
        if partition == UNKNOWN_EVENT:
            unknown = check_identifier(f"{table}{UNKNOWN_TABLE_SUFFIX}", "table")
            return _Target(dataset, unknown, partition, UNPARTITIONED, self.table_id(dataset, unknown), ledger, lock,
                           pid="unknown")
        pid = partition.replace("-", "").replace("T", "")
        if len(pid) != (8 if self.layout_type == DAY else 10):
            raise LoadError(f"{self.table_id(dataset, table)}: {partition!r} is not an event partition of a table "
                            f"partitioned by {self.layout_type}")
        return _Target(dataset, table, partition, self.layout_type, f"{self.table_id(dataset, table)}${pid}", ledger,
                       lock, pid=pid)

    def layout(self, dataset: str, table: str) -> str:
        return self.layout_type

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        return self._read_record(event_load_ledger_path(dataset, table, partition))

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        names = (rel.rsplit("/", 1)[-1] for rel in self.ledger.list(load_ledger_dir(dataset, table), "partition=*.json"))
        return {n[len("partition="):-len(".json")] for n in names}

    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """The partition's rows as BigQuery holds them (INFORMATION_SCHEMA.PARTITIONS; the unknown
        table's own row count); None if none."""
        target = self._target(dataset, table, partition)
        if target.layout != UNPARTITIONED:
            return self._rows_of_pid(dataset, table, target.pid)
        with self._api(f"reading table {target.location}"):
            try:
                return self.client.get_table(target.location).num_rows or None
            except api_exceptions.NotFound:
                return None

    def _existing_table(self, dataset: str, table: str, layout: str | None = None) -> bigquery.Table | None:
        ref = self.table_id(dataset, table)
        with self._api(f"reading table {ref}"):
            try:
                found = self.client.get_table(ref)
            except api_exceptions.NotFound:
                return None
        tp = found.time_partitioning
        unknown = layout == UNPARTITIONED or (layout is None and table.endswith(UNKNOWN_TABLE_SUFFIX))
        field = self.field or (tp.field if tp is not None else None)
        if (tp is not None) if unknown else (tp is None or tp.type_ != self.layout_type or tp.field != field):
            how = "not partitioned" if tp is None else f"partitioned by {tp.type_}" + (f" on {tp.field}" if tp.field
                                                                                      else " by ingestion time")
            want = "not partitioned (it holds the records with no event time)" if unknown else \
                f"partitioned by {self.layout_type} on column {field or 'its event time'}"
            raise LoadError(f"table {ref} exists but is {how}; kafka_landing needs it {want}: drop or rename it, "
                            "or set the topic's event_time_partition to what it is")
        return found

    def _job_config(self, reference: str | None, create: str | None, whole_table: bool = False
                    ) -> bigquery.LoadJobConfig:
        config = super()._job_config(reference, None, whole_table=whole_table)
        if create and create != UNPARTITIONED:
            config.time_partitioning = bigquery.TimePartitioning(type_=create, field=self.field)
        return config

    def load_partition(self, store: LandingStore, done: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None) -> LoadResult:
        """Replace one event partition with exactly the files of a manifest version."""
        dataset, table = check_identifier(done.dataset, "dataset"), check_identifier(done.target, "table")
        sha = done_sha256 or content_sha(done.to_bytes())
        target = self._target(dataset, table, done.partition)
        where = f"{target.location} (event partition {done.partition})"
        if self.field is None and done.rows and target.layout != UNPARTITIONED and \
                self._existing_table(dataset, table, target.layout) is None:
            raise LoadError(f"{where}: the table does not exist and its event-time column is unknown (no topic's "
                            "config names the table any more), so it is not created. Route a topic to it again, or "
                            "remove the partition's markers if its records are not wanted there")
        self._source_uris(store, [done])
        verify_files(store, done)
        with self.ledger.lock(target.lock) as held:  # one load of a partition at a time
            job, earlier, added, warnings = self._replace(held, store, target, [done], sha, where)
            self._record(held, target.ledger, self._hour_record(
                done, done.rows, done_file, sha, job.job_id if job else None, target.location, earlier,
                **({} if job else {"deleted_partition": True})))
        return LoadResult(f"{dataset}.{table}", done.partition, done.rows, len(done.landed_files),
                          tuple(done.schema_ids), added,
                          target.location, done_file, sha, job.job_id if job else None, warnings)


__all__ = ["BigQueryEventWarehouse", "BigQueryWarehouse", "avro_columns", "job_id", "partition_id"]
