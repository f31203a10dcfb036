"""The code location loads, and `dagster definitions validate` accepts the workspace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kafka_landing.definitions import build_definitions

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_load_every_layer():
    defs = build_definitions()
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"kafka_slices/demo_orders", "kafka_slices/demo_web_events"} <= keys


def test_every_run_executes_its_steps_in_its_own_process():
    """One import of the code location and one Spark session per run, whichever job runs: the
    topics' jobs, the asset job of backfills and the UI, the sensor's loads."""
    defs = build_definitions()
    jobs = [*defs.resolve_all_job_defs(), defs.resolve_implicit_global_asset_job_def()]
    assert len(jobs) >= 4
    assert sorted({j.executor_def.name for j in jobs}) == ["in_process"]


def test_dagster_definitions_validate(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    out = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All code locations passed validation" in out.stdout + out.stderr


def test_bad_config_fails_the_code_location(tmp_path, monkeypatch):
    (tmp_path / "t.yaml").write_text("topics:\n  a:\n    dataset: d\n    table: 'x/../y'\n")
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(tmp_path / "t.yaml"))
    import pytest

    from kafka_landing.config import TopicConfigError

    with pytest.raises(TopicConfigError, match="topic 'a': field 'table'"):
        build_definitions()


def test_dagster_beta_and_preview_warnings_are_silenced_and_others_are_not(tmp_path):
    code = ("import warnings\nimport kafka_landing.definitions\n"
            "warnings.warn('a warning of the user still shows', UserWarning)\n")
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "DAGSTER_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "BetaWarning" not in out.stderr and "PreviewWarning" not in out.stderr, out.stderr
    assert "a warning of the user still shows" in out.stderr


def test_the_instance_queues_a_second_load_of_a_table(tmp_path, monkeypatch):
    """Loads of one table wait in the queue (a per-table run limit), not in a run holding a Spark slot."""
    from dagster import DagsterInstance

    (tmp_path / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    by_key = {limit["key"]: limit for limit in limits}
    assert by_key["kafka_landing/table"]["limit"] == 1
    assert by_key["kafka_landing/table"]["value"] == {"applyLimitPerUniqueValue": True}
    assert by_key["kafka_landing/spark"]["limit"] == 2


def _two_histories(tmp_path) -> dict:
    config = tmp_path / "topics.yaml"
    config.write_text("defaults: {first_hour: 2026-11-01-00:00}\n"
                      "topics:\n"
                      "  old.topic: {dataset: d, table: old_rows}\n"
                      "  new.topic: {dataset: d, route: {field: kind, tables: {a: new_a}, default: new_other},"
                      " first_hour: 2026-11-20T13}\n")
    return {"KAFKA_LANDING_TOPICS_CONFIG": str(config), "KAFKA_LANDING_ROOT": str(tmp_path / "landing"),
            "KAFKA_LANDING_WAREHOUSE_ROOT": str(tmp_path / "warehouse")}


def test_topics_with_their_own_first_hours_load_and_validate(tmp_path, monkeypatch):
    """Each topic's assets, checks and tables start at its own first hour; its job and schedule
    cover its hours; the load sensor spans tables of both histories; Dagster validates it all."""
    from dagster import AssetKey

    from kafka_landing.warehouse.sensors import SENSOR_NAME

    env = _two_histories(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KAFKA_LANDING_FIRST_HOUR")
    defs = build_definitions()
    starts = {k.to_user_string(): defs.get_assets_def(k).partitions_def.get_first_partition_key()
              for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert starts == {
        "kafka_slices/old_topic": "2026-11-01-00:00", "avro_landing/old_topic": "2026-11-01-00:00",
        "warehouse/d/old_rows": "2026-11-01-00:00",
        "kafka_slices/new_topic": "2026-11-20-13:00", "avro_landing/new_topic": "2026-11-20-13:00",
        "warehouse/d/new_a": "2026-11-20-13:00", "warehouse/d/new_other": "2026-11-20-13:00",
    }
    for key, spec in defs.get_assets_def(AssetKey(["avro_landing", "new_topic"])).check_specs_by_output_name.items():
        assert spec.partitions_def.get_first_partition_key() == "2026-11-20-13:00", key
    jobs = {j.name: j.partitions_def.get_first_partition_key() for j in defs.resolve_all_job_defs() if j.name.startswith("land_")}
    old_hours, new_hours = "land_topics_from_20261101T00_grace_10m", "land_topics_from_20261120T13_grace_10m"
    assert jobs == {"land_old_topic": "2026-11-01-00:00", "land_new_topic": "2026-11-20-13:00",
                    old_hours: "2026-11-01-00:00", new_hours: "2026-11-20-13:00"}
    # Topics of different histories cannot share a run: each history ticks in a run of its own.
    assert {s.name: s.job_name for s in defs.schedules} == {f"{old_hours}_hourly": old_hours,
                                                            f"{new_hours}_hourly": new_hours,
                                                            "iceberg_upkeep_daily": "iceberg_upkeep"}  # the default
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    assert not sensor.has_anonymous_job  # runs on the implicit asset job, which allows several histories

    (tmp_path / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    out = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "KAFKA_LANDING_FIRST_HOUR"}, **env, "DAGSTER_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_new_topic_without_a_first_hour_fails_the_code_location_saying_what_to_set(tmp_path, monkeypatch):
    import pytest

    from kafka_landing.config import TopicConfigError

    (tmp_path / "t.yaml").write_text("topics:\n  fresh.topic: {dataset: d, table: t}\n")
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(tmp_path / "t.yaml"))
    monkeypatch.setenv("KAFKA_LANDING_ROOT", str(tmp_path / "landing"))
    monkeypatch.delenv("KAFKA_LANDING_FIRST_HOUR")
    with pytest.raises(TopicConfigError, match=r"topic 'fresh.topic': field 'first_hour': is required for a topic with no "
                                               r"frozen slice yet: set it to the first hour to land"):
        build_definitions()


def test_a_landing_root_that_cannot_be_listed_leaves_configured_first_hours_and_names_itself_otherwise(
        tmp_path, monkeypatch, gcs_emulator):
    """A bucket that does not exist (on the real GCS emulator): a topic with a first hour loads
    as configured; one that needs the frozen slices fails naming the landing root."""
    import pytest

    from kafka_landing.config import TopicConfigError

    env = _two_histories(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KAFKA_LANDING_ROOT", "gs://kafka-landing-no-such-bucket/landing")
    monkeypatch.delenv("KAFKA_LANDING_FIRST_HOUR")
    defs = build_definitions()
    assert {j.name: j.partitions_def.get_first_partition_key() for j in defs.resolve_all_job_defs()
            if j.name in ("land_old_topic", "land_new_topic")} == {"land_old_topic": "2026-11-01-00:00",
                                                                    "land_new_topic": "2026-11-20-13:00"}

    (tmp_path / "t.yaml").write_text("topics:\n  fresh.topic: {dataset: d, table: t}\n")
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(tmp_path / "t.yaml"))
    with pytest.raises(TopicConfigError) as exc:
        build_definitions()
    assert "topics ['fresh.topic'] have no first_hour and the landing root gs://kafka-landing-no-such-bucket/landing " \
           "cannot be listed" in str(exc.value) and "NotFound" in str(exc.value)


def test_the_frozen_slices_are_listed_with_the_credentials_from_the_env_var(tmp_path, monkeypatch):
    """The landing resource holds `EnvVar("KAFKA_LANDING_GCP_CREDENTIALS")`; the code location
    must list the bucket with the key in that variable, not with the variable's name. A key
    without a private key (no emulator, nothing reached) shows which one was read."""
    import pytest

    from kafka_landing.config import TopicConfigError

    for var in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "KAFKA_LANDING_FIRST_HOUR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    (tmp_path / "t.yaml").write_text("topics:\n  fresh.topic: {dataset: d, table: t}\n")
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(tmp_path / "t.yaml"))
    monkeypatch.setenv("KAFKA_LANDING_ROOT", "gs://kafka-landing-prod/landing")
    monkeypatch.setenv("KAFKA_LANDING_GCP_CREDENTIALS",
                       '{"type": "service_account", "client_email": "lander@proj.iam.gserviceaccount.com", '
                       '"private_key_id": "secret-id-123"}')
    with pytest.raises(TopicConfigError) as exc:
        build_definitions()
    msg = str(exc.value)
    assert "gs://kafka-landing-prod/landing cannot be listed" in msg
    assert "key given for lander@proj.iam.gserviceaccount.com could not be loaded" in msg, msg
    assert "secret-id-123" not in msg


def _fresh_clone_env(tmp_path, **extra) -> dict:
    """The environment of a new user right after `make setup`: nothing set, nothing landed yet."""
    unset = ("KAFKA_LANDING_FIRST_HOUR", "KAFKA_LANDING_TOPICS_CONFIG", "DEMO_HOURS")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    return {**{k: v for k, v in os.environ.items() if k not in unset}, "DAGSTER_HOME": str(home),
            "KAFKA_LANDING_ROOT": str(tmp_path / "landing"), "KAFKA_LANDING_WAREHOUSE_ROOT": str(tmp_path / "warehouse"),
            **extra}


def _validate(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_fresh_clone_loads_the_packaged_demo_config_with_nothing_set_and_nothing_frozen(tmp_path):
    """`dagster dev` / `dagster definitions validate` right after `make setup`, before `make demo`:
    the demo topics start at the hour the demo derives (the first of the hours `make demo` lands)."""
    from datetime import datetime, timezone

    from kafka_landing_tools.demo.generate import demo_hours
    from kafka_landing.naming import hour_key

    env = _fresh_clone_env(tmp_path)
    out = _validate(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All code locations passed validation" in out.stdout + out.stderr

    before = hour_key(demo_hours(datetime.now(timezone.utc), 3)[0])
    code = ("from kafka_landing.definitions import defs\n"
            "from dagster import AssetKey\n"
            "a = defs.get_assets_def(AssetKey(['kafka_slices', 'demo_orders']))\n"
            "print(a.partitions_def.get_first_partition_key())\n"
            "print(a.descriptions_by_key[AssetKey(['kafka_slices', 'demo_orders'])])\n")
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    after = hour_key(demo_hours(datetime.now(timezone.utc), 3)[0])
    assert shown.returncode == 0, shown.stderr
    first, description = shown.stdout.splitlines()[0], shown.stdout
    assert first in (before, after)
    assert "first_hour: demo" in description
    assert not (tmp_path / "landing").exists() or not any((tmp_path / "landing").rglob("*.json")), "loading froze nothing"


def test_a_users_topic_without_a_first_hour_still_fails_the_fresh_code_location(tmp_path):
    (tmp_path / "t.yaml").write_text("topics:\n  shop.orders: {dataset: shop, table: orders}\n")
    out = _validate(_fresh_clone_env(tmp_path, KAFKA_LANDING_TOPICS_CONFIG=str(tmp_path / "t.yaml")))
    assert out.returncode != 0
    assert (f"{tmp_path / 't.yaml'}: topic 'shop.orders': field 'first_hour': is required for a topic with no frozen "
            "slice yet: set it to the first hour to land") in out.stdout + out.stderr, out.stdout + out.stderr
