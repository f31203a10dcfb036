"""The Spark configuration the PySpark resource starts with: the Kafka source and
Avro jars from `make jvm` (minus any jar pyspark already ships, so there is one
Scala library and one Snappy on the class path), UTC, and sane local defaults."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from kafka_landing.devstack import JVM_DIR

_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.]*\.jar$")


def _artifact(jar: str) -> str:
    m = _VERSIONED.match(jar)
    return m.group("artifact") if m else jar


def connector_jars(jvm_dir: Path = JVM_DIR / "spark") -> list[str]:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed: run `make setup`")
    shipped = {_artifact(j.name) for j in (Path(list(spec.submodule_search_locations)[0]) / "jars").glob("*.jar")}
    jars = sorted(str(j) for j in jvm_dir.glob("*.jar") if _artifact(j.name) not in shipped)
    if not any("spark-sql-kafka" in j for j in jars) or not any("spark-avro" in j for j in jars):
        raise RuntimeError(f"the Spark Kafka and Avro jars are missing in {jvm_dir}: run `make jvm`")
    return jars


def spark_config(master: str | None = None, driver_memory: str | None = None) -> dict:
    return {
        "spark.master": master or os.environ.get("SPARK_MASTER", "local[*]"),
        "spark.app.name": "kafka_landing",
        "spark.jars": ",".join(connector_jars()),
        "spark.driver.memory": driver_memory or os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.sql.avro.compression.codec": "snappy",  # BigQuery load jobs accept snappy and deflate
        "spark.log.level": os.environ.get("SPARK_LOG_LEVEL", "ERROR"),
        "spark.ui.enabled": os.environ.get("SPARK_UI_ENABLED", "false"),
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }
