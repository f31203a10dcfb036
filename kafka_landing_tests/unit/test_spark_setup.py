"""The Spark a run works on: a warm Connect server or a classic session, and what each failure to
get one means. No Spark is started here: a closed port stands for a server that is away."""

from __future__ import annotations

import os
import socket

import pytest

from kafka_landing.errors import is_transient
from kafka_landing.spark_setup import (
    SparkConfigError,
    SparkUnavailable,
    is_session_setting,
    open_session,
    session_config,
    shown_remote,
    spark_config,
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_a_connect_url_is_shown_without_its_token():
    assert shown_remote("sc://spark.example:443/;token=s3cr3t;user_id=me") == "sc://spark.example:443"
    assert shown_remote("sc://localhost:18015") == "sc://localhost:18015"


def test_a_connect_server_that_does_not_answer_fails_fast_as_transient_naming_it_but_not_its_token():
    port = closed_port()
    with pytest.raises(SparkUnavailable) as err:
        open_session(f"sc://127.0.0.1:{port}/;token=s3cr3t", {}, connect_timeout=2)
    assert is_transient(err.value)
    assert f"sc://127.0.0.1:{port}" in str(err.value) and "s3cr3t" not in str(err.value)
    assert "make stack-up" in str(err.value) and "KAFKA_LANDING_SPARK=classic" in str(err.value)


def test_a_classic_session_refuses_a_set_spark_remote_that_pyspark_would_follow(monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    with pytest.raises(SparkConfigError, match="SPARK_REMOTE is set .* unset one of the two") as err:
        open_session(None, spark_config())
    assert not is_transient(err.value)  # a configuration to change, not a service to wait for


def test_only_the_session_settings_reach_a_connect_session_and_the_classic_one_gets_them_too():
    sessions = set(session_config())
    assert len(sessions) >= 5
    assert sorted(k for k in sessions if not is_session_setting(k)) == []
    whole = spark_config()
    assert sessions <= set(whole)
    # what only a process can take at its start stays out of a Connect session
    start_only = ["spark.jars", "spark.driver.memory", "spark.master", "spark.hadoop.fs.gs.impl"]
    assert set(start_only) <= set(whole)
    assert [k for k in start_only if is_session_setting(k)] == []


def test_a_session_turns_off_the_connect_servers_plan_cache_which_loses_observations():
    """A cached plan of a DataFrame analysed before (.schema, .columns) makes a write's observation of
    it never arrive: the landing job's counts ride on observations."""
    assert session_config()["spark.connect.session.planCache.enabled"] == "false"
    assert is_session_setting("spark.connect.session.planCache.enabled")


def test_spark_connect_errors_are_transient_only_when_the_server_was_away():
    import grpc
    from pyspark.errors.exceptions.base import RetriesExceeded
    from pyspark.errors.exceptions.connect import AnalysisException

    class Answer(grpc.RpcError):
        __module__ = "grpc._channel"

        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

    assert is_transient(RetriesExceeded(errorClass="RETRIES_EXCEEDED", messageParameters={}))
    assert is_transient(Answer(grpc.StatusCode.UNAVAILABLE))
    assert not is_transient(Answer(grpc.StatusCode.INVALID_ARGUMENT))
    assert not is_transient(AnalysisException(message="[UNRESOLVED_COLUMN] no such column"))


@pytest.mark.parametrize("master, parallelism", [
    ("local[*]", str(os.cpu_count())), ("local[3]", "3"), ("local[4,2]", "4"), ("local", "1"), ("spark://m:7077", None),
])
def test_a_local_master_says_its_parallelism_so_no_session_needs_a_spark_context_to_know_it(master, parallelism):
    assert spark_config(master=master).get("spark.default.parallelism") == parallelism
