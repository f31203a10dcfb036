"""Every error kafka_landing raises on purpose, and the one answer to "can a retry help?".

Transient: a service briefly away (a broker, the schema registry, the bucket,
BigQuery, a lock's lease lost to a slow renewal, Kafka giving a landing task no record). The same input may pass a
moment later, so a step tries it again after a backoff (`hours.run_hours`), and
Dagster may retry the run (`hours.failure` sets `allow_retries`).
Terminal: everything else (what the data, the config or a warehouse says, a
bug). It fails the same way until its input changes, so it fails fast: never
waited on in a step, never re-requested by the sensor until the done file
changes or a person re-materialises. A write under a lock refused because
another holder took the lock over and has written that object since
(`store.base.LockTakenOver`) is terminal too: the attempt ran past its lease,
the newer holder's work stands, and writing it again would only overwrite it.

`is_transient` decides it, here and nowhere else; `hours.failure` turns any
error into a Dagster `Failure` through it. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

# HTTP answers that say "not now" rather than "no": a timeout, too many requests, a server error.
TRANSIENT_HTTP = frozenset({408, 429, 500, 502, 503, 504})
# Google API error reasons that say "not now" (BigQuery's troubleshooting guide says to retry them;
# it sends rateLimitExceeded as a 403, so the status alone would call it a refusal).
TRANSIENT_REASONS = frozenset({"backendError", "internalError", "rateLimitExceeded", "jobBackendError",
                               "jobInternalError"})


# Google API error reasons that are terminal for a step but heal with time: a quota refills (BigQuery's
# daily quotas "at regular intervals throughout the day"), so the queue asks again after this many seconds.
HEALS_WITH_TIME = {"quotaExceeded": 3600}


class KafkaLandingError(Exception):
    """The root of every error the package raises on purpose. Terminal unless its class (or,
    for an error that wraps a service's answer, the raise site through `transient_status` or
    `is_transient` of the cause) says a service was briefly away.

    `heals_after`: terminal for this step, but the same input may pass after that many seconds
    (a spent quota): not retried in the step, asked for again by the queue then.
    `elsewhere`: the failure is about another unit than the one being loaded (another hour of
    the day, a source file replaced meanwhile): the unit being loaded is not refused for it.
    `nothing_loaded`: the message already says that nothing was loaded and what to do next, so
    the asset that shows it adds nothing (set where it is raised; callers never read the words)."""

    transient: bool = False
    heals_after: float | None = None
    elsewhere: bool = False
    nothing_loaded: bool = False

    def __init__(self, *args, transient: bool | None = None, heals_after: float | None = None,
                 elsewhere: bool | None = None, nothing_loaded: bool | None = None):
        super().__init__(*args)
        if transient is not None:
            self.transient = transient
        if heals_after is not None:
            self.heals_after = heals_after
        if elsewhere is not None:
            self.elsewhere = elsewhere
        if nothing_loaded is not None:
            self.nothing_loaded = nothing_loaded


class ServiceUnavailable(KafkaLandingError):
    """A service did not answer, or answered "not now": the same input may pass later."""

    transient = True


class LandingError(KafkaLandingError, RuntimeError):
    """An hour that could not be landed; nothing of the attempt was published."""


class DeadLetterLimitExceeded(LandingError):
    """More dead letters than the topic's dead_letter_limit allows: the attempt is kept aside, unpublished."""


def transient_status(http_status: int | None) -> bool:
    """An HTTP answer worth asking again (no answer at all is transient too: pass None only for that)."""
    return http_status is None or http_status in TRANSIENT_HTTP


def transient_reason(reason: str | None) -> bool:
    """A Google API error reason (an API answer's, or a failed BigQuery job's errorResult) worth trying again."""
    return reason in TRANSIENT_REASONS


def heals_after(reason: str | None) -> float | None:
    """Seconds after which a failure for this Google API reason may pass (None: it will not by itself)."""
    return HEALS_WITH_TIME.get(reason or "")


def error_reason(exc: BaseException) -> str | None:
    """The reason of a Google API error's first error (`rateLimitExceeded`, `accessDenied`...), if any."""
    errors = getattr(exc, "errors", None) or []
    return errors[0].get("reason") if errors and isinstance(errors[0], dict) else None


def is_transient(exc: BaseException) -> bool:
    """Whether trying the same thing again later can help. The package's own errors say so
    themselves; of the rest, only a client library's "no answer" or "not now" is transient,
    anything else (a bug, a refusal) is terminal."""
    if isinstance(exc, KafkaLandingError):
        return exc.transient
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    code = getattr(exc, "code", None)  # google.api_core's GoogleAPICallError carries the HTTP status
    module = type(exc).__module__ or ""
    if module.startswith("google.api_core"):  # RetryError: the client's own retries ran out of time
        return (isinstance(code, int) and code in TRANSIENT_HTTP) or transient_reason(error_reason(exc)) \
            or type(exc).__name__ == "RetryError"
    if module.startswith(("httpx", "httpcore", "requests.exceptions", "urllib3", "google.auth")):  # httpx2 too
        return type(exc).__name__ in _TRANSPORT_ERRORS
    if module.startswith("pyspark.errors"):
        return spark_server_gone(exc) or kafka_stalled(exc)
    if module.startswith("py4j"):  # a classic session leaves a job's failure as the JVM said it
        return kafka_stalled(exc)
    if module.startswith("sqlalchemy"):  # the Iceberg catalog's database: busy (SQLite's lock) or away
        said = str(getattr(exc, "orig", None) or exc).lower()
        return type(exc).__name__ in _DATABASE_AWAY or (
            type(exc).__name__ in ("OperationalError", "InterfaceError") and any(w in said for w in _DATABASE_BUSY))
    if module.startswith("pyiceberg"):  # an Iceberg REST catalog's answer: 5xx, 429, or a commit lost in flight
        return type(exc).__name__ in _REST_CATALOG_AWAY
    if module.startswith("grpc") and callable(getattr(exc, "code", None)):  # a Spark Connect call's own answer
        return getattr(exc.code(), "name", None) in _TRANSIENT_GRPC
    return False


def spark_server_gone(exc: BaseException) -> bool:
    """A Spark Connect error that says the server, not the work, failed: the client's retries of a
    server away ran out, or the server restarted under the session (its handles are gone; pyspark
    then closes the client, and every later call says NO_ACTIVE_SESSION: a new session works). The
    session must be reopened to go on."""
    name = type(exc).__name__
    # The client's retries ran out on a server away: pyspark 4.2 raises the last answer, a
    # SparkConnectGrpcException of gRPC status UNAVAILABLE (4.0 raised RetriesExceeded).
    if getattr(getattr(exc, "getGrpcStatusCode", lambda: None)(), "name", None) == "UNAVAILABLE":
        return True
    condition = getattr(exc, "getCondition", lambda: None)() or ""
    if condition.startswith("INVALID_HANDLE.") or condition == "NO_ACTIVE_SESSION":
        return True
    # The same, found while a query's results were streaming back (a collect): some had arrived.
    if condition == "RESPONSE_ALREADY_RECEIVED" and "INVALID_HANDLE." in str(exc):
        return True
    return name == "PySparkAssertionError" and "server side session identifier" in str(exc)


# What the direct landing operator (jvm/splice DirectLanding; RangeLanding) says when Kafka gave one of its tasks
# no record for the topic's read_stall_seconds: a broker stalled, or a transaction left open that
# long holding the read_committed end. The same hour may read a moment later.
KAFKA_STALLED = "Kafka gave no record past offset"


def kafka_stalled(exc: BaseException) -> bool:
    """A Spark job that failed because Kafka stalled under a landing task. It reaches Python only
    as the words of a task's failure inside the job's (the Java message is the contract)."""
    return KAFKA_STALLED in str(exc)


# gRPC statuses that mean "no answer" or "not now" (a Spark Connect server restarting or busy).
_TRANSIENT_GRPC = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})


# SQLAlchemy's errors for a database that is unreachable or dropped the connection; an
# OperationalError is one only when it says so (SQLite also reports a syntax error as one).
_DATABASE_AWAY = frozenset({"DisconnectionError", "TimeoutError"})
_DATABASE_BUSY = ("database is locked", "database is busy", "could not connect", "connection refused",
                  "server closed the connection", "connection reset", "timeout", "terminating connection")


# pyiceberg's REST errors for a server away or busy, and for a commit whose answer was lost (the
# commit then looks for its own snapshot first: `commits.Commits.send`). 400, 401, 403 and 404
# are refusals: terminal.
_REST_CATALOG_AWAY = frozenset({"ServerError", "ServiceUnavailableError", "TooManyRequestsError",
                                "CommitStateUnknownException"})
# Client-library exceptions that mean the request got no answer (by name: no import of the clients here).
_TRANSPORT_ERRORS = frozenset({
    "TransportError", "ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout",
    "TimeoutException", "NetworkError", "ReadError", "WriteError", "RemoteProtocolError", "ProtocolError",
    "ConnectionError", "Timeout", "ChunkedEncodingError", "NewConnectionError", "MaxRetryError",
})
