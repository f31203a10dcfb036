"""The Spark Connect server restarted (a deploy, an out-of-memory) while a run lands an hour:
the run's session is gone, the failure is transient, the step opens a new session and tries
the hour again, and every offset lands exactly once (review 2026-11-26 R6).

The test restarts a Connect server of its own (another port, another folder), never the
stack's, which the rest of the test session shares. The hour is big (about 50 MB, the `big_hour`
the broker restart reads too) so that the read is still going when the server goes away; the
moment is taken from the server opening a connection to the broker for this run's read.
"""

from __future__ import annotations

import os
import signal
import socket
import time

from kafka_landing.naming import asset_safe
from kafka_landing_tests.faults.harness import check_landed_exactly, deployment, finish, start, step_key, web_topic
from kafka_landing_tests.faults.test_broker_restart import _connected_sockets, _sockets
from kafka_landing_tools import devstack


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connect_server_restarted_mid_landing_costs_a_retry_not_the_hour(big_hour, bootstrap, registry_url,
                                                                         tmp_path):
    port, sdir = _free_port(), tmp_path / "connect"
    url = devstack.start_spark_connect(port=port, sdir=sdir, memory="1g")
    pidfile = sdir / "pid"
    try:
        data = big_hour
        dep = deployment(tmp_path / "deploy", {data.topic: web_topic("sparkrestart")}, bootstrap, registry_url,
                         rows_per_task=1_000_000)
        before = _sockets(devstack._pid_alive(pidfile)) & _connected_sockets(devstack.PORTS.kafka)
        started = start(dep, dep.landing_assets(data.topic), data.hour, name="restarted", SPARK_REMOTE=url,
                        KAFKA_LANDING_RETRY_DELAY_SECONDS="2")
        try:
            # Each Spark read opens consumers of its own: a new connection of the server is this run's read.
            while started.proc.poll() is None and not (
                    _sockets(devstack._pid_alive(pidfile) or 0) & _connected_sockets(devstack.PORTS.kafka)) - before:
                time.sleep(0.05)
            assert started.proc.poll() is None, "the run ended before Spark connected to the broker"
            assert devstack._stop(pidfile, signal.SIGKILL), "the Connect server was not running"
            assert started.proc.poll() is None, "the run ended before the server went down: make the hour bigger"
            devstack.start_spark_connect(port=port, sdir=sdir, memory="1g")
        except BaseException:
            try:
                os.killpg(started.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise
        run = finish(started)
    finally:
        devstack._stop(pidfile)

    landing = step_key(f"avro_landing/{asset_safe(data.topic)}")
    assert run.returncode == 0, f"{run.failures.get(landing)}\n{run.tail()}"
    assert "failed on a service briefly away" in run.output, run.tail()  # it was tried again in the step
    check_landed_exactly(dep, data.topic, data.hour, data.sent)
