"""The broker restarted while Spark reads an hour: the run either lands the hour
exactly or fails with a clear error, and a re-run lands it exactly.

This test restarts the shared local broker (its data survives a restart) and
always leaves it running, even when it fails. The hour is big (about 50 MB, the
`big_hour` the Spark restart reads too) so that the read is still going when the broker
goes away; the moment is taken from the run's Spark engine opening a new connection to the
broker: the stack's warm Spark Connect server (the default engine), or a JVM the run started
(a classic session).
"""

from __future__ import annotations

import os
import signal
import time

from kafka_landing_tools import devstack
from kafka_landing.naming import asset_safe, done_file_path
from kafka_landing_tests.faults.harness import (
    check_landed_exactly,
    deployment,
    finish,
    materialize,
    start,
    step_key,
    web_topic,
)

def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            out.setdefault(ppid, []).append(int(d))
    return out


def _connected_sockets(port: int) -> set[str]:
    """Inodes of established TCP connections to `port` on this host."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if int(cols[2].rsplit(":", 1)[1], 16) == port and cols[3] == "01":
                out.add(cols[9])
    return out


def _sockets(pid: int) -> set[str]:
    try:
        links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return set()
    return {link[8:-1] for link in links if link.startswith("socket:[")}


def _engine_jvms(root_pid: int) -> list[int]:
    """The Java processes that can read for the run: the ones it started, and the stack's Spark
    Connect server."""
    found, children, todo = [], _children(), [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                with open(f"/proc/{child}/comm") as f:
                    if f.read().strip() == "java":
                        found.append(child)
            except OSError:
                continue
    server = devstack._pid_alive(devstack.STACK_DIR / "spark" / "pid")
    return found + ([server] if server else [])


def engine_broker_sockets(root_pid: int, port: int) -> set[str]:
    """The connections to the broker that the run's Spark engines hold now."""
    conns = _connected_sockets(port)
    return {s for pid in _engine_jvms(root_pid) for s in _sockets(pid) & conns}


def test_broker_restarted_mid_read(big_hour, bootstrap, registry_url, tmp_path):
    broker_pid = devstack.STACK_DIR / "kafka" / "pid"
    assert devstack._pid_alive(broker_pid), f"the broker on {bootstrap} was not started from {devstack.STACK_DIR}: not ours to restart"
    data = big_hour
    dep = deployment(tmp_path, {data.topic: web_topic("restart")}, bootstrap, registry_url, rows_per_task=1_000_000)
    select = dep.landing_assets(data.topic)
    landing_step = step_key(f"avro_landing/{asset_safe(data.topic)}")
    try:
        before = engine_broker_sockets(os.getpid(), devstack.PORTS.kafka)  # the warm server's, from earlier reads
        started = start(dep, select, data.hour, name="restarted")
        try:
            # Each Spark read opens consumers of its own: a new connection is this run's read.
            while started.proc.poll() is None and not (
                    engine_broker_sockets(started.proc.pid, devstack.PORTS.kafka) - before):
                time.sleep(0.05)
            assert started.proc.poll() is None, "the run ended before Spark connected to the broker"
            assert devstack._stop(broker_pid), "the broker was not running"
            assert started.proc.poll() is None, "the run ended before the broker went down: make the hour bigger"
            devstack._start_kafka()
        except BaseException:
            try:
                os.killpg(started.proc.pid, signal.SIGKILL)  # the run this test started
            except ProcessLookupError:
                pass  # it ended by itself: the assertion above says how
            raise
        run = finish(started)
    finally:
        if not devstack._kafka_ready():
            devstack._start_kafka()

    if run.returncode == 0:
        check_landed_exactly(dep, data.topic, data.hour, data.sent)
    else:
        message = run.failures.get(landing_step, "")
        assert data.topic in message or bootstrap in message, (
            f"the run failed through a broker restart without naming the topic or the broker:\n{message or run.tail()}")
        for table in dep.tables(data.topic):
            assert not (dep.landing / done_file_path("restart", table, data.hour)).exists()

    again = materialize(dep, select, data.hour, name="rerun")
    assert again.returncode == 0, f"{again.failures}\n{again.tail()}"
    check_landed_exactly(dep, data.topic, data.hour, data.sent)
