"""What was loaded into BigQuery, and which job may still be loading: the ledger beside the
landing files (BigQuery keeps no per-partition properties). Each target's record is at
`layout.Target.ledger`:

    {"done_file", "sha256", "rows", "attempt", "job_id", "location", "earlier_jobs", "loaded_at", ...}

Loads of one partition (a day) are serialised by a lock in the ledger store. A job outlives a
loader that timed out or was killed, and of two jobs into one partition the one that commits
last holds it; so each job is recorded in the partition's record ("running_job": its id, content hash and a
start id of its own, and for a load in steps the scratch table it writes) before it is started and waited
for (`mark_running`), and a load of other content first waits until the recorded job is DONE
(`jobs.Jobs.await_running`, which then deletes that scratch table). So an older content never
finishes after a newer one. Pure: no client, no Dagster, no Spark.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from kafka_landing.handoff.manifests import Manifest
from kafka_landing.store.base import HeldLock, LandingStore

RUNNING = "running_job"  # the ledger's key for the job started last, while it may still run


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load_record(done: Manifest, done_file: str | None, sha: str, job: str | None, location: str,
                earlier: list[dict], **extra) -> dict:
    """What a load of one partition records of it: the manifest it loaded (`done_file`, content `sha`)."""
    return {"done_file": done_file, "sha256": sha, "rows": done.rows, "attempt": done.attempt, "job_id": job,
            "location": location, "earlier_jobs": earlier, **extra}


class Ledger:
    """The records of loads, in the landing store."""

    def __init__(self, store: LandingStore):
        self.store = store

    def read(self, path: str) -> dict | None:
        """The record; None if there is none (or only a first job started); {} if it cannot be read."""
        try:
            record = self.store.read_json(path)
        except ValueError:
            return {}  # unreadable: loaded, content unknown (a reload rewrites it)
        if record is not None and set(record) == {RUNNING}:
            return None  # a first job started, no load recorded yet
        return record

    def names(self, folder: str, pattern: str) -> list[str]:
        """The file names of the records in `folder`: one listing."""
        return [rel.rsplit("/", 1)[-1] for rel in self.store.list(folder, pattern)]

    def write(self, held: HeldLock, path: str, record: dict) -> None:
        held.write_json_atomic(path, {**record, "loaded_at": _now()})

    def running(self, path: str) -> dict | None:
        """The job the record names as started last ({"job_id", "sha256", "started_at"}), if any."""
        try:
            return (self.store.read_json(path) or {}).get(RUNNING)
        except ValueError:
            return None  # unreadable: no job to know of

    def mark_running(self, held: HeldLock, path: str, previous: dict | None, jid: str, sha: str,
                     scratch: str | None = None) -> dict:
        """Record the job before it is started and waited for: a loader that times out or is killed
        leaves it running, and the next load of the partition must find it (`running`); with the
        scratch table it writes (a load in steps), which a load of other content then deletes. Returns
        the record, whose "start_id" is this start's alone: a later loader that reserves the job id
        (`jobs.Jobs.await_running`) labels the reservation with it, so this loader knows it was stopped."""
        base = previous if previous else {} if previous is None else {"sha256": None}  # unreadable stays "loaded"
        running = {"job_id": jid, "sha256": sha, "started_at": _now(), "start_id": uuid.uuid4().hex,
                   **({"scratch": scratch} if scratch else {})}
        held.write_json_atomic(path, {**base, RUNNING: running})
        return running

    def clear_running(self, held: HeldLock, path: str) -> None:
        """The job ended without a recorded load (it failed, or was refused): the record says again
        what it said before, so a failed first load leaves the partition unloaded."""
        record = self.read(path)
        if record is None:
            held.delete(path)
        elif RUNNING in record:
            held.write_json_atomic(path, {k: v for k, v in record.items() if k != RUNNING})


__all__ = ["RUNNING", "Ledger", "load_record"]
