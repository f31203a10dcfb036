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
