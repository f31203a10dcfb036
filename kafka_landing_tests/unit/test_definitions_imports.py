"""The code location imports what a process needs to list the assets, not what a run needs to
do its work: every run process and the daemon import it, so Spark, pyiceberg, Google's clients,
the registry client, pyarrow, pandas and fastavro load only when a run uses them."""

import json
import os
import subprocess
import sys

HEAVY = ("pyspark", "pyiceberg", "google.cloud", "confluent_kafka.schema_registry", "pyarrow", "pandas", "fastavro")

_PROBE = f"""
import json, sys
import kafka_landing.definitions
heavy = {HEAVY!r}
print(json.dumps(sorted({{h for m in sys.modules for h in heavy if m == h or m.startswith(h + ".")}})))
"""


def _loaded(extra_import: str = "") -> list[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([sys.executable, "-c", extra_import + _PROBE], capture_output=True, text=True, env=env,
                          check=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_code_location_loads_no_library_of_a_runs_work():
    assert _loaded() == []


def test_the_probe_sees_a_heavy_library_when_one_is_loaded():
    assert "pyspark" in _loaded("import kafka_landing.avro_landing.job\n")
