"""What a schema registry's answer to "the schema of id N" means for landing.

Only the registry's own "schema not found" (Confluent error code 40403, which
Apicurio's ccompat API gives too) makes an id unknown, and its records dead
letters. Any other answer (another 404, such as a wrong URL path or 40401, a
401/403, a 5xx, a timeout, a refused connection) says nothing about the record:
it fails the hour, naming the registry (never its credentials), the schema id
and what to check. A schema of another type (PROTOBUF, JSON) is a dead letter
with its own reason. Pure: no Dagster, no Spark, no HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from kafka_landing.errors import KafkaLandingError, transient_status

SCHEMA_NOT_FOUND = 40403
UNKNOWN_SCHEMA_ID = "unknown schema id"


class RegistryError(KafkaLandingError, RuntimeError):
    """The registry could not say what a schema id is: the hour cannot be landed now.
    Transient when it did not answer or answered "not now" (`errors.transient_status`)."""


@dataclass(frozen=True)
class DeadSchema:
    """A schema id whose records become dead letters with this reason."""

    reason: str


def redact_url(url: str) -> str:
    """The URL (or comma-separated URLs) without user:password, fit for logs and run metadata."""
    return ",".join(_redact_one(u.strip()) for u in url.split(","))


def _redact_one(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparseable registry URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if port is not None:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def scrub(text: str, url: str) -> str:
    """`text` with the password of `url` blanked out (error messages may echo it)."""
    for u in url.split(","):
        try:
            parts = urlsplit(u.strip())
            password = parts.password
        except ValueError:
            continue
        if password:
            text = text.replace(password, "***")
    return text


def not_avro_reason(schema_id: int, schema_type: str) -> str:
    return f"schema id {schema_id} is {schema_type}, not AVRO"


def is_schema_not_found(http_status: int | None, error_code: int | None) -> bool:
    return http_status == 404 and error_code == SCHEMA_NOT_FOUND


def answer_error(url: str, schema_id: int, http_status: int | None, error_code: int | None, message: str | None) -> RegistryError:
    """The failure for any HTTP answer other than 'schema not found', with what to check."""
    where = redact_url(url)
    said = (f"HTTP {http_status}" if http_status is not None else "unexpectedly") + (
        f", error code {error_code}" if error_code not in (None, -1) else "")
    if message:
        said += f": {scrub(message, url)[:300]}"
    if http_status == 404:
        check = ("this is not the registry's 'schema not found' (error code 40403), so the records are not dead "
                 "letters: check that the URL is the registry's Confluent-compatible API root "
                 "(for Apicurio: http://host:port/apis/ccompat/v7)")
    elif http_status in (401, 403):
        check = "check the registry credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO) and their permissions"
    elif http_status is not None and http_status >= 500:
        check = "the registry is failing: check its health and logs, then re-land the hour"
    else:
        check = "check the registry URL and that it speaks the Confluent schema registry API"
    return RegistryError(
        f"schema registry {where} answered {said} for schema id {schema_id}; {check}. "
        "Nothing of this hour was published.",
        transient=http_status is not None and transient_status(http_status),
    )


def unreachable_error(url: str, schema_id: int, exc: BaseException) -> RegistryError:
    """The failure for no answer at all: refused, timed out, DNS, TLS."""
    return RegistryError(
        f"schema registry {redact_url(url)} could not be reached for schema id {schema_id} "
        f"({type(exc).__name__}: {scrub(str(exc), url)[:300] or 'no detail'}); check that it is running and reachable from here, "
        "and SCHEMA_REGISTRY_URL, then re-land the hour. Nothing of this hour was published.",
        transient=True,
    )
