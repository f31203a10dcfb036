"""The Spark a run works on: a session on a warm Spark Connect server (`open_session` with a
remote), or a classic session the run starts. Its configuration: the Kafka source,
Avro and GCS connector jars from `make jvm` (minus any jar pyspark already ships,
so there is one Scala library and one Snappy on the class path), gs:// paths on
real Cloud Storage or, under STORAGE_EMULATOR_HOST, on the local emulator, UTC,
Parquet timestamps every reader reads back exactly, and sane local defaults."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from kafka_landing.avro_types import MAX_ITEMS, MAX_LENGTH, map_types
from kafka_landing.defaults import JVM_DIR
from kafka_landing.errors import KafkaLandingError, ServiceUnavailable, spark_server_gone

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
    missing = [name for name in ("spark-sql-kafka", "spark-avro", "gcs-connector", "kafka-landing-splice")
               if not any(name in j for j in jars)]
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
        # Why the classic committer, in production as on the emulator: Hadoop 3.4 on binds gs:// to
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
        # Hadoop 3.5 (pyspark 4.2) has a gs:// connector of its own, not shipped, and its
        # core-default.xml sets that connector's sizes with suffixes ("64m") under the same names;
        # Google's connector reads them as plain numbers and fails every gs:// path with
        # NumberFormatException. Its own defaults, as plain numbers:
        "spark.hadoop.fs.gs.block.size": str(64 << 20),
        "spark.hadoop.fs.gs.rewrite.max.chunk.size": str(512 << 20),
        "spark.hadoop.fs.gs.outputstream.buffer.size": str(8 << 20),
        "spark.hadoop.fs.gs.inputstream.inplace.seek.limit": str(8 << 20),
        "spark.hadoop.fs.gs.inputstream.min.range.request.size": str(2 << 20),
        # Parquet's vectored reads call into Hadoop 3.5 through a method (VectoredReadUtils.
        # validateRangeRequest) the connector was built against and Hadoop 3.5 no longer has: every
        # Parquet read of gs:// (the Iceberg warehouse on a bucket) fails with NoSuchMethodError.
        # Plain ranged reads instead; on a local disk the difference does not show at an hour's size.
        "spark.hadoop.parquet.hadoop.vectored.io.enabled": "false",
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


def session_config() -> dict:
    """The settings every session of a run sets for itself: on a Spark Connect server they are
    scoped to the run's session, so runs of other settings can share one warm server."""
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "8"),
        "spark.sql.avro.compression.codec": "snappy",  # BigQuery load jobs accept snappy and deflate
        # Parquet timestamps as INT64 microseconds, not Spark's legacy INT96, which pandas and pyarrow
        # read as nanoseconds: years 1 and 9999 came back as 1754 and 1816.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    }


# Avro's own limits on its readers (read once, when the JVM starts): the strict walk refuses a body
# beyond them first (body_rules.MAX_ITEMS, MAX_LENGTH), and these keep any reader of the engine
# from allocating for a count it has not read (Avro's default let a 6-byte body ask for 8 GB).
AVRO_LIMITS = (f"-Dorg.apache.avro.limits.collectionItems.maxLength={MAX_ITEMS} "
               f"-Dorg.apache.avro.limits.bytes.maxLength={MAX_LENGTH} "
               f"-Dorg.apache.avro.limits.string.maxLength={MAX_LENGTH}")
JVM_OPTIONS = f"-Duser.timezone=UTC {AVRO_LIMITS}"


def spark_config(master: str | None = None, driver_memory: str | None = None) -> dict:
    """A whole Spark process's settings: a classic session's, or a Connect server's (`devstack`
    starts the local one with them). Jars, memory, the JVM's time zone and gs:// are fixed when
    the process starts; the session's own settings come last."""
    master = master or os.environ.get("SPARK_MASTER", "local[*]")
    return {
        "spark.master": master,
        **_local_parallelism(master),
        "spark.app.name": "kafka_landing",
        "spark.jars": ",".join(connector_jars()),
        "spark.driver.memory": driver_memory or os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
        "spark.log.level": os.environ.get("SPARK_LOG_LEVEL", "ERROR"),
        "spark.ui.enabled": os.environ.get("SPARK_UI_ENABLED", "false"),
        "spark.driver.extraJavaOptions": JVM_OPTIONS,
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        **gcs_config(),
        **session_config(),
    }


def _local_parallelism(master: str) -> dict:
    """local[N] / local[*]: the parallelism Spark would take, said out loud so a session can read
    it without a SparkContext (a cluster's is its own)."""
    if master == "local":
        return {"spark.default.parallelism": "1"}
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if not m:
        return {}
    return {"spark.default.parallelism": str(os.cpu_count() or 1) if m.group(1) == "*" else m.group(1)}


def is_session_setting(key: str) -> bool:
    """What a session may set for itself on a shared Connect server."""
    return key.startswith(("spark.sql.", "spark.connect.session."))


def shown_remote(remote: str) -> str:
    """A Connect URL as it may be shown: `sc://host:port`, without its `;token=...` parameters."""
    return remote.split(";", 1)[0].rstrip("/")


def _reachable(remote: str, timeout: float) -> None:
    """Fail in seconds, not after the Connect client's ten minutes of retries, when nothing listens."""
    hostport = shown_remote(remote).removeprefix("sc://")
    host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "15002")  # Spark's default
    try:
        socket.create_connection((host or "localhost", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise SparkUnavailable(
            f"the Spark Connect server {shown_remote(remote)} does not answer ({exc}): start it (`make stack-up` "
            "starts the local one) or point SPARK_REMOTE at a running one; KAFKA_LANDING_SPARK=classic starts "
            "Spark inside the run instead") from None


# What pyspark sets in a process once it opened a Connect session: from then on its functions
# build Connect columns, and a classic session cannot start in that process.
CONNECT_MARK = "SPARK_CONNECT_MODE_ENABLED"


def open_session(remote: str | None, config: dict, connect_timeout: float = 10.0):
    """The run's Spark session. With `remote` (sc://host:port), a session on a long-lived Spark
    Connect server: no JVM to start, the connectors already loaded and warm; only the session
    settings of `config` apply (the server was started with the rest). Without, a classic
    session this process starts from `config` whole."""
    from pyspark.sql import SparkSession

    if not remote:
        if "pyspark.sql.connect.session" not in sys.modules:  # this process never was on Connect:
            os.environ.pop(CONNECT_MARK, None)  # a mark it inherited from a parent says nothing of it
        if os.environ.get("SPARK_REMOTE"):
            raise SparkConfigError("a classic Spark session was asked for (KAFKA_LANDING_SPARK=classic), but "
                                   "SPARK_REMOTE is set and would make pyspark connect to it: unset one of the two")
        builder = SparkSession.builder
        for key, value in config.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    from pyspark.sql.connect.client.retries import DefaultPolicy

    _reachable(remote, connect_timeout)
    spark = SparkSession.builder.remote(remote).create()  # a session of its own, never another run's
    # The client's default waits out 10 minutes of a server away; a run fails as transient within a minute.
    spark.client.set_retry_policies([DefaultPolicy(max_retries=8, max_backoff=10_000)])
    for key, value in config.items():
        if is_session_setting(key):
            spark.conf.set(key, value)
    return spark


def drop_if_server_gone(spark, exc: BaseException) -> None:
    """A Connect session whose server is gone (`errors.spark_server_gone`), closed on this side, so
    the retry's `spark_session` opens a new one. pyspark closes it itself on most answers of a
    restarted server, not on the one found while a query's results were streaming back."""
    client = getattr(spark, "client", None)
    if client is not None and not client.is_closed and spark_server_gone(exc):
        client.close()


def is_connect(spark) -> bool:
    """A session on a Spark Connect server (no SparkContext, observations reported per command)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def local_copy(df):
    """`df` computed once now and kept on the engine's local disk: every later job reads the copy,
    never its source again (its lineage is cut, so a lost block fails a job instead of reading the
    source anew)."""
    from pyspark import StorageLevel

    spark = df.sparkSession
    if not is_connect(spark):
        return df.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
    # pyspark (4.0 to 4.2 at least) binds the copy to the thread's active session, not to the one
    # that made it (connect/conversion.proto_to_remote_cached_dataframe calls SparkSession.active()):
    # with two sessions in a process (a reopened one, a test's), later jobs would ask the wrong
    # session for it and fail with CONNECT_INVALID_PLAN.DATAFRAME_NOT_FOUND. Make this one active.
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    holder = ConnectSession._active_session
    before = getattr(holder, "session", None)
    holder.session = spark
    try:
        return df.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
    finally:
        holder.session = before


# Avro's time-of-day logical types, which Spark reads as their numbers (see `spark_readable`).
TIME_OF_DAY = frozenset({"time-millis", "time-micros"})


def spark_readable(t):
    """The Avro type `t` as Spark reads records of it: without the time-of-day logical types.
    Spark 4.0 read time-micros as its long (time-millis as its int); Spark 4.2 reads time-micros
    as its TIME type and then refuses every query that holds one ([UNSUPPORTED_TIME_TYPE]: TIME
    is a preview behind spark.sql.timeType.enabled). So Spark reads the number, as before: the
    landing files keep the logical type (BigQuery loads it as TIME), the Iceberg warehouse keeps
    the number. The same wire format, so every writer of `t` resolves against it."""
    return map_types(t, lambda node: {k: v for k, v in node.items() if not (k == "logicalType" and v in TIME_OF_DAY)})


def type_ddl(t) -> str:
    """A Spark type as the DDL a cast names it by: what `Column.cast` gets instead of the type
    object. pyspark 4.2 sends a string type to a Connect server with its collation, always,
    which the server then takes for an explicit one: the cast's result is `string collate
    UTF8_BINARY`, not `string`, and so is every Parquet file's Spark schema written from it.
    Nullability goes as a struct field's NOT NULL; arrays and maps hold nulls (as every table
    type does: `warehouse.schema_evolution.table_type`)."""
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType

    if isinstance(t, StructType):
        return "struct<" + ",".join(
            f"`{f.name.replace('`', '``')}`:{type_ddl(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
            for f in t.fields) + ">"
    if isinstance(t, ArrayType):
        return f"array<{type_ddl(t.elementType)}>"
    if isinstance(t, MapType):
        return f"map<{type_ddl(t.keyType)},{type_ddl(t.valueType)}>"
    if isinstance(t, StringType):
        return "string" if t.isUTF8BinaryCollation() else f"string collate {t.collation}"
    return t.simpleString()


def default_parallelism(spark) -> int:
    """How many pieces the engine splits a read into by default. A Connect session has no
    SparkContext to ask: the server's setting if it has one, else the number of pieces a range gets."""
    configured = spark.conf.get("spark.default.parallelism", None)
    return int(configured) if configured else pieces_of_a_range(spark)


def pieces_of_a_range(spark) -> int:
    """How many pieces the engine cuts a range into, asked by a small job."""
    from pyspark.sql import functions as F

    pieces = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("piece"))
    return int(pieces.agg(F.max("piece")).first()[0]) + 1


class SparkUnavailable(ServiceUnavailable):
    """No Spark engine to run on: a Connect server that does not answer."""


class SparkConfigError(KafkaLandingError, ValueError):
    """Settings that ask for two engines at once: terminal until they change."""
