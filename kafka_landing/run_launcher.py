"""The default run launcher, plus a run worker health check, so the daemon's run
monitoring fails a run whose worker died (SIGKILL, OOM killer) instead of leaving it
STARTED forever. Dagster's DefaultRunLauncher has no health check: without one, run
monitoring only notices runs stuck STARTING or over max_runtime_seconds."""

import json

from dagster import DagsterEventType, DagsterRun
from dagster._core.launcher import (
    CheckRunHealthResult,
    DefaultRunLauncher,
    WorkerStatus,
)
from dagster._core.launcher.default_run_launcher import GRPC_INFO_TAG

from kafka_landing.run_worker import in_another_pid_namespace, is_local_host, process_alive


class ProcessCheckingRunLauncher(DefaultRunLauncher):
    """Launches like DefaultRunLauncher; reports a run worker FAILED only when it ran on this
    machine, in this PID namespace, and its process is gone. A worker it cannot check (elsewhere,
    or that has not said its pid yet) is reported RUNNING, "not checked": Dagster's run monitoring
    fails a run on any other status, UNKNOWN included, and still applies max_runtime."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        grpc = json.loads(run.tags.get(GRPC_INFO_TAG) or "{}")
        if not is_local_host(grpc.get("host"), bool(grpc.get("socket"))):
            return _unchecked(run, f"its worker is not on this machine (code server {grpc or 'unknown'})")
        if in_another_pid_namespace(grpc):
            return _unchecked(run, f"its code server ({grpc}) answers from another PID namespace (e.g. a sidecar "
                                   "container), where its worker pids mean nothing here")
        found = self._worker_pid(run.run_id)
        if found is None:
            return _unchecked(run, "its worker has not reported its pid yet")
        pid, reported_at = found
        if process_alive(pid, started_before=reported_at):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {pid} is alive", run_worker_id=str(pid))
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"run worker pid {pid} of run {run.run_id} is gone (killed, e.g. SIGKILL or out of memory) while the run "
            "was STARTED: its hours were not finished. Re-launch the run; hours already done are not redone.",
            run_worker_id=str(pid),
        )

    def _worker_pid(self, run_id: str) -> tuple[int, float] | None:
        """The pid the newest worker of the run reported ("Started process for run (pid: N)",
        also after a resume), with when it reported it."""
        records = self._instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT).records
        for rec in reversed(records):
            entry = rec.event_log_entry
            data = entry.dagster_event.event_specific_data if entry.dagster_event else None
            pid = (getattr(data, "metadata", None) or {}).get("pid")
            message = entry.dagster_event.message or "" if entry.dagster_event else ""
            if pid is not None and message.startswith("Started process for"):
                return int(getattr(pid, "value", pid)), entry.timestamp
        return None


def _unchecked(run: DagsterRun, why: str) -> CheckRunHealthResult:
    return CheckRunHealthResult(WorkerStatus.RUNNING, f"run {run.run_id}: not checked: {why}; a run that hangs is "
                                "failed by run monitoring's max_runtime_seconds")
