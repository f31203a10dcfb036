"""The Spark a run works on: a warm Connect server or a classic session, and what each failure to
get one means. No Spark is started here: a closed port stands for a server that is away."""

from __future__ import annotations

import os
import re
import socket
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from kafka_landing.errors import is_transient
from kafka_landing.spark_setup import (
    SparkConfigError,
    SparkUnavailable,
    gcs_config,
    is_session_setting,
    open_session,
    session_config,
    shown_remote,
    spark_config,
    spark_readable,
    type_ddl,
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_a_connect_url_is_shown_without_its_token():
    assert shown_remote("sc://spark.example:443/;token=s3cr3t;user_id=me") == "sc://spark.example:443"
    assert shown_remote("sc://localhost:18015") == "sc://localhost:18015"


def test_a_connect_server_that_does_not_answer_fails_fast_as_transient_naming_it_but_not_its_token():
    port = closed_port()
    with pytest.raises(SparkUnavailable) as err:
        open_session(f"sc://127.0.0.1:{port}/;token=s3cr3t", {}, connect_timeout=2)
    assert is_transient(err.value)
    assert f"sc://127.0.0.1:{port}" in str(err.value) and "s3cr3t" not in str(err.value)
    assert "make stack-up" in str(err.value) and "KAFKA_LANDING_SPARK=classic" in str(err.value)


def test_a_classic_session_refuses_a_set_spark_remote_that_pyspark_would_follow(monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    with pytest.raises(SparkConfigError, match="SPARK_REMOTE is set .* unset one of the two") as err:
        open_session(None, spark_config())
    assert not is_transient(err.value)  # a configuration to change, not a service to wait for


def test_only_the_session_settings_reach_a_connect_session_and_the_classic_one_gets_them_too():
    sessions = set(session_config())
    assert len(sessions) >= 5
    assert sorted(k for k in sessions if not is_session_setting(k)) == []
    whole = spark_config()
    assert sessions <= set(whole)
    # what only a process can take at its start stays out of a Connect session
    start_only = ["spark.jars", "spark.driver.memory", "spark.master", "spark.hadoop.fs.gs.impl"]
    assert set(start_only) <= set(whole)
    assert [k for k in start_only if is_session_setting(k)] == []


def test_spark_connect_errors_are_transient_only_when_the_server_was_away():
    import grpc
    from pyspark.errors.exceptions.connect import AnalysisException, SparkConnectGrpcException

    class Answer(grpc.RpcError):
        __module__ = "grpc._channel"

        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

    assert is_transient(SparkConnectGrpcException("failed to connect", grpc_status_code=grpc.StatusCode.UNAVAILABLE))
    assert is_transient(Answer(grpc.StatusCode.UNAVAILABLE))
    assert not is_transient(Answer(grpc.StatusCode.INVALID_ARGUMENT))
    assert not is_transient(AnalysisException(message="[UNRESOLVED_COLUMN] no such column"))


@pytest.mark.parametrize("master, parallelism", [
    ("local[*]", str(os.cpu_count())), ("local[3]", "3"), ("local[4,2]", "4"), ("local", "1"), ("spark://m:7077", None),
])
def test_a_local_master_says_its_parallelism_so_no_session_needs_a_spark_context_to_know_it(master, parallelism):
    assert spark_config(master=master).get("spark.default.parallelism") == parallelism


def test_a_cast_names_its_type_as_ddl_so_a_connect_server_keeps_the_default_string():
    """pyspark 4.2 sends a StringType with its collation and a Connect server takes it for an
    explicit one (`string collate UTF8_BINARY` in every Parquet file's Spark schema)."""
    from pyspark.sql.types import (
        ArrayType,
        DecimalType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    t = StructType([StructField("a`b", StringType()), StructField("n", LongType(), nullable=False),
                    StructField("m", MapType(StringType(), ArrayType(DecimalType(12, 3))))])
    assert type_ddl(t) == "struct<`a``b`:string,`n`:bigint NOT NULL,`m`:map<string,array<decimal(12,3)>>>"
    assert type_ddl(StringType("UTF8_LCASE")) == "string collate UTF8_LCASE"


def test_spark_reads_a_time_of_day_as_its_number_and_every_other_logical_type_as_it_is():
    t = {"type": "record", "name": "r", "fields": [
        {"name": "t", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "a", "type": {"type": "array", "items": ["null", {"type": "int", "logicalType": "time-millis"}]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
    assert [f["type"] for f in spark_readable(t)["fields"]] == [
        "long", {"type": "array", "items": ["null", "int"]}, {"type": "long", "logicalType": "timestamp-micros"}]


def test_every_gs_size_hadoop_sets_with_a_suffix_is_a_plain_number_for_googles_connector():
    """Hadoop 3.5 (pyspark 4.2) sets sizes of its own gs:// connector as "64m" in core-default.xml,
    under the names Google's connector reads as plain numbers (NumberFormatException on every
    gs:// path): the session's config gives each one as a number."""
    import pyspark

    jar = next((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    with zipfile.ZipFile(jar) as z:
        root = ET.fromstring(z.read("core-default.xml"))
    suffixed = {p.findtext("name") for p in root.iter("property") if (p.findtext("name") or "").startswith("fs.gs.")
                and re.fullmatch(r"\d+[kmgtKMGT]", p.findtext("value") or "")}
    assert suffixed, "Hadoop sets no gs:// size with a suffix any more: the overrides may go"
    config = gcs_config({})
    assert {k: config.get(f"spark.hadoop.{k}", "").isdigit() for k in suffixed} == {k: True for k in suffixed}


class _Client:
    def __init__(self):
        self.is_closed, self.closes = False, 0

    def close(self):
        self.is_closed, self.closes = True, self.closes + 1


class _Session:
    def __init__(self):
        self.client = _Client()


def test_a_session_whose_server_is_gone_is_closed_here_so_the_retry_opens_a_new_one():
    """pyspark leaves the client open when the restarted server's answer comes while results stream
    back (RESPONSE_ALREADY_RECEIVED); the resource opens a new session only for a closed one."""
    from pyspark.errors import PySparkRuntimeError

    from kafka_landing.spark_setup import drop_if_server_gone

    gone = PySparkRuntimeError(errorClass="RESPONSE_ALREADY_RECEIVED",
                               messageParameters={"error_type": "INVALID_HANDLE.SESSION_NOT_FOUND"})
    work = PySparkRuntimeError(errorClass="RESPONSE_ALREADY_RECEIVED", messageParameters={"error_type": "OTHER"})
    kept, dropped = _Session(), _Session()
    drop_if_server_gone(kept, work)
    drop_if_server_gone(kept, ValueError("a bug of ours"))
    drop_if_server_gone(dropped, gone)
    drop_if_server_gone(dropped, gone)  # closed once
    assert (kept.client.closes, dropped.client.closes) == (0, 1)
    drop_if_server_gone(object(), gone)  # a classic session has no client: nothing to close
