"""The README's and docs' examples, run: the Python that reads the tables and the shell commands
(the CLI's dry-run plan, a backfill from the command line), against a warehouse really landed and
loaded from the local stack, in a checkout of its own, as `make demo` leaves one.

The checkout is a folder with the repo's `.venv` linked in and a `.local/` holding its landing
root, Iceberg warehouse and Dagster home, filled by the demo's own steps (produce; land, here
each topic's hours in one run; the done-file sensor's loads, the event sensor's loads) for two
hours of two topics named like no other: the demo's config with the test's topic names, and its
datasets `shop` and `web`. Each example runs from that folder, with the literals its
`<!-- doc-test: ... -->` comment names replaced by the test's values (docs/testing.md). In
Python, paths under `.local/` are made absolute: the Spark Connect server resolves a relative
path against its own working directory, not the test's."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance

from kafka_landing.naming import asset_safe, hour_key
from kafka_landing_tests.conftest import topics_yaml, utcnow
from kafka_landing_tests.docs import ROOT, Block, examples
from kafka_landing_tools.demo.generate import ORDERS, WEB, demo_hours, generate

HOURS = 2
PER_HOUR = 60
PYTHON, SHELL, SPARK41 = examples("warehouse"), examples("shell"), examples("spark41")
SPARK41_PYTHON = ROOT / ".venv-spark41" / "bin" / "python"  # `make setup`'s: pyspark 4.1 beside the product's 4.2


@dataclass
class Checkout:
    root: Path
    env: dict[str, str]      # what a shell in it sees: the landing root, warehouse, topic config, Dagster home
    values: dict[str, str]   # what the examples' literals stand for here


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, bootstrap, registry_url, spark) -> Checkout:
    from kafka_landing.definitions import build_definitions, landing_job_name
    from kafka_landing_tools.demo import run as demo

    root = tmp_path_factory.mktemp("checkout")
    (root / ".venv").symlink_to(ROOT / ".venv")
    local = root / ".local"
    home = local / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    suffix = uuid.uuid4().hex[:8]
    topics = {ORDERS: f"docs_orders_{suffix}", WEB: f"docs_web_{suffix}"}
    now = utcnow()
    hours = demo_hours(now, HOURS)
    generate(bootstrap, registry_url, hours=HOURS, per_hour=PER_HOUR, now=now, topics=topics)
    config = root / "topics.yaml"
    config.write_text(topics_yaml({
        topics[ORDERS]: {"dataset": "shop", "table": "orders", "event_time_field": "created_at"},
        topics[WEB]: {"dataset": "web", "route": {"field": "type", "default": "other_events",
                                                  "tables": {"page_view": "page_views", "click": "clicks"}}},
    }, dead_letter_limit=0.5, first_hour=hour_key(hours[0])))  # a few bad records an hour in a small hour
    env = {"KAFKA_LANDING_TOPICS_CONFIG": str(config), "KAFKA_LANDING_ROOT": str(local / "landing"),
           "KAFKA_LANDING_WAREHOUSE_ROOT": str(local / "warehouse"), "DAGSTER_HOME": str(home)}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        defs = build_definitions()
        with DagsterInstance.from_config(str(home)) as instance:
            for topic in topics.values():  # each topic's hours in one run, as a backfill lands them
                run = defs.resolve_job_def(landing_job_name(topic)).execute_in_process(instance=instance, tags={
                    "dagster/asset_partition_range_start": hour_key(hours[0]),
                    "dagster/asset_partition_range_end": hour_key(hours[-1])})
                assert run.success
            assert demo.load_through_sensor(defs, instance) >= 1  # the tables are read below, each must hold rows
            assert demo.load_event_partitions(defs, instance) >= 1
        yield Checkout(root, env, {
            "topic": topics[ORDERS], "asset": asset_safe(topics[ORDERS]),
            "first_hour": hour_key(hours[0]), "last_hour": hour_key(hours[-1]),
            "event_day": hours[-1].strftime("%Y-%m-%d"),
        })


def rows_in(value) -> int | None:
    """How many rows a table the example read holds; None for anything that is no table."""
    import duckdb
    import pandas as pd

    if isinstance(value, (pd.DataFrame, pd.Series)):
        return len(value)
    if isinstance(value, duckdb.DuckDBPyRelation):
        return len(value.fetchall())
    if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pyspark.sql"):
        return value.count()
    return None


def run_python(code: str, namespace: dict) -> list[tuple[str, int]]:
    """Run the example statement by statement; (statement, rows) for every table it read: the
    value of each expression statement and of each name it assigned."""
    read = []
    for node in ast.parse(code).body:
        statement = ast.unparse(node)
        if isinstance(node, ast.Expr):
            values = [eval(compile(ast.Expression(node.value), "<doc>", "eval"), namespace)]  # noqa: S307
        else:
            exec(compile(ast.Module([node], type_ignores=[]), "<doc>", "exec"), namespace)  # noqa: S102
            targets = node.targets if isinstance(node, ast.Assign) else []
            values = [namespace[t.id] for t in targets if isinstance(t, ast.Name)]
        read += [(statement, n) for v in values if (n := rows_in(v)) is not None]
    return read


def test_an_example_that_reads_no_table_or_an_empty_one_is_told_apart():
    """What the test below fails on: no table read at all, or a table without rows."""
    assert run_python("x = 1\nprint(x)", {}) == []
    read = run_python("import pandas as pd\nfull = pd.DataFrame({'a': [1, 2]})\npd.DataFrame()\nfull['a']", {})
    assert read == [("full = pd.DataFrame({'a': [1, 2]})", 2), ("pd.DataFrame()", 0), ("full['a']", 2)]


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_a_documented_read_of_the_tables_returns_rows(block: Block, checkout, spark, monkeypatch):
    monkeypatch.chdir(checkout.root)
    code = block.code_for(checkout.values).replace(".local/", f"{checkout.root}/.local/")
    read = run_python(code, {"spark": spark})
    assert read, f"{block.id} reads no table"
    assert [(s, n) for s, n in read if n == 0] == [], f"{block.id} read an empty table"


def shown(stdout: str) -> list[dict[str, int]]:
    """The (hour, count) tables an example's `.show()` printed, in order."""
    tables: list[dict[str, int]] = []
    for line in stdout.splitlines():
        if re.fullmatch(r"\|\s*hour\|count\(1\)\|", line):
            tables.append({})
        elif tables and (m := re.fullmatch(r"\|\s*(\d{4}-\d\d-\d\dT\d\d)\|\s*(\d+)\|", line)):
            tables[-1][m[1]] = int(m[2])
    return tables


@pytest.mark.parametrize("block", SPARK41, ids=[b.id for b in SPARK41])
def test_spark_4_1_with_icebergs_runtime_reads_each_snapshot_as_pyiceberg_does(block: Block, checkout,
                                                                               iceberg_rest_url):
    """The documented Spark 4.1 session, in its own environment with Iceberg's runtime, reads the
    checkout's table through the stack's REST catalog (where the test registers it): its current
    snapshot and its first, hour by hour, as pyiceberg counts them."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.expressions import EqualTo

    from kafka_landing.warehouse.iceberg import IcebergWarehouse

    def counts(table, snapshot_id: int | None) -> dict[str, int]:
        hours = table.scan(snapshot_id=snapshot_id, selected_fields=("hour",)).to_arrow()["hour"].to_pylist()
        return dict(Counter(hours))

    t = IcebergWarehouse(checkout.env["KAFKA_LANDING_WAREHOUSE_ROOT"]).table("web", "page_views")
    [jar] = (ROOT / ".jvm" / "spark41").glob("iceberg-spark-runtime-4.1_*.jar")
    namespace = f"docs_{uuid.uuid4().hex[:8]}"
    rest = RestCatalog("kafka_landing", uri=iceberg_rest_url)
    rest.create_namespace(namespace)
    rest.register_table((namespace, "page_views"), t.metadata_location)
    try:
        # One more snapshot, without the last hour, so the first and the current one differ.
        t = rest.load_table((namespace, "page_views"))
        t.delete(EqualTo("hour", max(counts(t, None))))
        code = block.code_for({**checkout.values, "rest_url": iceberg_rest_url,
                               "rest_table": f"kl.{namespace}.page_views"})
        # A user's shell: none of this process's Spark (its Connect mark would make pyspark 4.1 connect)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}
        done = subprocess.run([str(SPARK41_PYTHON), "-c", code], cwd=checkout.root, capture_output=True, text=True,
                              env={**env, "PYSPARK_SUBMIT_ARGS": f"--jars {jar} pyspark-shell"}, timeout=600)
    finally:
        rest.drop_table((namespace, "page_views"))
        rest.drop_namespace(namespace)

    assert done.returncode == 0, done.stderr[-3000:]
    current, first = counts(t, None), counts(t, t.metadata.snapshots[0].snapshot_id)
    assert shown(done.stdout) == [current, first], done.stdout
    assert sum(current.values()) > 0 and current != first


def shell(block: Block, checkout: Checkout) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", block.code_for(checkout.values)], cwd=checkout.root,
                          env={**os.environ, **checkout.env}, capture_output=True, text=True, timeout=600)


def test_the_documented_dry_run_plan_shows_the_hours_landed_and_loaded(checkout):
    """Run before the commands below, one of which lands these hours again."""
    plan = [b for b in SHELL if "kafka_landing plan" in b.code]
    assert len(plan) == 1
    out = shell(plan[0], checkout)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{HOURS} hours: {HOURS} frozen, 0 would freeze (0 records), 0 open, 0 with errors; " \
           f"{HOURS} landed, {HOURS} loaded. Nothing was written." in out.stdout, out.stdout


@pytest.mark.parametrize("block", SHELL, ids=[b.id for b in SHELL])
def test_a_documented_command_runs(block: Block, checkout):
    out = shell(block, checkout)
    code = block.code_for(checkout.values)
    assert out.returncode == 0, f"{block.id}:\n{code}\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
