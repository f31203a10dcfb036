"""One answer to "can a retry help?": each error class says transient or terminal, one
function maps any error to a Dagster Failure, and a load that failed for good is not asked
for again by the sensor until its done file changes (no stack: toy assets, a local root)."""

from __future__ import annotations

import ast
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka.schema_registry.common._httpx_compat import httpx  # the client the registry uses
from dagster import AssetKey, DagsterInstance, Failure, materialize
from google.api_core import exceptions as gexc

import kafka_landing
from kafka_landing.avro_files import AvroFileError
from kafka_landing.avro_landing.avro_schemas import SchemaError
from kafka_landing.avro_landing.framing import FramingError
from kafka_landing.avro_landing.registry_answers import answer_error, unreachable_error
from kafka_landing.avro_landing.write import NothingWritten
from kafka_landing.config import TopicConfigError
from kafka_landing.errors import (
    DeadLetterLimitExceeded,
    KafkaLandingError,
    LandingError,
    ServiceUnavailable,
    is_transient,
)
from kafka_landing.handoff.markers import Marks, given_up, given_up_why, read_marker, refusal
from kafka_landing.hours import failure, run_hours
from kafka_landing.kafka_slices.kafka_log import KafkaUnavailable
from kafka_landing.kafka_slices.plan import (
    FutureTimestampError,
    HourNotClosedError,
    LogRewoundError,
    PlanningError,
    RetentionGapError,
    UnknownTopicError,
)
from kafka_landing.naming import ONE_HOUR, NameError_, floor_hour, hour_key
from kafka_landing.store.base import LockTakenOver
from kafka_landing.store.gcs import LockLost, LockTimeout, WriteContended
from kafka_landing.handoff.manifests import DoneFileMismatch
from kafka_landing.warehouse.load import LoadError, LoadResult, Warehouse, load_done_file
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.sensor_ticks import daemon_tick, publish_hour

TERMINAL = [LandingError, DeadLetterLimitExceeded, LoadError, IncompatibleSchemaError, DoneFileMismatch,
            TopicConfigError, SchemaError, FramingError, AvroFileError, NameError_, NothingWritten, PlanningError,
            HourNotClosedError, UnknownTopicError, RetentionGapError, LogRewoundError, FutureTimestampError,
            LockTakenOver]
TRANSIENT = [ServiceUnavailable, KafkaUnavailable, LockLost, LockTimeout, WriteContended]


@pytest.mark.parametrize("cls", TERMINAL, ids=lambda c: c.__name__)
def test_what_the_data_or_the_config_says_is_terminal(cls):
    exc = cls("x")
    assert isinstance(exc, KafkaLandingError) and not is_transient(exc)
    assert failure(exc).allow_retries is False


@pytest.mark.parametrize("cls", TRANSIENT, ids=lambda c: c.__name__)
def test_a_service_briefly_away_is_transient(cls):
    exc = cls("x")
    assert isinstance(exc, KafkaLandingError) and is_transient(exc)
    assert failure(exc).allow_retries is True


def test_an_error_wrapping_a_service_answer_says_which_it_is_at_the_raise_site():
    assert is_transient(LoadError("BigQuery 503", transient=True))
    assert not is_transient(KafkaUnavailable("not a retriable Kafka error", transient=False))


def test_an_error_says_at_its_raise_site_that_its_message_already_says_nothing_was_loaded():
    """`nothing_loaded`: the message already says nothing was loaded and what to do next, so the
    asset adds nothing; a caller reads the attribute, never the words."""
    assert KafkaLandingError("x").nothing_loaded is False and LoadError("x").nothing_loaded is False
    said = LoadError("x. Nothing was loaded: do y", nothing_loaded=True, transient=True)
    assert said.nothing_loaded is True and said.transient is True


@pytest.mark.parametrize("status,transient", [(500, True), (503, True), (429, True), (404, False), (401, False),
                                              (422, False), (None, False)])
def test_registry_answers_are_transient_only_when_they_say_not_now(status, transient):
    assert answer_error("http://r:8081", 7, status, None, "m").transient is transient
    assert unreachable_error("http://r:8081", 7, OSError("refused")).transient


@pytest.mark.parametrize("exc,transient", [
    (gexc.ServiceUnavailable("down"), True), (gexc.InternalServerError("oops"), True),
    (gexc.TooManyRequests("slow down"), True), (gexc.RetryError("deadline", None), True),
    (gexc.Forbidden("slow down", errors=[{"reason": "rateLimitExceeded"}]), True),
    (gexc.Forbidden("quota", errors=[{"reason": "quotaExceeded"}]), False), (gexc.BadRequest("invalid"), False), (gexc.Forbidden("no"), False),
    (httpx.ConnectError("refused"), True), (ConnectionRefusedError(), True), (TimeoutError(), True),
    (ValueError("a bug"), False), (KeyError("a bug"), False),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_client_library_errors_are_transient_only_for_no_answer_or_not_now(exc, transient):
    assert is_transient(exc) is transient


def test_the_iceberg_catalogs_database_busy_or_away_is_transient_a_wrong_statement_is_not():
    import sqlite3

    from sqlalchemy import create_engine, text
    from sqlalchemy import exc as sa

    locked = sa.OperationalError("UPDATE iceberg_tables ...", {}, sqlite3.OperationalError("database is locked"))
    assert is_transient(locked) and is_transient(sa.DisconnectionError("gone"))
    with create_engine("sqlite://").connect() as conn, pytest.raises(sa.OperationalError) as wrong:
        conn.execute(text("select * from no_such_table"))  # SQLite's OperationalError too, but terminal
    assert not is_transient(wrong.value)


def _connect_errors():
    from grpc import StatusCode
    from pyspark.errors import PySparkAssertionError, PySparkRuntimeError
    from pyspark.errors.exceptions.connect import SparkConnectException, SparkConnectGrpcException

    def grpc(condition: str) -> Exception:
        return SparkConnectGrpcException(f"[{condition}] ...", errorClass=condition, messageParameters={})

    return [
        # The Spark Connect server restarted under the session (pyspark client/core.py): reopen and retry.
        (PySparkAssertionError("Received incorrect server side session identifier for request. Please create a new "
                               "Spark Session to reconnect. (a != b)"), True),
        (grpc("INVALID_HANDLE.SESSION_CHANGED"), True), (grpc("INVALID_HANDLE.OPERATION_NOT_FOUND"), True),
        (grpc("INVALID_HANDLE.SESSION_NOT_FOUND"), True),
        (SparkConnectException(errorClass="NO_ACTIVE_SESSION", messageParameters={}), True),  # the client it closed
        # The same, found while a query's results stream back (a collect): some had arrived (client/reattach.py).
        (PySparkRuntimeError(errorClass="RESPONSE_ALREADY_RECEIVED",
                             messageParameters={"error_type": "INVALID_HANDLE.SESSION_NOT_FOUND"}), True),
        (PySparkRuntimeError(errorClass="RESPONSE_ALREADY_RECEIVED",
                             messageParameters={"error_type": "INVALID_HANDLE.OPERATION_NOT_FOUND"}), True),
        # The client's retries ran out on a server away (pyspark 4.2 raises the last answer).
        (SparkConnectGrpcException("failed to connect to all addresses", grpc_status_code=StatusCode.UNAVAILABLE),
         True),
        # What the engine says of the work itself is terminal.
        (grpc("UNRESOLVED_COLUMN.WITH_SUGGESTION"), False), (PySparkAssertionError("a bug of ours"), False),
    ]


@pytest.mark.parametrize("exc,transient", _connect_errors(), ids=lambda v: str(v)[:40] if isinstance(v, BaseException)
                         else str(v))
def test_a_spark_connect_server_that_restarted_or_stayed_away_is_transient_nothing_else_of_the_engine(exc, transient):
    """Review R6: a restart (a deploy, an out-of-memory) fails in-flight work; the session is
    reopened and the hour tried again, never refused for good."""
    assert is_transient(exc) is transient


# The direct operator's no-progress failure (jvm/splice DirectLanding) as Spark Connect raised it
# (integration/test_transactions.py), the Java message unchanged inside the job's failure.
STALLED = ("Job aborted due to stage failure: Task 0 in stage 3015.0 failed 1 times, most recent failure: Lost task "
           "0.0 in stage 3015.0 (TID 3728) (192.0.2.2 executor driver): java.lang.IllegalStateException: web "
           "partition 0 offsets 0..2: Kafka gave no record past offset 1 for 120 s (reading up to 2). Nothing was "
           "published: check the broker and its open transactions, then land the hour again\n\tat "
           "kafkalanding.splice.DirectLanding$RangeLanding.land(DirectLanding.java:397)")


def test_a_landing_task_kafka_gave_no_record_for_its_read_stall_is_transient_whichever_engine_raised_it():
    """A stalled broker, or a transaction left open, gives a landing task nothing for the topic's
    read_stall_seconds: the same hour may read a moment later, so the step tries it again. It was
    terminal, waiting for a person to re-land it."""
    from grpc import StatusCode
    from pyspark.errors.exceptions.connect import SparkException

    class Py4JJavaError(Exception):  # a classic session's, which pyspark leaves unconverted
        __module__ = "py4j.protocol"

    for exc in (SparkException(STALLED, grpc_status_code=StatusCode.INTERNAL),
                Py4JJavaError(f"An error occurred while calling o95.collectToPython.\n: "
                              f"org.apache.spark.SparkException: {STALLED}")):
        assert is_transient(exc), type(exc)
        assert failure(exc).allow_retries is True
    other = SparkException(STALLED.replace("Kafka gave no record past offset 1 for 120 s", "a bug of ours"),
                           grpc_status_code=StatusCode.INTERNAL)
    assert not is_transient(other), "any other failure of a task stays terminal"


def test_every_failure_in_the_package_goes_through_the_one_mapping():
    """A `Failure(...)` built anywhere else could say the wrong thing about retrying."""
    calls = []
    for path in Path(kafka_landing.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in ("Failure", "RetryRequested"):
                    calls.append(f"{path.name}:{node.lineno}")
    assert len(calls) == 1 and calls[0].startswith("hours.py:"), calls


# --- in the step: a terminal failure is tried once ------------------------------------------

hourly_start = "2026-01-01-00:00"


def _asset(calls, exc):
    from dagster import HourlyPartitionsDefinition, asset

    @asset(partitions_def=HourlyPartitionsDefinition(start_date=hourly_start, timezone="UTC"))
    def loads(context):
        def one_hour(k):
            calls.append(k)
            raise exc
        return run_hours(context, AssetKey("loads"), one_hour)

    return loads


def test_a_load_refused_for_its_schema_is_tried_once_and_says_so_without_a_traceback():
    calls = []
    with DagsterInstance.ephemeral() as instance:
        result = materialize([_asset(calls, IncompatibleSchemaError("field 'x' changed type"))], instance=instance,
                             partition_key=hourly_start, raise_on_error=False)
    assert not result.success and calls == [hourly_start]
    error = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error
    assert "field 'x' changed type" in error.message and "attempt" not in error.message


def test_a_transient_package_error_is_tried_again_in_the_step():
    from kafka_landing.hours import IN_STEP_ATTEMPTS

    calls = []
    with DagsterInstance.ephemeral() as instance:
        result = materialize([_asset(calls, LoadError("BigQuery 503", transient=True))], instance=instance,
                             partition_key=hourly_start, raise_on_error=False)
    assert not result.success and calls == [hourly_start] * IN_STEP_ATTEMPTS


# --- the sensor: a refused load waits for new content ----------------------------------------



class _Refusing(Warehouse):
    """A backend whose loads fail with a given error; loaded nothing."""

    kind = "iceberg"

    def __init__(self, exc):
        self.exc = exc

    def load_partition(self, store, done, spark, done_file=None, done_sha256=None, staged=None) -> LoadResult:
        raise self.exc

    def partition_rows(self, dataset, table, partition):
        return None

    def partition_location(self, dataset, table, partition):
        return "nowhere"

    def loaded(self, dataset, table, partition):
        return None

    def loaded_partitions(self, dataset, table):
        return set()

    def check_writable(self):
        pass

    def by_event(self, granularity, field):
        return self


def test_a_load_that_failed_for_good_is_not_requested_again_until_the_done_file_changes(one_table_landing):
    hour = floor_hour(datetime.now(timezone.utc)) - 3 * ONE_HOUR
    rel = publish_hour(one_table_landing, hour, "a1")
    assert len(daemon_tick().run_requests) == 1

    with pytest.raises(IncompatibleSchemaError):
        load_done_file(_Refusing(IncompatibleSchemaError("column x: INTEGER to STRING")), one_table_landing, rel,
                       lambda: None)
    th = _th(rel)
    marker = read_marker(one_table_landing, th)
    refused = refusal(one_table_landing, th, Marks({th.hour: marker["sha256"]}))
    assert refused and "INTEGER to STRING" in refused.why
    tick = daemon_tick()
    # Moved aside for the refusal (the skip message no longer counts refusals apart: its given-up record says why).
    assert tick.run_requests == [] and "1 moved aside this tick" in tick.skip_message
    assert "failed for good" in given_up_why(given_up(one_table_landing, th))
    assert "INTEGER to STRING" in given_up_why(given_up(one_table_landing, th))

    publish_hour(one_table_landing, hour, "a2")  # re-landed: new content
    (again,) = daemon_tick().run_requests
    assert again.partition_key == hour_key(hour)


def test_a_load_that_failed_on_a_service_briefly_away_stays_requested(one_table_landing):
    hour = floor_hour(datetime.now(timezone.utc)) - 3 * ONE_HOUR
    rel = publish_hour(one_table_landing, hour, "a1")
    with pytest.raises(LoadError):
        load_done_file(_Refusing(LoadError("BigQuery 503", transient=True)), one_table_landing, rel, lambda: None)
    th = _th(rel)
    marker = read_marker(one_table_landing, th)
    assert refusal(one_table_landing, th, Marks({th.hour: marker["sha256"]})) is None
    assert len(daemon_tick().run_requests) == 1


def _th(rel):
    from kafka_landing.handoff.markers import parse_done_path

    return parse_done_path(rel)


def test_the_mapping_keeps_a_failure_and_makes_a_bare_description_terminal():
    f = Failure(description="as is", allow_retries=True)
    assert failure(f) is f
    assert failure("plan_backfill: bad topic").allow_retries is False
