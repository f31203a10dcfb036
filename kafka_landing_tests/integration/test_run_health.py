"""Runs never hang: a run whose worker died is failed by run monitoring, a failure caused by
a service briefly away is retried a bounded number of times, a terminal one is not."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RetryPolicy,
    materialize,
)
from dagster._core.events import EngineEventData
from dagster._core.launcher import WorkerStatus
from dagster._core.launcher.default_run_launcher import GRPC_INFO_TAG

from kafka_landing.config import TopicConfig
from kafka_landing.hours import TRANSIENT_RETRIES
from kafka_landing.kafka_slices.assets import build_slice_asset
from kafka_landing.kafka_slices.resources import KafkaResource
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key
from kafka_landing.run_launcher import ProcessCheckingRunLauncher
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.run_monitoring import a_sigkilled_run_worker_is_failed

REPO = Path(__file__).resolve().parents[2]
QUICK = RetryPolicy(max_retries=2, delay=0.1)


@pytest.fixture
def instance(tmp_path, monkeypatch):
    """A real instance from the repo's own dagster.yaml."""
    shutil.copy(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with DagsterInstance.get() as inst:
        yield inst


def test_the_repo_instance_monitors_runs_with_the_process_checking_launcher(instance):
    assert isinstance(instance.run_launcher, ProcessCheckingRunLauncher)
    assert instance.run_launcher.supports_check_run_worker_health
    assert instance.run_monitoring_enabled
    assert instance.run_monitoring_max_resume_run_attempts == 0
    assert 0 < instance.run_monitoring_poll_interval_seconds <= 120


def _started_run(instance: DagsterInstance, pid: int, grpc: dict) -> DagsterRun:
    run = instance.add_run(DagsterRun(job_name="j", run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED,
                                      tags={GRPC_INFO_TAG: json.dumps(grpc)}))
    instance.report_engine_event(f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid))
    return run


@pytest.fixture
def code_server():
    """Something of this PID namespace listening where the run's code server is said to be."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield {"host": "localhost", "port": server.getsockname()[1]}
    server.close()


def test_a_killed_run_worker_is_failed_and_a_live_one_is_running(instance, code_server):
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = _started_run(instance, worker.pid, code_server)
        health = instance.run_launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.RUNNING, health
        worker.kill()
        time.sleep(0.5)  # a zombie until reaped: must already count as dead
        health = instance.run_launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.FAILED, health
        assert str(worker.pid) in health.msg and run.run_id in health.msg
        worker.wait()
        assert instance.run_launcher.check_run_worker_health(run).status == WorkerStatus.FAILED
    finally:
        worker.kill()
        worker.wait()


def test_a_run_worker_that_cannot_be_checked_is_never_failed_by_run_monitoring(instance, code_server, monkeypatch):
    """Dagster's run monitoring fails a run on any status but RUNNING or SUCCESS, UNKNOWN included: a
    worker on another host, in another PID namespace (a sidecar code server sharing the network: N16)
    or that has not said its pid yet must stay STARTED, left to max_runtime."""
    import logging

    from dagster._daemon.monitoring.run_monitoring import monitor_started_run

    import kafka_landing.run_launcher as launcher

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sidecar = {"host": "localhost", "port": 4999}  # a code server whose listener no pid of ours holds
    monkeypatch.setattr(launcher, "in_another_pid_namespace", lambda grpc: grpc == sidecar)
    runs = {
        "another host": _started_run(instance, dead.pid, {"host": "code-server.example", "port": 4000}),
        "another PID namespace": _started_run(instance, dead.pid, sidecar),
        "no pid yet": instance.add_run(DagsterRun(job_name="j", run_id=str(uuid.uuid4()),
                                                  status=DagsterRunStatus.STARTED,
                                                  tags={GRPC_INFO_TAG: json.dumps(code_server)})),
    }
    for why, run in runs.items():
        health = instance.run_launcher.check_run_worker_health(run)
        assert health.status == WorkerStatus.RUNNING and "not checked" in health.msg, (why, health)
        monitor_started_run(instance, None, instance.get_run_record_by_id(run.run_id), logging.getLogger("t"))
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.STARTED, why
    # The same dead pid, with a code server this daemon can see, is failed: the check can fail.
    seen = _started_run(instance, dead.pid, code_server)
    monitor_started_run(instance, None, instance.get_run_record_by_id(seen.run_id), logging.getLogger("t"))
    assert instance.get_run_by_id(seen.run_id).status == DagsterRunStatus.FAILURE


def _slice_run(topic: str, kafka: KafkaResource, tmp_path, policy: RetryPolicy = QUICK):
    from kafka_landing.resources import LandingResource

    asset = build_slice_asset(TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0), retry_policy=policy)
    return materialize([asset], partition_key=hour_key(floor_hour(utcnow()) - ONE_HOUR * 2),
                       instance=DagsterInstance.ephemeral(), raise_on_error=False,
                       resources={"kafka": kafka, "landing": LandingResource(landing_root=str(tmp_path / "landing"))})


def _attempts(result) -> int:
    return 1 + sum(e.event_type == DagsterEventType.STEP_RESTARTED for e in result.all_events)


def test_brokers_away_are_retried_a_bounded_number_of_times(tmp_path, one_attempt_in_step):
    result = _slice_run("any_topic", KafkaResource(bootstrap_servers="localhost:9", timeout_seconds=2), tmp_path)
    assert not result.success
    assert sum(e.event_type == DagsterEventType.STEP_UP_FOR_RETRY for e in result.all_events) == QUICK.max_retries
    assert _attempts(result) == QUICK.max_retries + 1
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    message = failure.event_specific_data.error.message
    assert "localhost:9" in message and "attempt 3 of 3; no retry left" in message, message


def test_an_unknown_topic_fails_once_without_retry(kafka, tmp_path):
    result = _slice_run(f"no_such_topic_{uuid.uuid4().hex[:8]}", kafka, tmp_path)
    assert not result.success
    assert _attempts(result) == 1
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    assert "does not exist" in failure.event_specific_data.error.message


def test_the_assets_do_not_retry_by_default():
    """Dagster's RetryPolicy retries any failed step, a step killed by SIGKILL or the OOM
    killer included: the retry policy is the caller's choice (see the builders)."""
    from kafka_landing.avro_landing.assets import build_landing_asset

    cfg = TopicConfig(topic="t", dataset="d", table="t")
    for a in (build_slice_asset(cfg), build_landing_asset(cfg)):
        assert a.op.retry_policy is None
    assert 1 <= TRANSIENT_RETRIES.max_retries <= 5 and TRANSIENT_RETRIES.backoff is not None


def test_a_range_is_retried_only_when_every_failed_hour_failed_transiently():
    from dagster import Failure

    from kafka_landing.hours import all_transient

    away, wrong = Failure("brokers away"), Failure("retention gap", allow_retries=False)
    assert all_transient([away, Failure("registry away")])
    assert not all_transient([away, wrong])
    assert not all_transient([away, RuntimeError("a bug")])
    assert not all_transient([])


def _landing_run(topic: str, kafka: KafkaResource, registry_url: str, tmp_path):
    from dagster_pyspark import LazyPySparkResource

    from kafka_landing.avro_landing.assets import build_landing_asset
    from kafka_landing.resources import LandingResource, SchemaRegistryResource

    asset = build_landing_asset(TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0), retry_policy=QUICK)
    return materialize([asset], partition_key=hour_key(floor_hour(utcnow()) - ONE_HOUR * 2),
                       instance=DagsterInstance.ephemeral(), raise_on_error=False,
                       resources={"kafka": kafka, "registry": SchemaRegistryResource(url=registry_url),
                                  "landing": LandingResource(landing_root=str(tmp_path / "landing")),
                                  "pyspark": LazyPySparkResource(spark_config={})})


def test_a_registry_away_is_retried_a_bounded_number_of_times(kafka, tmp_path, one_attempt_in_step):
    result = _landing_run("any_topic", kafka, "http://localhost:9/apis/ccompat/v7", tmp_path)
    assert not result.success
    assert _attempts(result) == QUICK.max_retries + 1
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    assert "could not be reached" in failure.event_specific_data.error.message


def test_landing_an_hour_whose_slice_is_not_frozen_fails_once(kafka, registry_url, tmp_path):
    result = _landing_run(f"never_sliced_{uuid.uuid4().hex[:8]}", kafka, registry_url, tmp_path)
    assert not result.success
    assert _attempts(result) == 1
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    assert "is not frozen yet" in failure.event_specific_data.error.message


def test_a_sigkilled_run_worker_is_failed_by_the_daemon(tmp_path, monkeypatch):
    """End to end: the repo's dagster.yaml (poll interval shortened), a real daemon, a real run
    worker and its code server killed with SIGKILL: the run ends FAILURE instead of STARTED forever.
    The same on PostgreSQL: integration/test_postgres_instance.py."""
    import yaml

    home = tmp_path / "home"
    home.mkdir()
    conf = yaml.safe_load((REPO / "dagster.yaml").read_text())
    conf["run_monitoring"]["poll_interval_seconds"] = 1
    (home / "dagster.yaml").write_text(yaml.safe_dump(conf))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    a_sigkilled_run_worker_is_failed(tmp_path)
