"""The shared resources as the code location builds them: a secret reaches a resource only
through an env var, and a run reads them without opening a Dagster instance. (Kafka's JAAS
line is tested beside its resource, in kafka_slices/test_resources.py.)"""

from __future__ import annotations

import pytest


def test_a_registry_url_with_credentials_reaches_the_resource_only_through_an_env_var(monkeypatch):
    """The Dagster UI shows a resource's plain fields; an EnvVar field shows the variable's name only."""
    from dagster import EnvVar

    from kafka_landing.definitions import build_resources, ready_resources

    monkeypatch.setenv("SCHEMA_REGISTRY_URL", "https://ci-user:s3cret@registry.example.com:8081")
    registry = build_resources()["registry"]
    assert isinstance(registry.url, EnvVar) and "s3cret" not in repr(registry)
    (ready,) = ready_resources("registry", resources={"registry": registry})
    assert ready.url == "https://ci-user:s3cret@registry.example.com:8081"  # the run still gets the value

    monkeypatch.setenv("SCHEMA_REGISTRY_URL", "http://registry.example.com:8081")
    assert build_resources()["registry"].url == "http://registry.example.com:8081"  # nothing to hide: shown


def test_runs_get_the_warm_engine_unless_told_otherwise_and_a_token_in_its_url_is_never_shown(monkeypatch):
    from dagster import EnvVar

    from kafka_landing import defaults
    from kafka_landing.definitions import build_resources, ready_resources

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv("KAFKA_LANDING_SPARK", raising=False)
    assert build_resources()["pyspark"].remote == defaults.SPARK_CONNECT_URL  # the stack's server

    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example:443/;token=s3cr3t")
    spark = build_resources()["pyspark"]
    assert isinstance(spark.remote, EnvVar) and "s3cr3t" not in repr(spark)
    (ready,) = ready_resources("pyspark", resources={"pyspark": spark})
    assert ready.remote == "sc://spark.example:443/;token=s3cr3t"

    monkeypatch.setenv("KAFKA_LANDING_SPARK", "classic")
    assert build_resources()["pyspark"].remote is None  # a classic session, started by the run
    monkeypatch.setenv("KAFKA_LANDING_SPARK", "cluster")
    with pytest.raises(ValueError, match="KAFKA_LANDING_SPARK='cluster': say connect .* or classic"):
        build_resources()


def test_loading_the_code_location_opens_no_dagster_instance(monkeypatch, tmp_path):
    """Every process that loads the code location (each run's among them) lists the landing root
    for the topics' first hours; an in-memory Dagster instance just to initialise the landing
    resource cost about half a second of each."""
    from dagster import DagsterInstance

    from kafka_landing.definitions import build_definitions, build_resources, ready_resources

    def refuse(*_a, **_k):
        raise AssertionError("a Dagster instance was opened")

    monkeypatch.setattr(DagsterInstance, "ephemeral", refuse)
    monkeypatch.setenv("KAFKA_LANDING_ROOT", str(tmp_path / "landing"))
    monkeypatch.setenv("KAFKA_LANDING_GCP_CREDENTIALS", '{"type": "service_account"}')
    resources = build_resources()
    assert build_definitions(resources=resources).resolve_job_def("land_demo_orders")
    (landing,) = ready_resources("landing", resources=resources)
    assert landing.gcp_credentials == '{"type": "service_account"}'  # the value, as a run sees it


def test_a_secret_unset_after_the_resource_was_built_is_named(monkeypatch):
    from kafka_landing.definitions import build_resources, ready_resources

    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "pw")
    resources = build_resources()
    monkeypatch.delenv("KAFKA_SASL_PASSWORD")
    with pytest.raises(ValueError, match=r"KafkaResource.sasl_password comes from \$KAFKA_SASL_PASSWORD"):
        ready_resources("kafka", resources=resources)


def test_a_connect_session_the_server_dropped_is_reopened_and_a_live_one_kept(monkeypatch):
    """Review R6: after the Spark Connect server restarted, pyspark closes the client whose
    server-side session is gone; the next use of the run's engine (the in-step retry) gets a new
    session instead of failing on the closed one. A live session is never replaced."""
    from kafka_landing import resources

    opened = []

    class Session:
        is_stopped = False

    def open_session(remote, config):
        opened.append(Session())
        return opened[-1]

    monkeypatch.setattr(resources, "open_session", open_session)
    res = resources.SparkResource(remote="sc://127.0.0.1:15002")
    first = res.spark_session
    assert res.spark_session is first and len(opened) == 1
    first.is_stopped = True  # what pyspark does on INVALID_HANDLE.SESSION_CHANGED
    second = res.spark_session
    assert second is not first and len(opened) == 2 and res.spark_session is second
