"""Run monitoring, end to end: a run whose worker and code server die by SIGKILL is failed by a
real daemon, on whichever instance DAGSTER_HOME names (SQLite or PostgreSQL)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus

from kafka_landing_tools.daemon import BIN, daemon_env, start_daemon, stop_daemon, wait_for

SLEEPY = '''
import time
from dagster import Definitions, job, op

@op
def nap():
    time.sleep(600)

@job
def sleepy():
    nap()

defs = Definitions(jobs=[sleepy])
'''


def a_sigkilled_run_worker_is_failed(cwd: Path) -> None:
    """Launch a run that naps, SIGKILL its worker and the code server that started it, and require
    the daemon's run monitoring to fail the run (not leave it STARTED forever), naming the pid."""
    (cwd / "sleepy.py").write_text(SLEEPY)
    daemon = start_daemon(cwd, "load_from:\n  - python_file: sleepy.py\n")
    log = cwd / "daemon.log"
    try:
        subprocess.run([str(BIN / "dagster"), "job", "launch", "-w", "workspace.yaml", "-j", "sleepy"], cwd=cwd,
                       env=daemon_env(), check=True, capture_output=True, timeout=120)
        with DagsterInstance.get() as inst:
            run = wait_for("the run to start", lambda: next(iter(inst.get_runs()), None)
                           if any(r.status == DagsterRunStatus.STARTED for r in inst.get_runs()) else None, 120, log)
            pid = int(wait_for("the run worker's pid", lambda: next(
                (m.group(1) for e in inst.all_logs(run.run_id)
                 if (m := re.match(r"Started process for run \(pid: (\d+)\)", e.message or ""))), None), 60, log))
            # The code server notices a run worker of its own dying; both dying (a container or
            # machine restart, the OOM killer taking both) is left to run monitoring: kill both.
            code_server = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(code_server, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            ended = wait_for("the daemon to fail the run",
                             lambda: (r := inst.get_run_by_id(run.run_id)).is_finished and r, 120, log)
            assert ended.status == DagsterRunStatus.FAILURE
            logs = " ".join(e.message or "" for e in inst.all_logs(run.run_id))
            assert f"run worker pid {pid}" in logs and "is gone" in logs, logs[-2000:]
    finally:
        stop_daemon(daemon)
