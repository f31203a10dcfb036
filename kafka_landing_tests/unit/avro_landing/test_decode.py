"""decode_checked blames a schema only for what the engine says about the schema: a Spark Connect
server that went away during the plan's analysis (an RPC on Connect) is transient and names no
schema as unlandable (review R6). No Spark: the decode is replaced by what the engine raised.
resolve_schemas makes the records of a writer schema whose decimal fastavro cannot read dead
letters, checked against fastavro itself."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import fastavro
import grpc
import pytest
from pyspark.errors import PySparkAssertionError
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from kafka_landing.avro_landing import decode
from kafka_landing.errors import LandingError, is_transient
from kafka_landing.spark_setup import SparkUnavailable
from kafka_landing_tests.unit.test_avro_files import avro_long, container

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


# --- a decimal Avro's Java parser ignores and fastavro cannot read (review 2026-11-28 S3) -------------

def _bytes_dec(**props) -> dict:
    return {"type": "bytes", "logicalType": "decimal", **props}


# Each invalid by Avro's rules: Avro's Java parser (the registry's, Spark's) ignores the logical type
# and reads the bytes, while fastavro refuses the schema or fails on the value.
FASTAVRO_CANNOT_READ = {
    "scale greater than precision": (_bytes_dec(precision=4, scale=6), "scale 6 is greater than its precision 4"),
    "negative precision": (_bytes_dec(precision=-1), "precision -1 is not a positive integer"),
    "precision 0": (_bytes_dec(precision=0), "precision 0 is not a positive integer"),
    "precision a string": (_bytes_dec(precision="4"), "precision \"4\" is not a positive integer"),
    "precision a float": (_bytes_dec(precision=4.0), "precision 4.0 is not a positive integer"),
    "no precision": (_bytes_dec(scale=2), "it has no precision"),
    "negative scale": (_bytes_dec(precision=4, scale=-1), "scale -1 is not a non-negative integer"),
    "scale a float": (_bytes_dec(precision=4, scale=1.5), "scale 1.5 is not a non-negative integer"),
    "scale null": (_bytes_dec(precision=4, scale=None), "scale null is not a non-negative integer"),
    "a fixed too small": ({"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 5},
                          "a fixed of 2 bytes holds at most 4 digits, not 5"),
}


def _price_schema(decimal) -> dict:
    return {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"},
                                                      {"name": "price", "type": ["null", decimal]}]}


def _price_file(decimal) -> bytes:
    """A file of one record whose price is the bytes 0x01 0x02 (2 bytes of a fixed), as Avro's Java writes it."""
    value = b"\x01\x02" if decimal["type"] == "fixed" else avro_long(2) + b"\x01\x02"
    return container(_price_schema(decimal), [avro_long(5) + avro_long(1) + value])


def _resolved(writer: dict):
    return decode.resolve_schemas(lambda _sid: json.dumps(writer), [7], "web 2026-11-20T13")


@pytest.mark.parametrize("case", sorted(FASTAVRO_CANNOT_READ))
def test_a_decimal_fastavro_cannot_read_makes_its_schema_ids_records_dead_letters_naming_the_field(case):
    """Every hour of such a schema id failed for good in the read-back (a bare SchemaParseException);
    dead letters keep the records and let the rest of the hour land."""
    decimal, why = FASTAVRO_CANNOT_READ[case]
    with pytest.raises(Exception):  # noqa: PT011 - fastavro's own: SchemaParseException, KeyError, ValueError...
        list(fastavro.reader(io.BytesIO(_price_file(decimal))))
    writers, dead = _resolved(_price_schema(decimal))
    assert writers == {}
    assert dead == {7: f"schema id 7 has an invalid decimal: field 'price' {why} (Avro's Java parser ignores the "
                       "decimal, fastavro refuses the schema): fix the producer's schema"}


@pytest.mark.parametrize("props", [dict(precision=True), dict(precision=4, scale=True)], ids=["precision", "scale"])
def test_a_decimal_whose_precision_or_scale_is_a_boolean_is_dead_letters_too_readers_disagree_on_it(props):
    """fastavro takes a JSON true for 1 and reads a decimal; Avro's Java parser ignores the decimal
    and reads the bytes: the same file would mean two values."""
    decimal = _bytes_dec(**props)
    [rec] = fastavro.reader(io.BytesIO(_price_file(decimal)))
    assert isinstance(rec["price"], Decimal)
    writers, dead = _resolved(_price_schema(decimal))
    assert writers == {} and "field 'price'" in dead[7] and "is not a" in dead[7]


@pytest.mark.parametrize("decimal", [
    _bytes_dec(precision=4, scale=2), _bytes_dec(precision=4), _bytes_dec(precision=4, scale=4),
    {"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 4, "scale": 1},
    {"type": "string", "logicalType": "decimal", "precision": 4, "scale": 6},  # not on bytes: both read a string
], ids=["decimal(4,2)", "no scale", "scale = precision", "fixed(2) decimal(4,1)", "on a string"])
def test_a_decimal_fastavro_reads_as_avro_java_does_lands(decimal):
    if decimal["type"] != "string":
        [rec] = fastavro.reader(io.BytesIO(_price_file(decimal)))
        assert isinstance(rec["price"], Decimal)
    writers, dead = _resolved(_price_schema(decimal))
    assert dead == {} and writers == {7: _price_schema(decimal)}


def test_an_invalid_decimal_wider_than_spark_holds_is_dead_letters_not_a_failed_hour():
    """decimal(40, 50) is invalid (scale above precision) before it is too wide: Avro's Java parser
    reads its bytes, so only fastavro's refusal is left, as for any invalid decimal."""
    writers, dead = _resolved(_price_schema(_bytes_dec(precision=40, scale=50)))
    assert writers == {} and "scale 50 is greater than its precision 40" in dead[7]
    with pytest.raises(LandingError, match="decimal\\(40, 2\\)"):
        _resolved(_price_schema(_bytes_dec(precision=40, scale=2)))
