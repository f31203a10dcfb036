"""The production warehouse: BigQuery, loaded by free load jobs straight from the landing files in
the gs:// landing root: the `Warehouse` interface over `layout` (where a load goes), `jobs` (one
job per target and content), `ledger` (what was loaded) and `schema` (what a load needs of the
table's columns).

Loading a partition replaces its target whole with one load job from exactly the files its
manifests list: a landing hour of a table by DAY reloads its day with every landed hour of it; a
landing hour of a table by HOUR, or an event partition, is its own target. A target one job cannot
load (more than 10,000 files or 15 TB, or files no single reader schema reads) loads in steps into
a scratch table, swapped in by one copy job (`swap`). The dataset is created
when missing, the table by the first load (a landing table by DAY on ingestion time; an event-time
table on its column). A target whose manifests hold no row is emptied by deleting its partition
(`tables.delete` on the decorator, BigQuery's documented way: a load job needs a source file).

Schema changes, with no person involved and in any order of hours: `schema.plan_load` decides,
from the table's columns and the writer schema of each schema id; columns are widened by a query
before the job, and the job reads every file through the plan's reader schema, a zero-record Avro
file written once under the landing root (`reader_schema_path`, never a source URI). The module
`schema` says what BigQuery documents that this relies on.

After the job, its output_rows must equal the manifests' rows; the conservation check reads the
partition back from BigQuery (INFORMATION_SCHEMA.PARTITIONS): a day's rows less those its last
load wrote for its other hours. Pure of Dagster and Spark; the Dagster resource builds this from
`BigQueryResource.get_client()`.
"""

from __future__ import annotations

import re
from typing import Iterable

from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from kafka_landing.handoff.manifests import Manifest, content_sha
from kafka_landing.naming import check_identifier, load_ledger_dir
from kafka_landing.store.base import HeldLock, LandingStore
from kafka_landing.warehouse.bigquery.jobs import JobLimits, Jobs, job_config, quota_warnings, source_uris
from kafka_landing.warehouse.bigquery.layout import (
    DAY,
    UNPARTITIONED,
    EventTables,
    LandingTables,
    Target,
    day_hours,
    day_sha,
    table_id,
)
from kafka_landing.warehouse.bigquery.ledger import Ledger, load_record
from kafka_landing.warehouse.bigquery.schema import ReaderConflict, plan_from_files, reader_schema_uri
from kafka_landing.warehouse.bigquery.swap import Swap, Swapped, fits_one_job
from kafka_landing.warehouse.backend import LoadError, LoadResult, SparkFactory, StagedRun, Warehouse, verify_files
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

PARTITIONS_SQL = ("SELECT total_rows FROM `{project}.{dataset}.INFORMATION_SCHEMA.PARTITIONS` "
                  "WHERE table_name = @table_name AND partition_id = @partition_id")
_PROJECT = re.compile(r"^(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")  # with a domain, or not


class BigQueryWarehouse(Warehouse):
    """BigQuery tables partitioned by landing day (or, made so before, by hour), or the event-time
    tables of `by_event`, each partition replaced whole by one free load job."""

    kind = "bigquery"

    def __init__(self, client: bigquery.Client, ledger: LandingStore, project: str, location: str | None = None, *,
                 datasets: Iterable[str] = (), limits: JobLimits = JobLimits(),
                 tables: LandingTables | EventTables | None = None):
        """`client`: e.g. from dagster-gcp's `BigQueryResource.get_client()`; `ledger`: where loads are
        recorded (the landing store); `project`: where the datasets live and jobs run; `location`: the
        datasets' location (None: BigQuery's default, US); `datasets`: those `check_writable` checks;
        `limits`: how long a load waits for a job, and how many job ids of a content it may take;
        `tables`: the kind of tables it loads (landing-hour tables unless said)."""
        if not isinstance(project, str) or not _PROJECT.match(project):
            raise ValueError(f"BigQuery project {project!r} is not a Google Cloud project id (like my-project-123)")
        self.client = client
        self.ledger = Ledger(ledger)
        self.project = project  # checked: it is quoted into the INFORMATION_SCHEMA query
        self.location = location
        self.datasets = tuple(check_identifier(d, "dataset") for d in datasets)
        self.jobs = Jobs(client, self.ledger, project, location, limits)
        self.tables = tables or LandingTables()
        self.swap = Swap(self.jobs, self.tables.field, self._existing_table)
        self._layouts: dict[tuple[str, str], str] = {}  # (dataset, table) -> HOUR or DAY, once it exists

    def by_event(self, granularity: str, field: str | None) -> BigQueryWarehouse:
        return BigQueryWarehouse(self.client, self.ledger.store, self.project, self.location, datasets=self.datasets,
                                 limits=self.jobs.limits, tables=EventTables(granularity, field))

    def table_id(self, dataset: str, table: str) -> str:
        return table_id(self.project, dataset, table)

    def layout(self, dataset: str, table: str) -> str:
        """HOUR for a landing table created so (before days: kept as it is), DAY for any other and for
        a table the first load will create; an event-time table's is its topic's."""
        if self.tables.layout is not None:
            return self.tables.layout
        key = (dataset, table)
        if key not in self._layouts and self._existing_table(dataset, table) is None:
            return DAY
        return self._layouts[key]

    def _target(self, dataset: str, table: str, partition: str) -> Target:
        return self.tables.target(self.project, dataset, table, partition, self.layout(dataset, table))

    def partition_location(self, dataset: str, table: str, partition: str) -> str:
        """`table$YYYYMMDDHH` in a table partitioned by HOUR; `table$YYYYMMDD`, the day that holds the
        hour, in one partitioned by DAY (every table created since); an event partition's decorator."""
        return self._target(dataset, table, partition).location

    # --- what was loaded, read back -------------------------------------------------------------------

    def loaded(self, dataset: str, table: str, partition: str) -> dict | None:
        return self.ledger.read(self.tables.record_path(dataset, table, partition))

    def loaded_partitions(self, dataset: str, table: str) -> set[str]:
        """One listing, not a read per partition: one whose first job was started and may still run is
        listed too."""
        names = self.ledger.names(load_ledger_dir(dataset, table), self.tables.record_glob)
        return {p for n in names if (p := self.tables.recorded(n)) is not None}

    def partition_rows(self, dataset: str, table: str, partition: str) -> int | None:
        """The partition's rows as BigQuery holds them; None if it holds none (or no table). BigQuery
        knows only a day's rows: a landing hour's of a day are those its day's last load wrote for it,
        plus any difference between what the day holds and what that load wrote in all (so a day
        changed by other hands shows in every hour of it). The records with no event time: their
        table's row count."""
        target = self._target(dataset, table, partition)
        if target.layout == UNPARTITIONED:
            with self.jobs.answers(f"reading table {target.location}"):
                try:
                    return self.client.get_table(target.location).num_rows or None
                except api_exceptions.NotFound:
                    return None
        held = self._rows_of(dataset, target.table, target.pid)
        if not target.holds_hours:
            return held
        day = self.ledger.read(target.ledger) or {}
        mine = (day.get("hours") or {}).get(partition, {}).get("rows", 0)
        rows = mine + (held or 0) - (day.get("rows") or 0)
        return rows or None

    def _rows_of(self, dataset: str, table: str, pid: str) -> int | None:
        sql = PARTITIONS_SQL.format(project=self.project, dataset=check_identifier(dataset, "dataset"))
        config = bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter("table_name", "STRING", check_identifier(table, "table")),
            bigquery.ScalarQueryParameter("partition_id", "STRING", pid),
        ])
        with self.jobs.answers(f"reading the row count of {self.table_id(dataset, table)}${pid}"):
            try:
                rows = list(self.client.query_and_wait(sql, job_config=config, location=self.location,
                                                       project=self.project))
            except api_exceptions.NotFound:
                return None  # no dataset: no partition
        return int(rows[0]["total_rows"]) if rows and rows[0]["total_rows"] is not None else None

    def load_jobs_in_24_hours(self, dataset: str, table: str) -> int:
        """The table's load jobs started in the last 24 hours (BigQuery's quota counts them so)."""
        return self.jobs.last_24_hours(dataset, table)

    # --- datasets and tables --------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Each configured dataset exists (created if missing) in the configured location."""
        if not self.datasets:
            with self.jobs.answers(f"listing the datasets of project {self.project}"):
                list(self.client.list_datasets(project=self.project, max_results=1))
        for dataset in self.datasets:
            self._ensure_dataset(dataset)

    def _ensure_dataset(self, dataset: str) -> None:
        ref = f"{self.project}.{dataset}"
        with self.jobs.answers(f"reading dataset {ref}"):
            try:
                found = self.client.get_dataset(ref)
            except api_exceptions.NotFound:
                found = None
        if found is None:
            new = bigquery.Dataset(ref)
            if self.location:
                new.location = self.location
            with self.jobs.answers(f"creating dataset {ref}"):
                found = self.client.create_dataset(new, exists_ok=True)
        if self.location and (found.location or "").lower() != self.location.lower():
            raise LoadError(f"dataset {ref} is in {found.location}, the warehouse is configured for {self.location}: "
                            "set the warehouse location to the dataset's, or use another dataset")

    def _existing_table(self, dataset: str, table: str, layout: str | None = None) -> bigquery.Table | None:
        """The table, if it exists and is partitioned as its loads need (`layout`: that one; see
        `self.tables.problem`); None if the first load creates it."""
        ref = self.table_id(dataset, table)
        with self.jobs.answers(f"reading table {ref}"):
            try:
                found = self.client.get_table(ref)
            except api_exceptions.NotFound:
                return None
        problem = self.tables.problem(ref, table, found.time_partitioning, layout)
        if problem:
            raise LoadError(problem)
        if self.tables.layout is None:  # each landing table has its own
            self._layouts[(dataset, table)] = found.time_partitioning.type_
        return found

    # --- loading --------------------------------------------------------------------------------------

    def load_partition(self, store: LandingStore, manifest: Manifest, spark: SparkFactory,
                       done_file: str | None = None, done_sha256: str | None = None,
                       staged: StagedRun | None = None) -> LoadResult:
        """Replace the partition's target (no Spark): in a landing table partitioned by DAY, the day
        that holds the hour, with the files of every landed hour of it; else the partition alone.
        Nothing is staged: a day is one load job already."""
        dataset, table = check_identifier(manifest.dataset, "dataset"), check_identifier(manifest.target, "table")
        sha = done_sha256 or content_sha(manifest.to_bytes())  # handed over without its bytes: as publish wrote it
        target = self._target(dataset, table, manifest.partition)
        if target.holds_hours:
            return self._load_day(store, target, manifest, done_file, sha)
        why = self.tables.not_created(target) if manifest.rows else None
        if why and self._existing_table(dataset, table, target.layout) is None:
            raise LoadError(f"{target.where}: {why}")
        source_uris(store, [manifest])
        verify_files(store, manifest)
        with self.ledger.store.lock(target.lock) as held:  # one load of a partition at a time
            job, earlier, added, warnings = self._replace(held, store, target, [manifest], sha)
            self.ledger.write(held, target.ledger, load_record(
                manifest, done_file, sha, job.job_id if job else None, target.location, earlier,
                **({} if job else {"deleted_partition": True})))
        return LoadResult(f"{dataset}.{table}", manifest.partition, manifest.rows, len(manifest.landed_files),
                          tuple(manifest.schema_ids), added, target.location, done_file, sha,
                          job.job_id if job else None, warnings)

    def _load_day(self, store: LandingStore, target: Target, manifest: Manifest, done_file: str | None,
                  sha: str) -> LoadResult:
        source_uris(store, [manifest])
        with self.ledger.store.lock(target.lock) as held:  # one load of a day at a time: each replaces it whole
            recorded = self.ledger.read(target.ledger) or {}
            hours = day_hours(store, target, manifest, done_file, sha, recorded)
            loaded = recorded.get("hours") or {}
            for hour, h in hours.items():
                # An hour the day's last load verified and loaded with this same content is not
                # read again: an hourly schedule would otherwise verify the day's every file 24 times.
                if hour == manifest.partition or (loaded.get(hour) or {}).get("sha256") != h.sha:
                    verify_files(store, h.done)
            content = day_sha({hour: h.sha for hour, h in hours.items()})
            job, earlier, added, warnings = self._replace(held, store, target, [h.done for h in hours.values()],
                                                          content)
            jid = job.job_id if job else None
            emptied = {} if job else {"deleted_partition": True}
            self.ledger.write(held, target.ledger, {
                "sha256": content, "rows": sum(h.done.rows for h in hours.values()), "job_id": jid,
                "location": target.location, "earlier_jobs": earlier,
                "hours": {hour: {"done_file": h.done_file, "sha256": h.sha, "rows": h.done.rows}
                          for hour, h in hours.items()}, **emptied})
            for hour, h in hours.items():  # what the sensor and the checks read, hour by hour
                self.ledger.write(held, self.tables.record_path(target.dataset, target.table, hour), load_record(
                    h.done, h.done_file, h.sha, jid, target.location, earlier, day_sha256=content, **emptied))
        return LoadResult(f"{target.dataset}.{target.table}", manifest.partition, manifest.rows,
                          len(manifest.landed_files), tuple(manifest.schema_ids), added, target.location, done_file,
                          sha, jid, warnings,
                          tuple((hour, h.sha) for hour, h in hours.items() if hour != manifest.partition))

    def _replace(self, held: HeldLock, store: LandingStore, target: Target, dones: list[Manifest], sha: str
                 ) -> tuple[bigquery.LoadJob | Swapped | None, list[dict], tuple[str, ...], tuple[str, ...]]:
        """One job that replaces the target's partition with exactly the files of `dones` (or, when
        they hold no row, the partition deleted: a load job needs a source); when one job cannot
        (too many files or bytes, several reader schemas), load jobs into a scratch table and one
        copy job (`swap`). Returns the job that replaced the partition, the earlier job ids of this
        content, the columns it added to the table and warnings."""
        where, dataset, table = target.where, target.dataset, target.table
        self.jobs.await_running(held, target, sha)
        rows = sum(d.rows for d in dones)
        if rows == 0:
            held.fence()
            with self.jobs.answers(f"deleting partition {target.location} (it holds no row now)"):
                self.client.delete_table(target.location, not_found_ok=True)
            return None, [], (), ()
        self._ensure_dataset(dataset)
        before = self._existing_table(dataset, table, target.layout)
        uris = source_uris(store, dones)
        plan = None
        if fits_one_job(uris, dones):
            try:
                plan = plan_from_files(store, dones, before.schema if before is not None else None, where)
            except ReaderConflict:
                pass  # the files need several reader schemas: a load in steps
        if plan is None:  # too many files or bytes for one job, or several readers: steps and a copy job
            job, earlier = self.swap.replace(held, store, target, dones, sha, before, rows)
            jobs_24h, copies = self.jobs.last_24_hours(dataset, table), self.jobs.last_24_hours(dataset, table, "copy")
        else:
            copies = 0
            if plan.widenings:
                self.jobs.widen(plan, self.table_id(dataset, table), where)
                before = self._existing_table(dataset, table, target.layout)
            config = job_config(reader_schema_uri(store, dataset, table, plan),
                                target.layout if before is None else None, self.tables.field,
                                whole_table=target.layout == UNPARTITIONED)
            try:
                job, earlier, jobs_24h = self.jobs.run(held, uris, target, config, sha)
            except IncompatibleSchemaError:
                now = self._existing_table(dataset, table)
                if [f.to_api_repr() for f in (now.schema if now else [])] != \
                        [f.to_api_repr() for f in (before.schema if before else [])]:
                    raise LoadError(f"{where}: the table's schema changed while this load ran (another load widened "
                                    "or extended it), so BigQuery refused the schema planned before: loading the hour "
                                    "again plans against the table as it is now", transient=True) from None
                raise
            if job.output_rows != rows:
                self.ledger.clear_running(held, target.ledger)
                raise LoadError(
                    f"{where}: load job {job.job_id} wrote {job.output_rows} rows, the done files list {rows}. "
                    f"{target.location} now holds what the job loaded and is not recorded as loaded: check the files "
                    "(were they rewritten after landing?) and load the hour again")
        self._layouts[(dataset, table)] = target.layout
        with self.jobs.answers(f"reading table {self.table_id(dataset, table)}"):
            after = self.client.get_table(self.table_id(dataset, table))
        old = {f.name.lower() for f in before.schema} if before is not None else set()
        added = tuple(f.name for f in after.schema if f.name.lower() not in old) if before is not None else ()
        return job, earlier, added, quota_warnings(self.table_id(dataset, table), target, after, jobs_24h,
                                                   self.tables.recreate_by_day, copies)


__all__ = ["BigQueryWarehouse"]
