"""A real `dagster-daemon` for the tests that need one (run monitoring, backfills, sensors):
started in a folder with its own workspace, on the instance DAGSTER_HOME names, and killed
with everything it started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

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


def daemon_env() -> dict:
    """This process's environment, less pyspark's marks of a Connect process (each run process
    opens its own session), with the checkout importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    return {**env, "PYTHONPATH": str(REPO)}


def start_daemon(cwd: Path, workspace: str) -> subprocess.Popen:
    with DagsterInstance.get():  # create the storage once, before the daemon and the CLI race to
        pass
    (cwd / "workspace.yaml").write_text(workspace)
    with open(cwd / "daemon.log", "ab") as log:
        return subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=cwd,
                                env=daemon_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_daemon(daemon: subprocess.Popen) -> None:
    os.killpg(daemon.pid, signal.SIGKILL)  # the daemon, its code server and any orphaned run
    daemon.wait()


def wait_for(what: str, probe, seconds: float, log: Path | None = None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(1)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"gave up waiting for {what} after {seconds:.0f}s" + (f"; {log} ends:\n{tail}" if tail else ""))


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
