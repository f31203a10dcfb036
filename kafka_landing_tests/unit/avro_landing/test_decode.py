"""decode_checked blames a schema only for what the engine says about the schema: a Spark Connect
server that went away during the plan's analysis (an RPC on Connect) is transient and names no
schema as unlandable (review R6). No Spark: the decode is replaced by what the engine raised."""

from __future__ import annotations

import grpc
import pytest
from pyspark.errors import PySparkAssertionError
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from kafka_landing.avro_landing import decode
from kafka_landing.errors import LandingError, is_transient
from kafka_landing.spark_setup import SparkUnavailable

WRITER = {"type": "record", "name": "r", "fields": []}


def raising(exc):
    def decode_raises(*_a, **_k):
        raise exc
    return decode_raises


@pytest.mark.parametrize("exc", [
    SparkConnectGrpcException("failed to connect to all addresses", grpc_status_code=grpc.StatusCode.UNAVAILABLE),
    SparkConnectGrpcException("[INVALID_HANDLE.SESSION_CHANGED] restarted", errorClass="INVALID_HANDLE.SESSION_CHANGED",
                              messageParameters={}),
    PySparkAssertionError("Received incorrect server side session identifier for request. (a != b)"),
], ids=["retries exceeded", "session changed", "session id"])
def test_an_engine_that_went_away_during_analysis_is_transient_and_blames_no_schema(monkeypatch, exc):
    monkeypatch.setattr(decode, "decode", raising(exc))
    with pytest.raises(SparkUnavailable) as got:
        decode.decode_checked(None, 7, WRITER, "web 2026-11-20T13")
    assert is_transient(got.value) and "web 2026-11-20T13" in str(got.value) and "schema id 7" in str(got.value)
    assert "cannot be landed" not in str(got.value)


def test_what_the_engine_says_of_the_schema_itself_stays_terminal_and_names_it(monkeypatch):
    monkeypatch.setattr(decode, "decode", raising(SparkConnectGrpcException(
        "[AVRO_INCOMPATIBLE_READ_TYPE] no", errorClass="AVRO_INCOMPATIBLE_READ_TYPE", messageParameters={})))
    with pytest.raises(LandingError) as got:
        decode.decode_checked(None, 7, WRITER, "web 2026-11-20T13")
    assert not is_transient(got.value) and "schema id 7 cannot be landed" in str(got.value)
