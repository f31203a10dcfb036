"""The dev stack's PostgreSQL and the two Dagster instances the repo ships: dagster.yaml (SQLite, the
embedded default) and deploy/dagster.postgres.yaml (production). They differ only in where they
keep runs and events: a queue, launcher or monitoring setting changed in one and not the other
would make the tests (on SQLite) say nothing about production."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafka_landing_tools import devstack

REPO = Path(__file__).resolve().parents[2]


def _config(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def test_production_differs_from_the_default_only_in_its_storage():
    default, production = _config("dagster.yaml"), _config("deploy/dagster.postgres.yaml")
    assert set(default.pop("storage")) == {"sqlite"}
    storage = production.pop("storage")
    assert set(storage) == {"postgres"}
    assert {"run_coordinator", "run_launcher", "run_monitoring", "concurrency"} <= set(default)
    assert production == default


def test_production_reads_every_connection_setting_from_the_environment():
    db = _config("deploy/dagster.postgres.yaml")["storage"]["postgres"]["postgres_db"]
    settings = {k: v for k, v in db.items() if k != "scheme"}
    assert settings, db
    assert {k: v["env"] for k, v in settings.items()} == {
        "hostname": "DAGSTER_PG_HOST", "port": "DAGSTER_PG_PORT", "username": "DAGSTER_PG_USERNAME",
        "password": "DAGSTER_PG_PASSWORD", "db_name": "DAGSTER_PG_DB"}
    assert set(devstack.POSTGRES_DEFAULTS) == {v["env"] for v in settings.values()}


@pytest.mark.parametrize(("value", "postgres"), [(None, False), ("sqlite", False), ("postgres", True)])
def test_the_stack_starts_postgres_only_when_asked(monkeypatch, value, postgres):
    if value is None:
        monkeypatch.delenv("KAFKA_LANDING_INSTANCE", raising=False)
    else:
        monkeypatch.setenv("KAFKA_LANDING_INSTANCE", value)
    monkeypatch.delenv("DAGSTER_PG_HOST", raising=False)
    assert devstack.wants_postgres() is postgres


@pytest.mark.parametrize(("host", "postgres"), [("127.0.0.1", True), ("localhost", True), ("db.internal", False)])
def test_the_stack_starts_no_postgres_for_an_instance_on_another_host(monkeypatch, host, postgres):
    monkeypatch.setenv("KAFKA_LANDING_INSTANCE", "postgres")
    monkeypatch.setenv("DAGSTER_PG_HOST", host)
    assert devstack.wants_postgres() is postgres


def test_an_unknown_instance_kind_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv("KAFKA_LANDING_INSTANCE", "mysql")
    with pytest.raises(devstack.StackError, match="sqlite .* or postgres"):
        devstack.wants_postgres()


def test_the_stack_uses_your_own_postgres_settings_over_its_defaults(monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_HOST", "db.internal")
    env = devstack.postgres_env()
    assert env["DAGSTER_PG_HOST"] == "db.internal" and env["DAGSTER_PG_USERNAME"] == "dagster"


@pytest.mark.parametrize("memory, young", [("1g", "256m"), ("3g", "768m"), ("768m", "192m"), ("2048M", "512m")])
def test_a_fixed_heap_server_fixes_its_young_generation_too(memory, young):
    """G1 otherwise grows its young generation with a run's garbage (up to 60% of the heap): a
    server's memory would say how long it ran, not what its work holds."""
    opts = devstack._spark_server_config(15999, memory, fixed_heap=True)["spark.driver.extraJavaOptions"].split()
    assert [o for o in opts if o.startswith(("-Xms", "-Xmn"))] == [f"-Xms{memory}", f"-Xmn{young}"]


def test_a_server_whose_heap_may_grow_sets_neither():
    opts = devstack._spark_server_config(15999, "3g")["spark.driver.extraJavaOptions"].split()
    assert opts and not [o for o in opts if o.startswith(("-Xms", "-Xmn"))]


def test_a_fixed_heap_it_cannot_read_is_named():
    with pytest.raises(ValueError, match="1.5g"):
        devstack._spark_server_config(15999, "1.5g", fixed_heap=True)
