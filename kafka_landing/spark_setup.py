"""The Spark configuration the PySpark resource starts with: the Kafka source,
Avro and GCS connector jars from `make jvm` (minus any jar pyspark already ships,
so there is one Scala library and one Snappy on the class path), gs:// paths on
real Cloud Storage or, under STORAGE_EMULATOR_HOST, on the local emulator, UTC,
Parquet timestamps every reader reads back exactly, and sane local defaults."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

from kafka_landing.defaults import JVM_DIR

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
    missing = [name for name in ("spark-sql-kafka", "spark-avro", "gcs-connector") if not any(name in j for j in jars)]
    if missing:
        raise RuntimeError(f"the Spark connector jars {', '.join(missing)} are missing in {jvm_dir}: run `make jvm`")
    return jars


def gcs_config(env: Mapping[str, str] | None = None) -> dict:
    """The Hadoop settings for gs:// paths. Only names and paths, never key material:
    a key file is named by its path, so printing the config shows no secret."""
    env = os.environ if env is None else env
    config = {
        # Named here: Hadoop reads its FileSystem service list before spark.jars join the class
        # path, so without it gs:// is "No FileSystem for scheme".
        "spark.hadoop.fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        # Why the classic committer, in production as on the emulator: Hadoop 3.4 binds gs:// to
        # its manifest committer, but Spark's own commit protocol gives a task a staging path only
        # from a FileOutputCommitter. With the manifest committer tasks write straight into the
        # destination and the committer commits nothing (its _SUCCESS lists no file), so a failed
        # or retried task attempt leaves its file in the output; on the emulator task commit even
        # fails. The fix Hadoop documents, PathOutputCommitProtocol, is in spark-hadoop-cloud,
        # which pyspark does not ship. The v1 committer's renames are copies on GCS and its job
        # commit is not atomic: safe here, because each landing attempt writes its own staging
        # folder and readers take only the files a done file lists.
        "spark.hadoop.mapreduce.outputcommitter.factory.scheme.gs":
            "org.apache.hadoop.mapreduce.lib.output.FileOutputCommitterFactory",
        "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "1",  # v2 publishes at task commit
    }
    emulator = env.get("STORAGE_EMULATOR_HOST")
    if emulator:
        url = emulator if "://" in emulator else f"http://{emulator}"
        config.update({
            "spark.hadoop.fs.gs.storage.root.url": url.rstrip("/") + "/",
            "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
            # fake-gcs-server answers the bucket storageLayout call 404 and objects.moveTo 400;
            # with either left on, every rename fails. Real GCS has both, so production keeps them.
            "spark.hadoop.fs.gs.hierarchical.namespace.folders.enable": "false",
            "spark.hadoop.fs.gs.operation.move.enable": "false",
        })
    elif env.get("GOOGLE_APPLICATION_CREDENTIALS"):
        config.update({
            "spark.hadoop.fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE",
            "spark.hadoop.fs.gs.auth.service.account.json.keyfile": env["GOOGLE_APPLICATION_CREDENTIALS"],
        })
    else:
        config["spark.hadoop.fs.gs.auth.type"] = "APPLICATION_DEFAULT"
    return config


def spark_config(master: str | None = None, driver_memory: str | None = None) -> dict:
    return {
        "spark.master": master or os.environ.get("SPARK_MASTER", "local[*]"),
        "spark.app.name": "kafka_landing",
        "spark.jars": ",".join(connector_jars()),
        "spark.driver.memory": driver_memory or os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.sql.avro.compression.codec": "snappy",  # BigQuery load jobs accept snappy and deflate
        # Parquet timestamps as INT64 microseconds, not Spark's legacy INT96, which pandas and pyarrow
        # read as nanoseconds: years 1 and 9999 came back as 1754 and 1816.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.log.level": os.environ.get("SPARK_LOG_LEVEL", "ERROR"),
        "spark.ui.enabled": os.environ.get("SPARK_UI_ENABLED", "false"),
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        **gcs_config(),
    }
