"""A load that does not fit one BigQuery load job, loaded in steps into a scratch table and swapped
into its partition by one copy job.

One load job replaces a partition whole, atomically, from at most 10,000 source URIs and 15 TB
("Quotas and limits", load jobs), through one reader schema. Almost every load fits: it stays one
job (`jobs.Jobs.run`), with the same job ids and ledger records as ever. A load that does not:

- more files than one job may name (a day of 24 hours of 420 files each is 10,080), or more bytes;
- files whose schema ids need different reader schemas (a decimal's scale or a timestamp's unit
  changed in the middle of a day: `schema.ReaderConflict`, grouped by `schema.reader_groups`);

is loaded in steps, each one load job of at most 10,000 URIs and 15 TB of one reader group, into a
scratch table partitioned as the table is (`<table>__kl_scratch_<partition>_<sequence>`, with an
expiration): the first step WRITE_TRUNCATE, the others WRITE_APPEND. Once the scratch holds
exactly the rows the manifests list, the table's schema is made the scratch's (tables.patch: the
columns the steps added, the modes they relaxed; tables.insert when the table does not exist yet),
and one copy job `scratch$YYYYMMDD -> table$YYYYMMDD` with WRITE_TRUNCATE replaces the partition,
atomically: a reader sees the old partition or the new one (copy jobs are free; an unpartitioned
table is replaced whole the same way). The scratch table is then deleted.

Idempotent as one job is: the steps' and the copy's ids derive from the content (the manifests'
hash) and the steps (their files), never from the table's state
(`kafka_landing_<dataset>_<table>_<partition>_<sha256[:32]>_x<sequence>_<step>of<steps>`,
`..._swap`; `_r1`, `_r2`, ... for a later attempt, with a scratch table of its own). A retried
or killed load of the same content meets its jobs (409) and goes on from where they stopped; its
copy met done is its load done, unless the ledger names a job started after it. A step that ran
before a step of its attempt started again, a scratch table that does not hold exactly the rows,
a job met failed, or a table whose schema another load changed meanwhile start the next attempt
(its scratch table made from the table as it is then). Each job is recorded as running (with its
scratch table) before it starts, so a load of other content waits for it and then deletes that
scratch table (`jobs.Jobs.await_running`); a scratch table nothing deletes expires. A load of
content the ledger records as loaded starts nothing. Copy jobs are counted against the table's copy
quota (1,000 per destination table a day) as load jobs are against theirs: a load in steps is
refused before its first step when the copy at its end would be refused. Pure of Dagster and Spark.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from kafka_landing.handoff.manifests import Manifest
from kafka_landing.store.base import HeldLock, LandingStore
from kafka_landing.warehouse.bigquery.jobs import JOB_PREFIX, Jobs, JobStart, TargetLoad, job_config, job_failure
from kafka_landing.warehouse.bigquery.layout import UNPARTITIONED, Target, table_id
from kafka_landing.warehouse.bigquery.ledger import RUNNING
from kafka_landing.warehouse.bigquery.schema import (
    FileSchema,
    ReaderConflict,
    api_columns,
    file_schemas,
    plan_load,
    reader_groups,
    reader_schema_uri,
    sequence_types,
)
from kafka_landing.warehouse.backend import LoadError
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

MAX_SOURCE_URIS = 10_000  # per load job ("Quotas and limits": maximum source URIs in job configuration)
MAX_LOAD_BYTES = 15 * 10 ** 12  # per load job, all input files (15 TB)
SCRATCH_EXPIRATION = timedelta(days=2)  # a scratch table a load left behind is deleted by BigQuery then


def fits_one_job(uris: list[str], dones: list[Manifest]) -> bool:
    """Whether one load job may read every file (the reader schemas aside)."""
    return len(uris) <= MAX_SOURCE_URIS and sum(f.bytes for d in dones for f in d.landed_files) <= MAX_LOAD_BYTES


@dataclass(frozen=True)
class Step:
    """One load job into the scratch table: files of one reader group, within one job's limits."""

    group: int  # its reader group's index
    uris: tuple[str, ...]
    rows: int


def steps(store: LandingStore, dones: list[Manifest], groups: list[list[FileSchema]]) -> list[Step]:
    """The files of `dones` in steps: group by group, in the manifests' order, each step as many files
    as one job may name and read."""
    group_of = {f.schema_id: i for i, group in enumerate(groups) for f in group}
    out: list[Step] = []
    for i in range(len(groups)):
        uris: list[str] = []
        size = rows = 0
        for f in (f for d in dones for f in d.landed_files if group_of[f.schema_id] == i):
            if uris and (len(uris) == MAX_SOURCE_URIS or size + f.bytes > MAX_LOAD_BYTES):
                out.append(Step(i, tuple(uris), rows))
                uris, size, rows = [], 0, 0
            uris.append(store.location(f.path))
            size += f.bytes
            rows += f.rows
        if uris:
            out.append(Step(i, tuple(uris), rows))
    return out


@dataclass(frozen=True)
class StepSequence:
    """What a load in steps loads, whatever its attempt: its `steps` and their reader `groups`, the
    types the whole sequence needs of fields new to the table (`widest`), the `rows` the manifests
    list, and its `id`, the hash of the content and the steps that names its jobs and scratch tables."""

    store: LandingStore
    steps: tuple[Step, ...]
    groups: list[list[FileSchema]]
    id: str
    rows: int
    widest: dict[str, str] | None = None


@dataclass(frozen=True)
class Swapped:
    """The job that replaced the partition (a copy job's id), for the ledger."""

    job_id: str


class _Again(Exception):
    """This attempt cannot finish: the next attempt (new job ids, a scratch table of its own) starts over."""

    def __init__(self, job_id: str, why: str):
        super().__init__(why)
        self.entry = {"job_id": job_id, "why": why}


class Swap:
    """Loads in steps through a scratch table, for one warehouse: its jobs, the column its tables are
    partitioned on (None: ingestion time), and how it reads a table as it is now (None: none yet)."""

    def __init__(self, jobs: Jobs, partition_field: str | None,
                 existing_table: Callable[[str, str, str | None], bigquery.Table | None]):
        self.jobs, self.client = jobs, jobs.client
        self.project, self.location = jobs.project, jobs.location
        self.partition_field = partition_field
        self.existing_table = existing_table

    def replace(self, held: HeldLock, store: LandingStore, target: Target, dones: list[Manifest], sha: str,
                before: bigquery.Table | None, rows: int) -> tuple[Swapped, list[dict]]:
        """Replace the target's partition with exactly the files of `dones` (`rows` rows, content `sha`),
        in steps; `before`: the table as it is (None: it does not exist yet). Returns the copy job and
        the earlier attempts."""
        where, dataset, table = target.where, target.dataset, target.table
        recorded = self.jobs.ledger.read(target.ledger) or {}
        running = recorded.get(RUNNING) or {}
        if recorded.get("sha256") == sha and recorded.get("job_id") and running.get("sha256", sha) == sha:
            return Swapped(recorded["job_id"]), list(recorded.get("earlier_jobs") or [])  # loaded already
        # Its copy job at the end is counted against the table's copy quota: refused now, not after the steps.
        self.jobs.check_quota(target, "copy", f"the copy job of this load in steps into {target.location}")
        whole = target.layout == UNPARTITIONED  # replaced whole, schema included: planned as a new table
        files = file_schemas(store, dones)
        columns = None if whole else api_columns(before.schema if before is not None else None)
        try:
            plan_load(columns, files, where)
            groups = [files]
        except ReaderConflict:
            groups = reader_groups(columns, files, where)
        # The whole sequence's schema, before its first job: each group's steps read a field new to the
        # table as the widest type any group needs (a nested column cannot be widened half way), and
        # each group's plan against the table refuses here what it cannot load, not after a step.
        widest = sequence_types(columns, files, where) if len(groups) > 1 else None
        plans = [plan_load(columns, group, where, widest) for group in groups]
        if columns is not None:  # the table's columns widen first, for every group (free DDL, idempotent)
            widened = False
            for plan in plans:
                if plan.widenings:
                    self.jobs.widen(plan, table_id(self.project, dataset, table), where)
                    widened = True
            if widened:
                before = self.existing_table(dataset, table, target.layout)
        todo = tuple(steps(store, dones, groups))
        digest = hashlib.sha256(json.dumps([sha, [list(s.uris) for s in todo]]).encode()).hexdigest()[:16]
        sequence = StepSequence(store, todo, groups, digest, rows, widest)
        load = TargetLoad(held, target, sha, recorded)
        earlier: list[dict] = []
        max_attempts = self.jobs.limits.max_attempts
        for attempt in range(max_attempts):
            if attempt and not whole:  # the table as it is now: a new attempt's scratch table starts from it
                before = self.existing_table(dataset, table, target.layout)
            run = _Attempt(self, load, sequence, attempt, before, earlier)
            try:
                return run.go(), earlier
            except _Again as again:
                earlier.append(again.entry)
                run.drop()  # every job of the attempt is done: its scratch table is of no use
        self.jobs.ledger.clear_running(held, target.ledger)
        raise LoadError(f"{where}: {max_attempts} attempts of this content's load in steps are used up "
                        f"({', '.join(e['job_id'] for e in earlier[-3:])} ...): look at these jobs in BigQuery")


class _Attempt:
    """One attempt (`attempt`: 0, 1, ...) of a load in steps: its job ids and scratch table. `before`:
    the table as the attempt starts (None: it does not exist yet); `earlier`: the attempts before it."""

    def __init__(self, swap: Swap, load: TargetLoad, sequence: StepSequence, attempt: int,
                 before: bigquery.Table | None, earlier: list[dict]):
        self.swap, self.jobs, self.client = swap, swap.jobs, swap.client
        self.load, self.sequence, self.earlier = load, sequence, earlier
        self.held, self.target = load.held, load.target
        target = load.target
        self.whole = target.layout == UNPARTITIONED
        self.before = None if self.whole else before  # the scratch table starts as it (None: the first step makes it)
        suffix = f"_r{attempt}" if attempt else ""
        base = f"{JOB_PREFIX}_{target.dataset}_{target.table}_{target.pid}_{load.sha[:32]}_x{sequence.id}"
        self.step_ids = [f"{base}_{k + 1}of{len(sequence.steps)}{suffix}" for k in range(len(sequence.steps))]
        self.copy_id = f"{base}_swap{suffix}"
        self.scratch = f"{target.table}__kl_scratch_{target.pid}_{sequence.id}{suffix}"
        self.scratch_id = f"{swap.project}.{target.dataset}.{self.scratch}"
        self.scratch_location = self.scratch_id if self.whole else f"{self.scratch_id}${target.pid}"
        self.table_id = table_id(swap.project, target.dataset, target.table)

    def go(self) -> Swapped:
        where = self.target.where
        done = self.jobs.get(self.copy_id, where)
        if done is not None:  # this attempt swapped once: its partition holds this content, unless loaded since
            error = self.jobs.wait(done, where)
            if error is not None:
                raise _Again(self.copy_id, f"failed: {error.get('message')}")
            recorded = self.load.recorded or {}
            last = (recorded.get(RUNNING) or {}).get("job_id") or recorded.get("job_id")
            if last != self.copy_id:  # the ledger names a job started after it: the partition may hold other content
                raise _Again(self.copy_id, f"succeeded before a later load of the partition ({last or 'an empty one'})")
            self.drop()
            return Swapped(self.copy_id)
        self._load_steps()
        self._table_as_scratch()
        return self._copy()

    # --- the steps ------------------------------------------------------------------------------

    def _load_steps(self) -> None:
        where, target = self.target.where, self.target
        if self.jobs.get(self.step_ids[0], where) is None:  # a new attempt: its scratch table starts empty
            self.drop()
            if self.before is not None:  # as the table is (schema, partitioning); else the first step makes it
                self._create_scratch()
        fresh_before = met = False
        written = 0
        reference = create = None
        todo = self.sequence.steps
        for k, step in enumerate(todo):
            create = None
            if k == 0 or todo[k - 1].group != step.group:  # each group through its reader, against the scratch
                now = self._scratch_table()
                plan = plan_load(api_columns(now.schema if now is not None else None), self.sequence.groups[step.group],
                                 where, self.sequence.widest)
                if plan.widenings:  # a column the steps before added, narrower than this group's
                    self.jobs.widen(plan, self.scratch_id, where)
                reference = reader_schema_uri(self.sequence.store, target.dataset, target.table, plan)
                create = None if now is not None else target.layout
            config = job_config(reference, create, self.swap.partition_field, whole_table=self.whole, append=k > 0)
            jid = self.step_ids[k]
            job, fresh = self.jobs.start(self.load, JobStart(
                jid, f"load job {jid} into scratch table {self.scratch_location}",
                lambda: self.client.load_table_from_uri(list(step.uris), self.scratch_location, job_id=jid,
                                                        project=self.swap.project, location=self.swap.location,
                                                        job_config=config),
                scratch=self.scratch))
            error = self.jobs.wait(job, where)
            if not fresh and fresh_before:
                raise _Again(jid, "ran before a step of its attempt ran again")
            if error is not None:
                if not fresh:
                    raise _Again(jid, f"failed: {error.get('message')}")
                self._failed()
                raise job_failure(jid, error, where, target.location, self.earlier)
            fresh_before, met = fresh_before or fresh, met or not fresh
            written += job.output_rows or 0
            if fresh and create is not None:  # made by this step: give it its expiration
                self._expire()
        scratch = self._scratch_table()
        held, rows = (scratch.num_rows or 0) if scratch is not None else 0, self.sequence.rows
        if held == rows:
            return
        if not met:  # every step ran now: the files hold other rows than the manifests say
            self._failed()
            raise LoadError(f"{where}: the load jobs into scratch table {self.scratch_id} wrote {written} rows, the "
                            f"manifests list {rows}. {target.location} is unchanged: check the files (were they "
                            "rewritten after landing?) and load again")
        raise _Again(self.step_ids[-1], f"scratch table {self.scratch_id} holds {held} rows, the manifests list "
                                        f"{rows}")

    # --- the swap -------------------------------------------------------------------------------

    def _table_as_scratch(self) -> None:
        """The table's schema made the scratch's (the columns the steps added, the modes they relaxed),
        or the table created as the scratch is: a copy job changes no schema. A table changed
        meanwhile by another load (a column added or widened) cannot take the scratch's schema: the
        next attempt starts over from the table as it is then."""
        if self.whole:
            return  # a whole table is replaced, schema included
        scratch = self._scratch_table()
        now = self.swap.existing_table(self.target.dataset, self.target.table, self.target.layout)
        if now is None:
            table = bigquery.Table(self.table_id, schema=scratch.schema)
            table.time_partitioning = bigquery.TimePartitioning(type_=scratch.time_partitioning.type_,
                                                                field=scratch.time_partitioning.field)
            self.held.fence()
            with self.jobs.answers(f"creating table {self.table_id} for the copy of {self.scratch_id}"):
                try:
                    self.client.create_table(table)
                    return
                except api_exceptions.Conflict:
                    now = self.client.get_table(self.table_id)  # another load made it meanwhile
        if api_columns(now.schema) == api_columns(scratch.schema):
            return
        now.schema = scratch.schema
        self.held.fence()
        with self.jobs.answers(f"updating the schema of {self.table_id} to the scratch table's"):
            try:
                self.client.update_table(now, ["schema"])  # if the table changed since it was read: 412
            except (api_exceptions.PreconditionFailed, api_exceptions.BadRequest) as exc:
                raise _Again(self.copy_id, f"the table changed while this load ran ({exc.message})") from None

    def _copy(self) -> Swapped:
        where, target = self.target.where, self.target
        config = bigquery.CopyJobConfig(  # a whole table is created by its copy; a partition's table exists by now
            write_disposition=bigquery.WriteDisposition.WRITE_TRUNCATE,
            create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED if self.whole else
            bigquery.CreateDisposition.CREATE_NEVER)
        job, fresh = self.jobs.start(self.load, JobStart(
            self.copy_id, f"copy job {self.copy_id} of {self.scratch_location} into {target.location}",
            lambda: self.client.copy_table(self.scratch_location, target.location, job_id=self.copy_id,
                                           project=self.swap.project, location=self.swap.location, job_config=config),
            kind="copy", scratch=self.scratch), count=[])
        error = self.jobs.wait(job, where)
        if error is not None:
            if not fresh:
                raise _Again(self.copy_id, f"failed: {error.get('message')}")
            failure = job_failure(self.copy_id, error, where, target.location, self.earlier, kind="copy")
            if isinstance(failure, IncompatibleSchemaError) and not self.whole:
                scratch = self._scratch_table()
                now = self.swap.existing_table(target.dataset, target.table, target.layout)
                if scratch is None or now is None or api_columns(now.schema) != api_columns(scratch.schema):
                    raise _Again(self.copy_id, "the table's schema changed between its update and the copy")
            self._failed()
            raise failure
        self.drop()
        return Swapped(self.copy_id)

    # --- the scratch table ----------------------------------------------------------------------

    def _scratch_table(self) -> bigquery.Table | None:
        with self.jobs.answers(f"reading scratch table {self.scratch_id}"):
            try:
                return self.client.get_table(self.scratch_id)
            except api_exceptions.NotFound:
                return None

    def _create_scratch(self) -> None:
        table = bigquery.Table(self.scratch_id, schema=self.before.schema)
        tp = self.before.time_partitioning
        table.time_partitioning = bigquery.TimePartitioning(type_=tp.type_, field=tp.field)
        table.expires = datetime.now(timezone.utc) + SCRATCH_EXPIRATION
        self.held.fence()
        with self.jobs.answers(f"creating scratch table {self.scratch_id}"):
            self.client.create_table(table, exists_ok=True)

    def _expire(self) -> None:
        with self.jobs.answers(f"setting the expiration of scratch table {self.scratch_id}"):
            table = self.client.get_table(self.scratch_id)
            table.expires = datetime.now(timezone.utc) + SCRATCH_EXPIRATION
            self.client.update_table(table, ["expires"])

    def drop(self) -> None:
        self.held.fence()
        self.jobs.drop(self.target.dataset, self.scratch, self.target.where)

    def _failed(self) -> None:
        """A step or the copy failed: no job of this attempt runs any more, its scratch table goes."""
        self.jobs.ledger.clear_running(self.held, self.target.ledger)
        self.drop()


__all__ = ["MAX_LOAD_BYTES", "MAX_SOURCE_URIS", "SCRATCH_EXPIRATION", "Step", "StepSequence", "Swap", "Swapped",
           "fits_one_job", "steps"]
