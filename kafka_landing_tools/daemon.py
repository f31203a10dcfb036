"""A real `dagster-daemon`, for the tests and the benchmark that need one (run monitoring,
backfills, the sensor's loads): started in a folder with its own workspace, on the instance
DAGSTER_HOME names, and killed with everything it started; and `land_and_load`, the way a user
lands topics from the UI and waits for their tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dagster import DagsterInstance

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


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


def wait_for(what: str, probe, seconds: float, log: Path | None = None, every: float = 1.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(every)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"gave up waiting for {what} after {seconds:.0f}s" + (f"; {log} ends:\n{tail}" if tail else ""))




CODE_LOCATION = "load_from:\n  - python_module: kafka_landing.definitions\n"


class DaemonRunError(RuntimeError):
    pass


def land_and_load(topics: list[str], hour_keys: list[str], cwd: Path, timeout: float = 900) -> dict:
    """Land the hours of every topic as one asset backfill of all their landing assets (what the UI's
    Materialize of a range of the selected assets does: one run for the topics that share their
    hours, as the hourly schedule of a group does), run by a real daemon through the queued coordinator, and return once the
    done-file sensor's loads have loaded every hour of every table of those topics and every run
    has ended: {"seconds" (from the first backfill), "rows" (the tables' dagster/row_count of those hours),
    "backfills", "tables"}. The instance (DAGSTER_HOME) and the code location's settings come
    from the environment; a failed backfill or load raises, naming it."""
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    from kafka_landing.avro_landing.assets import landing_key
    from kafka_landing.definitions import build_definitions
    from kafka_landing.kafka_slices.assets import slice_key
    from kafka_landing.warehouse.assets import GROUP as WAREHOUSE

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    downstream = {t: sorted(k for k in graph.get(landing_key(t)).child_keys if k.path[0] == WAREHOUSE) for t in topics}
    tables = sorted({k for keys in downstream.values() for k in keys})
    histories: dict[str, list[str]] = {}  # topics of one history share a run (their hours' partitions)
    for t in topics:
        histories.setdefault(graph.get(landing_key(t)).partitions_def.get_first_partition_key(), []).append(t)
    log = cwd / "daemon.log"
    daemon = start_daemon(cwd, CODE_LOCATION)
    try:
        with DagsterInstance.get() as instance:
            t0 = time.monotonic()
            ids = []
            for group in histories.values():
                backfill = PartitionBackfill.from_asset_partitions(
                    backfill_id=make_new_backfill_id(), asset_graph=graph, partition_names=hour_keys,
                    asset_selection=[k for t in group for k in (slice_key(t), landing_key(t))],
                    backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance, all_partitions=False,
                    title=f"land {len(group)} topic(s)", description=None, run_config=None)
                instance.add_backfill(backfill)
                ids.append(backfill.backfill_id)

            def failed_runs() -> list[str]:
                return [f"{r.run_id} ({r.job_name}, {r.tags.get('dagster/backfill') or r.tags.get('dagster/sensor_name')})"
                        for r in instance.get_runs() if r.status == DagsterRunStatus.FAILURE]

            def all_loaded() -> bool:
                if bad := failed_runs():
                    raise DaemonRunError(f"runs failed: {', '.join(bad)}; see `dagster run list` on {cwd}")
                return all(set(hour_keys) <= instance.get_materialized_partitions(k) for k in tables)

            wait_for(f"{len(tables)} tables to load hours {hour_keys[0]}..{hour_keys[-1]}", all_loaded, timeout, log, 2)
            # ... and every run to end: a load's checks run after its tables' materialisations.
            wait_for("every run to finish", lambda: all(r.is_finished for r in instance.get_runs()), timeout, log, 1)
            if bad := failed_runs():
                raise DaemonRunError(f"runs failed: {', '.join(bad)}; see `dagster run list` on {cwd}")
            seconds = time.monotonic() - t0

            def backfills_marked() -> list | None:
                """The backfills, once the backfill daemon has marked each done (on its own tick, which
                may come after their loads)."""
                found = [instance.get_backfill(i) for i in ids]
                return found if all(b.status != BulkActionStatus.REQUESTED for b in found) else None

            backfills = wait_for("the backfills to be marked done", backfills_marked, 120, log, 1)
            unfinished = [b.backfill_id for b in backfills if b.status != BulkActionStatus.COMPLETED_SUCCESS]
            if unfinished:
                raise DaemonRunError(f"backfills {unfinished} did not succeed, yet their tables loaded")
            return {"seconds": round(seconds, 2), "rows": loaded_rows(instance, tables, hour_keys), "backfills": ids,
                    "tables": tables}
    finally:
        stop_daemon(daemon)


def loaded_rows(instance, tables, hour_keys: list[str]) -> int:
    """The rows the tables hold for the hours: each partition's newest `dagster/row_count`."""
    rows = 0
    for key in tables:
        latest: dict[str, int] = {}
        for record in instance.fetch_materializations(key, limit=10_000).records:  # newest first
            event = record.event_log_entry.dagster_event
            if event.partition in hour_keys and event.partition not in latest:
                latest[event.partition] = int(
                    event.step_materialization_data.materialization.metadata["dagster/row_count"].value)
        rows += sum(latest.values())
    return rows
