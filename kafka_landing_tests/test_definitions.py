"""The code location loads, and `dagster definitions validate` accepts the workspace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kafka_landing.definitions import build_definitions

ROOT = Path(__file__).resolve().parent.parent


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

    from kafka_landing.topic_config import TopicConfigError

    with pytest.raises(TopicConfigError, match="topic 'a': field 'table'"):
        build_definitions()
