"""BigQuery's load jobs: one per target and content, run and awaited one at a time per partition,
their failures classified, and counted over the last 24 hours.

A load job's source format is Avro with logical types, from exactly the gs:// files the done
files list (`source_uris`: never a wildcard, which could pick up a file of another attempt),
into the target's decorator with WRITE_TRUNCATE, which replaces that partition only and
atomically: a reader sees the old partition or the new one. A failed job changes nothing.

Idempotence comes from the job id, derived from the content: the hash of the
day's (hour, done-file hash) pairs, `kafka_landing_<dataset>_<table>_<YYYYMMDD>_
<sha256[:32]>` (an HOUR table: the done file's hash, `<YYYYMMDDHH>`). A retried
or duplicated load of the same content answers 409 Already Exists, and the load
waits for that job and uses its result instead of loading twice; so the hours of
a day loaded in one run cost one job. Job ids can never be reused, so two cases
take the next id of a fixed sequence (`_r1`, `_r2`, ...; every process walks the
same one, so duplicates still meet on one job), each recorded in the ledger under
"earlier_jobs" with the reason:
- the job with that id failed (a transient error, or a cause fixed since):
  a retry must really run again;
- the job finished before this load started and the ledger names a different
  load of the partition since (it holds other content now). If a process died
  between a job's end and its ledger record, this reloads once more: harmless.

Before a job of other content, the job the ledger records as running is waited for until DONE
(`Jobs.await_running`; a wait that runs out is a transient error naming the job); one recorded
but not in BigQuery has its id reserved by a query job that does nothing, so the loader that
recorded it, if it only stalled past its lease before jobs.insert, meets 409 and stops with
LockTakenOver instead of replacing the partition after this load (the job start, fenced). Each job
started is counted beside the ledger by its start time, over the last 24 hours as BigQuery's quota
counts it: a load warns from 1,200 load jobs in 24 hours, and at 1,500 the next is refused before
it starts (healing with time). Pure of Dagster and Spark.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from kafka_landing.errors import KafkaLandingError, error_reason, heals_after, is_transient, transient_reason
from kafka_landing.handoff.manifests import Manifest
from kafka_landing.naming import check_identifier, job_count_path, job_counts_root
from kafka_landing.store.base import HeldLock, LandingStore, LockTakenOver
from kafka_landing.warehouse.bigquery.layout import (
    HOUR,
    MAX_PARTITIONS,
    UNPARTITIONED,
    LandingTables,
    Target,
    partition_id,
)
from kafka_landing.warehouse.bigquery.ledger import Ledger
from kafka_landing.warehouse.bigquery.schema import LoadSchema
from kafka_landing.warehouse.backend import LoadError
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

JOB_PREFIX = "kafka_landing"
RESERVED_LABEL = "kafka_landing_reserved_for"  # a reserved job id's label: the start id it stopped
PARTITIONS_WARNING = 9_000  # an HOUR table this full is months from refusing every load
MAX_LOAD_JOBS = 1_500  # per table in any 24 hours (BigQuery's quotas), failed jobs included
LOAD_JOBS_WARNING = 1_200
MAX_COPY_JOBS = 1_000  # per destination table ("Copy jobs per destination table per day"), failed ones included
COPY_JOBS_WARNING = 800
QUOTA_WINDOW_SECONDS = 86_400  # BigQuery counts a table's jobs over the last 24 hours, not per UTC day
JOB_COUNTS_KEPT_SECONDS = 2 * 86_400  # older counts than the window needs are swept
# BigQuery's words for a schema it will not apply to the table (job errorResult messages).
_SCHEMA_REFUSED = re.compile(r"Provided Schema does not match|Invalid schema update|Cannot add (required )?fields"
                             r"|has changed (type|mode)", re.IGNORECASE)
_ROLES = ("BigQuery Data Editor (roles/bigquery.dataEditor) on the dataset or project, and BigQuery Job User "
          "(roles/bigquery.jobUser) on the project")


def _said(exc: api_exceptions.GoogleAPICallError) -> str:
    """BigQuery's own words, without the request line the client puts before them."""
    errors = getattr(exc, "errors", None) or []
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    return first.get("message") or exc.message


def _job_id(dataset: str, table: str, pid: str, sha256: str, attempt: int) -> str:
    base = f"{JOB_PREFIX}_{dataset}_{table}_{pid}_{sha256[:32]}"
    return base if attempt == 0 else f"{base}_r{attempt}"


def job_id(dataset: str, table: str, hour: str, sha256: str, attempt: int = 0, layout: str = HOUR) -> str:
    """The load job's id for one content of an hour's partition (an hour, or its day): only
    [A-Za-z0-9_-], far below 1024 characters. A day's id has 8 digits, an hour's 10: never the same."""
    return _job_id(check_identifier(dataset, "dataset"), check_identifier(table, "table"), partition_id(hour, layout),
                   sha256, attempt)


def source_uris(store: LandingStore, dones: list[Manifest]) -> list[str]:
    """The gs:// objects a load job reads: exactly the files the manifests list."""
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


def job_config(reference: str | None, create: str | None, field: str | None = None,
               whole_table: bool = False, append: bool = False) -> bigquery.LoadJobConfig:
    """`reference`: the reader schema's URI; `create`: the layout of a table the load creates (partitioned
    on column `field`, or by ingestion time); `whole_table`: the load replaces a whole unpartitioned
    table, schema included, where BigQuery refuses schema update options; `append`: the load adds to
    what a load before it wrote (a scratch table's later steps), into a table that must exist."""
    config = bigquery.LoadJobConfig(
        source_format=bigquery.SourceFormat.AVRO,
        use_avro_logical_types=True,
        write_disposition=bigquery.WriteDisposition.WRITE_APPEND if append else
        bigquery.WriteDisposition.WRITE_TRUNCATE,
        create_disposition=bigquery.CreateDisposition.CREATE_NEVER if append else
        bigquery.CreateDisposition.CREATE_IF_NEEDED,
        **({} if whole_table and not append else {"schema_update_options": [
            bigquery.SchemaUpdateOption.ALLOW_FIELD_ADDITION, bigquery.SchemaUpdateOption.ALLOW_FIELD_RELAXATION]}),
        # Without it a decimal wider than NUMERIC (scale > 9, or > 29 integer digits) fails the load.
        decimal_target_types=["NUMERIC", "BIGNUMERIC"],
    )
    if create and create != UNPARTITIONED:  # only for the first load: an existing table keeps its own settings
        config.time_partitioning = bigquery.TimePartitioning(type_=create, field=field)
    if reference is not None:
        config.reference_file_schema_uri = reference
    return config


def reservation_message(jid: str, lock: str) -> str:
    """The words of a reserved job id's failure, as BigQuery shows them (quotes and backslashes left out)."""
    text = (f"kafka_landing reserved job id {jid}: the loader that recorded it under lock {lock} had not started "
            "it when another loader took the lock over, so it never will. Nothing to do")
    return re.sub(r"['\\]", "", text)


def job_failure(job_id_: str, error: dict, where: str, location: str, earlier: list[dict],
                kind: str = "load") -> Exception:
    """A failed job's errorResult as an error: transient by `errors.transient_reason`, a schema refusal
    as IncompatibleSchemaError, anything else a terminal LoadError."""
    message = error.get("message", "?")
    before = "".join(f"; earlier job {e['job_id']}: {e['why']}" for e in earlier)
    text = (f"{where}: BigQuery {kind} job {job_id_} failed: {message} (reason {error.get('reason')}){before}. "
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


def quota_warnings(ref: str, target: Target, table: bigquery.Table | None, jobs: int,
                   recreate: str = LandingTables.recreate_by_day, copies: int = 0) -> tuple[str, ...]:
    """What to know before BigQuery refuses the table's loads: `jobs` load jobs and `copies` copy jobs
    (a load in steps swaps by one) started into it in the last 24 hours (`Jobs.start` counts them),
    and an HOUR table's partitions (`recreate`: how to make the table by DAY)."""
    out = []
    if copies >= COPY_JOBS_WARNING:
        out.append(f"{ref}: {copies} copy jobs started into it in the last 24 hours (each load in steps swaps its "
                   f"partition in by one); BigQuery refuses the table's copies past {MAX_COPY_JOBS} in a day, failed "
                   "ones included. Load fewer, larger ranges, or fewer loads in steps (fewer reader schemas in a day)")
    if jobs >= LOAD_JOBS_WARNING:
        out.append(f"{ref}: {jobs} load jobs started in the last 24 hours; BigQuery refuses the table's loads "
                   f"past {MAX_LOAD_JOBS} in any 24 hours, failed ones included (its quota refills as jobs turn 24 "
                   "hours old). Load fewer, larger ranges (a backfill as one run: a day's hours share one job)")
    partitions = int(table.to_api_repr().get("numPartitions") or 0) if table is not None else 0
    if target.layout == HOUR and partitions >= PARTITIONS_WARNING:
        out.append(f"{ref} is partitioned by HOUR and holds {partitions} partitions; BigQuery refuses every load "
                   f"past {MAX_PARTITIONS} (about {(MAX_PARTITIONS - partitions) // 24} days of hours from now). "
                   f"{recreate}, or set a partition expiration on it")
    return tuple(out)


@dataclass(frozen=True)
class JobLimits:
    """How long a load waits for one job, and how many job ids of one content it may take
    (`_r1`, `_r2`, ...: one per job that failed or was overtaken)."""

    timeout_seconds: float = 3600.0
    max_attempts: int = 20


@dataclass(frozen=True)
class TargetLoad:
    """One content's load of one target, under the target's lock (`held`): every job it starts is
    fenced by that lock and recorded in the ledger as running over `recorded`, the target's record
    as the load read it."""

    held: HeldLock
    target: Target
    sha: str
    recorded: dict | None


@dataclass(frozen=True)
class JobStart:
    """A job to start under the content id `id`: `what` it is (for messages), how to `insert` it,
    the quota it counts against (`kind`), and the scratch table it writes, if any."""

    id: str
    what: str
    insert: Callable[[], Any]
    kind: str = "load"
    scratch: str | None = None


class Jobs:
    """The jobs of one warehouse: its client's calls answered as errors, load jobs started under
    content ids and awaited, and counted in the ledger."""

    def __init__(self, client: bigquery.Client, ledger: Ledger, project: str, location: str | None,
                 limits: JobLimits):
        self.client = client
        self.ledger = ledger
        self.project = project
        self.location = location
        self.limits = limits

    @contextlib.contextmanager
    def answers(self, what: str) -> Iterator[None]:
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

    def wait(self, job: bigquery.LoadJob, where: str, then: str | None = None) -> dict | None:
        """The job's errorResult once it is DONE (None if it succeeded); `then`: what to do if it is not."""
        again = then or "run the load again to wait for it (same job id)"
        timeout = self.limits.timeout_seconds
        try:
            job.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise LoadError(f"{where}: load job {job.job_id} is still running after {timeout:.0f}s; "
                            + (then or f"it finishes on its own: {again}"), transient=True) from None
        except (api_exceptions.GoogleAPIError, OSError) as exc:
            if job.state != "DONE":  # not the job's failure: asking about it failed; only a denial is for good
                denied = isinstance(exc, api_exceptions.Forbidden) and not is_transient(exc)
                raise LoadError(f"{where}: waiting for load job {job.job_id} failed ({exc}); the job may still run: "
                                f"{again}", transient=not denied) from None
        return job.error_result  # a job that ran and failed says why here

    def await_running(self, held: HeldLock, target: Target, sha: str) -> None:
        """Before a job of other content (or an empty hour's partition delete): wait until the job the
        ledger records as started last is DONE, whatever its result. Why: the lock serialises loaders,
        not jobs; a job outlives a loader that timed out or was killed, and of two jobs into one
        partition the one that commits last holds it. Why wait rather than cancel: jobs.cancel is best
        effort (the job may still commit), so it must be waited for until DONE all the same; a load job
        is free and the next job replaces the partition whole; and waiting needs only jobs.get, which
        loads use anyway. The same content needs nothing here: its job id meets the job (409).

        A recorded job that does not exist is not known to be dead: its loader may only have stalled
        between recording it and jobs.insert (past its lease, its lock taken over since by this
        loader), and would then start it after this load, replacing the partition with older
        content. A job start cannot be made conditional on the lock, but a job id is taken once:
        so its id is reserved here (`_reserve`), and that loader's jobs.insert meets 409, finds the
        reservation labelled with its own start id and stops (`start`: LockTakenOver)."""
        running = self.ledger.running(target.ledger)
        if not running or not running.get("job_id") or running.get("sha256") == sha:
            return
        jid = running["job_id"]
        job = self.get(jid, target.where)  # None: never created yet (its loader died or stalled before), or long gone
        if job is None:
            job = self._reserve(held, target, running)
        if job is not None and job.state != "DONE":
            cancel = f"bq {f'--location={self.location} ' if self.location else ''}cancel {self.project}:{jid}"
            self.wait(job, target.where, then=(
                "it loads an earlier content of the partition (a loader gave up on it), and a job of other content "
                "must not run beside it: whichever ends last would hold the partition. This load changed nothing: run "
                f"it again later (it waits for that job again), or cancel that job ({cancel}) and then run the load "
                "again"))
        if running.get("scratch"):  # a load in steps that stopped half way: its scratch table is of no use now
            self.drop(target.dataset, running["scratch"], target.where)

    def _reserve(self, held: HeldLock, target: Target, running: dict):
        """Take the id of the recorded job that does not exist with a job that does nothing: a query
        job of GoogleSQL's ERROR(), which reads no table, is free and fails at once with a message
        saying why it exists, labelled with the start id of the record it reserves. Returns None
        once reserved, or the job that took the id first (its loader's jobs.insert came first)."""
        jid = running["job_id"]
        label = running.get("start_id") or "unknown"  # a record written before start ids
        sql = f"SELECT ERROR('{reservation_message(jid, target.lock)}')"
        config = bigquery.QueryJobConfig(use_legacy_sql=False, labels={RESERVED_LABEL: label})
        held.fence()  # this loader's own check: it must hold the lock to stop the one before it
        try:
            with self.answers(f"reserving job id {jid} (recorded as started by the loader before this one)"):
                try:
                    self.client.query(sql, job_config=config, job_id=jid, project=self.project,
                                      location=self.location, job_retry=None)
                    return None
                except api_exceptions.Conflict:
                    return self.client.get_job(jid, project=self.project, location=self.location)
        except LoadError as exc:
            raise LoadError(f"{target.where}: {exc}", transient=exc.transient) from None

    def drop(self, dataset: str, table: str, where: str) -> None:
        """Delete a scratch table (gone already: nothing to do)."""
        ref = f"{self.project}.{dataset}.{table}"
        try:
            with self.answers(f"deleting scratch table {ref}"):
                self.client.delete_table(ref, not_found_ok=True)
        except LoadError as exc:
            raise LoadError(f"{where}: {exc}", transient=exc.transient) from None

    def widen(self, plan: LoadSchema, table_id: str, where: str) -> None:
        """Apply the plan's column widenings (free DDL queries) before the load; each is idempotent."""
        for widening in plan.widenings:
            sql = widening.statement(table_id)
            try:
                with self.answers(f"widening column {widening.column} of {table_id} ({sql})"):
                    try:
                        self.client.query_and_wait(sql, location=self.location, project=self.project)
                    except api_exceptions.BadRequest as exc:
                        raise IncompatibleSchemaError(
                            f"{where}: BigQuery refused to widen column {widening.column} from {widening.old} to "
                            f"{widening.new} ({_said(exc)}). Nothing was loaded; the landing files are untouched. "
                            "To go on: look at the column in BigQuery (was it changed by hand?), then load the hour "
                            "again", nothing_loaded=True) from None
            except IncompatibleSchemaError:
                raise
            except LoadError as exc:
                raise LoadError(f"{where}: {exc}", transient=exc.transient) from None

    def run(self, held: HeldLock, uris: list[str], target: Target, config: bigquery.LoadJobConfig,
            sha: str) -> tuple[bigquery.LoadJob, list[dict], int]:
        """(the job that loaded this content, earlier job ids of it, the table's load jobs in the last 24 hours)."""
        where = target.where
        earlier: list[dict] = []
        recorded = self.ledger.read(target.ledger)
        load = TargetLoad(held, target, sha, recorded)
        for attempt in range(self.limits.max_attempts):
            jid = _job_id(target.dataset, target.table, target.pid, sha, attempt)
            counted: list[int] = []
            job, fresh = self.start(load, JobStart(jid, f"load job {jid} into {target.location}",
                                                   lambda: self.client.load_table_from_uri(
                                                       uris, target.location, job_id=jid, project=self.project,
                                                       location=self.location, job_config=config)),
                                    count=counted)
            jobs_24h = counted[0]
            finished_before = not fresh and job.state == "DONE"
            error = self.wait(job, where)
            if error is not None:
                if fresh:
                    self.ledger.clear_running(held, target.ledger)
                    raise job_failure(jid, error, where, target.location, earlier)
                earlier.append({"job_id": jid, "why": f"failed: {error.get('message')}"})
                continue
            if finished_before and recorded and recorded.get("job_id") != jid:
                earlier.append({"job_id": jid, "why": "succeeded before a later load of the partition "
                                                      f"({recorded.get('job_id') or 'an empty one'})"})
                continue
            return job, earlier, jobs_24h
        self.ledger.clear_running(held, target.ledger)
        raise LoadError(f"{where}: {self.limits.max_attempts} job ids of this content are used up "
                        f"({', '.join(e['job_id'] for e in earlier[-3:])} ...): look at these jobs in BigQuery")

    def start(self, load: TargetLoad, new: JobStart, count: list[int] | None = None):
        """(the job `new.insert` starts under id `new.id`, True) or, when that id exists already (this
        content is loaded, or is loading, under it), (that job, False). The job is recorded as running
        first (with the scratch table it writes, if any); `count`: counted against the table's jobs of
        its kind of the last 24 hours (refused when BigQuery would refuse it), that count appended to it."""
        held, target, jid, what = load.held, load.target, new.id, new.what
        if count is not None:  # before the job is recorded: a job the quota refuses is not started
            count.append(self._count(held, target, jid, what, new.kind))
        mine = self.ledger.mark_running(held, target.ledger, load.recorded, jid, load.sha, new.scratch)
        fresh = True
        held.fence()  # the job replaces the partition (or the scratch table swapped into it): a commit too
        try:
            with self.answers(f"starting {what}"):
                try:
                    job = new.insert()
                except api_exceptions.Conflict:
                    fresh = False
                    job = self.client.get_job(jid, project=self.project, location=self.location)
        except LoadError as exc:
            if fresh and not exc.transient:  # jobs.insert refused: no job was created
                self.ledger.clear_running(held, target.ledger)
            raise LoadError(f"{target.where}: {exc}", transient=exc.transient) from None
        if not fresh and (job.labels or {}).get(RESERVED_LABEL) == mine["start_id"]:
            # The fence passed, then this loader stalled past its lease before jobs.insert: the loader
            # that took the lock over found this job recorded and not started, and took its id.
            raise LockTakenOver(
                f"{target.where}: {what} was not started: its job id {jid} was reserved by the loader that took "
                f"lock {target.lock} over after this one stalled past its lease between recording the job and "
                f"starting it. Nothing was replaced by this load; {target.location} holds what the newer loader "
                "loaded, and this attempt stops here (a retry cannot help: the partition is that loader's now). "
                "If the hour's content changed since, load it again: a new run reads the ledger as it is then")
        return job, fresh

    def get(self, jid: str, where: str):
        """The job of id `jid`, or None if there is none."""
        try:
            with self.answers(f"reading job {jid}"):
                try:
                    return self.client.get_job(jid, project=self.project, location=self.location)
                except api_exceptions.NotFound:
                    return None
        except LoadError as exc:
            raise LoadError(f"{where}: {exc}", transient=exc.transient) from None

    def _count(self, held: HeldLock, target: Target, jid: str, what: str, kind: str = "load") -> int:
        """One empty object per job started, named by its start time (UTC) and id: listing them is a
        count that concurrent loads of other partitions of the table cannot lose. A job met again
        (409) is counted once. Returns the table's jobs of `kind` started in the last 24 hours, this
        one included (one listing: the warnings use it too). Refuses (LoadError, healing with time) a
        job BigQuery would refuse: its quota counts every job of the last 24 hours, failed ones too,
        so a refused job would only keep the quota spent longer."""
        store, now = self.ledger.store, _now()
        root = job_counts_root(target.dataset, target.table, kind)
        counted = [_counted(root, rel) for rel in store.walk(root)]
        since = now - timedelta(seconds=QUOTA_WINDOW_SECONDS)
        window = [(started, job) for started, job in counted if started > since]
        if any(job == jid for _, job in window):
            return len(window)
        self._at_quota(target, kind, what, window)
        if not any(started.date() == now.date() for started, _ in counted):  # the day's first: sweep the old
            held.fence()
            store.sweep(root, "day=*/*", JOB_COUNTS_KEPT_SECONDS)
        held.create_exclusive(job_count_path(target.dataset, target.table, kind, now, jid), b"")
        return len(window) + 1

    def _at_quota(self, target: Target, kind: str, what: str, window: list[tuple[datetime, str]]) -> None:
        """Refuse `what` (a job of `kind`) if the table's jobs of that kind in the last 24 hours (`window`)
        are as many as BigQuery allows: healing with time, as BigQuery's own quotaExceeded (`errors.py`)."""
        limit = _limit(kind)
        if len(window) < limit:
            return
        refills = min(started for started, _ in window) + timedelta(seconds=QUOTA_WINDOW_SECONDS)
        after = heals_after("quotaExceeded")
        raise LoadError(
            f"{target.where}: {what} was not started: {len(window)} {kind} jobs were started into "
            f"{self.project}.{target.dataset}.{target.table} in the last 24 hours, and BigQuery allows {limit} "
            f"in 24 hours, failed ones included, so it would refuse this one. Nothing was replaced: "
            f"{target.location} holds what it held before. The quota refills as jobs turn 24 hours old (the "
            f"first at {refills:%Y-%m-%d %H:%M} UTC): the load is asked for again in {after / 3600:g} h by itself; "
            "to need fewer jobs, load fewer, larger ranges", heals_after=after)

    def check_quota(self, target: Target, kind: str, what: str) -> None:
        """Refuse now, before any job, a load that needs a job of `kind` BigQuery would refuse (a load in
        steps needs a copy job at its end: its steps would be spent for nothing)."""
        root = job_counts_root(target.dataset, target.table, kind)
        since = _now() - timedelta(seconds=QUOTA_WINDOW_SECONDS)
        window = [(started, job) for started, job in (_counted(root, rel) for rel in self.ledger.store.walk(root))
                  if started > since]
        self._at_quota(target, kind, what, window)

    def last_24_hours(self, dataset: str, table: str, kind: str = "load") -> int:
        """The table's jobs of `kind` started in the last 24 hours (one listing)."""
        root = job_counts_root(dataset, table, kind)
        since = _now() - timedelta(seconds=QUOTA_WINDOW_SECONDS)
        return sum(started > since for started, _ in (_counted(root, rel) for rel in self.ledger.store.walk(root)))


def _limit(kind: str) -> int:
    """BigQuery's quota of a table's jobs of `kind` in 24 hours (read when asked: tests lower it)."""
    return MAX_LOAD_JOBS if kind == "load" else MAX_COPY_JOBS


def _counted(root: str, rel: str) -> tuple[datetime, str]:
    """(start, job id) of a job's count object under `root`: `day=YYYY-MM-DD/HHMMSS_<job id>`. One
    counted before starts were (`day=.../<job id>`) is taken as started at its day's end: counted
    for as long as it may be in BigQuery's window."""
    day, _, name = rel[len(root) + 1:].partition("/")
    date = datetime.strptime(day[len("day="):], "%Y-%m-%d").replace(tzinfo=timezone.utc)
    if re.fullmatch(r"\d{6}_.+", name):
        return date.replace(hour=int(name[:2]), minute=int(name[2:4]), second=int(name[4:6])), name[7:]
    return date + timedelta(days=1) - timedelta(seconds=1), name


def _now() -> datetime:
    return datetime.now(timezone.utc)


__all__ = ["JobLimits", "JobStart", "Jobs", "TargetLoad", "job_config", "job_failure", "job_id", "quota_warnings",
           "source_uris"]
