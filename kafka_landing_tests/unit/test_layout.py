"""The layout keeps its promises: Dagster only in the files whose role is Dagster,
Spark only where the heavy work runs, and every layer in the direction of the flow."""

from __future__ import annotations

import re
from pathlib import Path

import kafka_landing

PACKAGE = Path(kafka_landing.__file__).parent
LAYERS = ("kafka_slices", "avro_landing", "warehouse", "store")
DAGSTER_ROLES = {"assets.py", "checks.py", "sensors.py", "resources.py", "jobs.py"}
# Outside the layers: the code location, hourly partitions and per-hour reporting, the run
# launcher, and the tools that drive Dagster (the demo, the benchmark).
DAGSTER_TOP = {"definitions.py", "hours.py", "resources.py", "run_launcher.py", "bench.py", "demo/run.py"}
SPARK_FILES = {"avro_landing/read.py", "avro_landing/decode.py", "avro_landing/route.py", "avro_landing/write.py",
               "avro_landing/job.py", "warehouse/parquet.py", "bench.py"}


def importers(module: str) -> set[str]:
    pattern = re.compile(rf"^\s*(import {module}\b|from {module}[\s.])", re.M)
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())}


def allowed_dagster(rel: str) -> bool:
    parts = rel.split("/")
    return rel in DAGSTER_TOP or (parts[0] in LAYERS and parts[-1] in DAGSTER_ROLES)


def test_only_files_whose_role_is_dagster_import_it():
    found = importers("dagster") | importers("dagster_pyspark") | importers("dagster_gcp")
    assert found, "no file imports dagster: the pattern is broken"
    assert sorted(f for f in found if not allowed_dagster(f)) == []


def test_spark_only_where_the_heavy_work_runs():
    found = importers("pyspark")
    assert found, "no file imports pyspark: the pattern is broken"
    assert sorted(found - SPARK_FILES) == []


def test_every_layer_holds_its_steps():
    for layer, steps in {
        "kafka_slices": ["plan.py", "freeze.py", "kafka_log.py", "assets.py"],
        "avro_landing": ["read.py", "decode.py", "route.py", "write.py", "publish.py", "job.py", "assets.py"],
        "warehouse": ["load.py", "parquet.py", "bigquery.py", "assets.py", "checks.py", "sensors.py"],
        "store": ["base.py", "local.py", "gcs.py"],
    }.items():
        assert [s for s in steps if not (PACKAGE / layer / s).exists()] == [], layer


def test_no_two_modules_define_a_public_function_of_the_same_name():
    defs: dict[str, list[str]] = {}
    for p in PACKAGE.rglob("*.py"):
        for name in re.findall(r"^def ([a-z]\w*)\(", p.read_text(), re.M):
            defs.setdefault(name, []).append(str(p.relative_to(PACKAGE)))
    # Each layer's assets.py builds its own assets under the same conventional names.
    twice = {n: sorted(ps) for n, ps in defs.items() if len(ps) > 1 and n != "main"}  # entry points
    assert twice == {}
