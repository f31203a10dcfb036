"""The registry, before and while a run decodes: is it there (with the landing root), what does
each schema id the records carry mean, and which ids are the records likely to carry.

Every answer is mapped in `registry_answers`: a writer schema, a DeadSchema whose records
become dead letters, or a RegistryError (transient or not) that fails the hours. No Dagster:
the registry is any object with `client()` and `url` (resources.SchemaRegistryResource)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError, is_transient, transient_status
from kafka_landing.handoff.manifests import DoneFileError, read_done_file_or_none
from kafka_landing.naming import Hour, done_file_path

if TYPE_CHECKING:  # the resource is Dagster's; this module only calls it
    from kafka_landing.resources import SchemaRegistryResource


def preflight(store, registry: SchemaRegistryResource) -> None:
    """The landing root can be written and the registry answers, or a LandingError naming which one,
    where, and what to check: a run must not read a slice from Kafka to find that out."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from kafka_landing.avro_landing import registry_answers as answers

    try:
        store.check_writable()
    except OSError as exc:
        raise LandingError(f"landing root {store.root} cannot be written ({exc.strerror or exc}): check that "
                           "it exists, has space and that this process may write there (KAFKA_LANDING_ROOT). "
                           "Nothing was read or published.", transient=is_transient(exc)) from None
    where = answers.redact_url(registry.url)
    try:
        registry.client().get_subjects()
    except httpx.TransportError as exc:
        raise LandingError(
            f"schema registry {where} could not be reached ({type(exc).__name__}: "
            f"{answers.scrub(str(exc), registry.url)[:300] or 'no detail'}): check that it is running and reachable "
            "from here, and SCHEMA_REGISTRY_URL. Nothing was read or published.", transient=True) from None
    except SchemaRegistryError as exc:
        if exc.http_status_code in (401, 403) or (exc.http_status_code or 0) >= 500:
            raise LandingError(
                f"schema registry {where} answered HTTP {exc.http_status_code} to a list of its subjects: "
                + ("check the registry credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO)"
                   if exc.http_status_code in (401, 403) else "check its health and logs")
                + ". Nothing was read or published.",
                # 401/403 stay wrong until someone fixes the credentials; a 5xx may pass
                transient=transient_status(exc.http_status_code)) from None
        # Other answers (a registry that does not list subjects) are settled per schema id later.


def schema_fetcher(registry: SchemaRegistryResource):
    """Writer schemas by id, each asked once per run: the Avro schema text, or a DeadSchema (an id
    the registry says it does not have, or a PROTOBUF or JSON schema) whose records become dead
    letters. Any other answer, or none, raises RegistryError: it says nothing about the records,
    so the hour fails rather than turning good records into dead letters. A schema with Confluent
    schema references comes self-contained, each referenced (subject, version) asked once per run
    (soft-deleted versions too, as the registry's own clients do); one the registry says does not
    exist, or a cycle of them, makes the schema unlandable: a RegistryError that is not transient."""
    client, cache, referenced = registry.client(), {}, {}

    def fetch(schema_id: int):
        if schema_id not in cache:
            cache[schema_id] = _writer_schema(client, registry.url, schema_id, referenced)
        return cache[schema_id]

    return fetch


def _writer_schema(client, url: str, schema_id: int, referenced: dict):
    """The registry's answer for one schema id, as `schema_fetcher` returns it; `referenced`: the
    run's referenced (subject, version) already asked for."""
    from confluent_kafka.schema_registry.common._httpx_compat import (
        httpx,  # the HTTP client it uses (httpx2 or httpx)
    )
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from kafka_landing.avro_landing import registry_answers as answers
    from kafka_landing.avro_landing import schema_references

    try:
        schema = client.get_schema(schema_id)
    except SchemaRegistryError as exc:
        if not answers.is_schema_not_found(exc.http_status_code, exc.error_code):
            raise answers.answer_error(url, schema_id, exc.http_status_code, exc.error_code,
                                       exc.error_message) from None
        return answers.DeadSchema(answers.UNKNOWN_SCHEMA_ID)
    except httpx.TransportError as exc:  # refused, timed out, DNS, TLS
        raise answers.unreachable_error(url, schema_id, exc) from None
    except Exception as exc:  # noqa: BLE001 - e.g. a 200 that is not a registry's JSON
        raise answers.answer_error(url, schema_id, None, None,
                                   f"not a schema registry's answer ({type(exc).__name__}: {exc})") from None
    kind = (schema.schema_type or "AVRO").upper()
    if kind != "AVRO":
        return answers.DeadSchema(answers.not_avro_reason(schema_id, kind))
    try:
        return schema_references.self_contained(schema.schema_str, schema.references,
                                                _reference_fetcher(client, url, schema_id, referenced), schema_id)
    except schema_references.SchemaReferenceError as exc:  # unlandable, as resolve_schemas says
        raise answers.RegistryError(
            f"{exc}. Nothing of the hour was published; re-landing it fails the same way while it "
            f"holds records of schema id {schema_id}.", transient=False) from None


def _reference_fetcher(client, url: str, schema_id: int, referenced: dict):
    """get(subject, version): a reference of schema id `schema_id`'s schema, as (schema text,
    its own references), or None if the registry says it does not exist; asked once per run."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from kafka_landing.avro_landing import registry_answers as answers

    def get(subject: str, version: int):
        if (subject, version) not in referenced:
            what = f"subject {subject!r} version {version}, a reference of its schema"
            try:
                found = client.get_version(subject, version, deleted=True)
            except SchemaRegistryError as exc:
                # 40401, 40402: the registry says the subject, or its version, does not exist
                if exc.http_status_code != 404 or exc.error_code not in (40401, 40402):
                    raise answers.answer_error(url, schema_id, exc.http_status_code, exc.error_code,
                                               f"{what}: {exc.error_message}") from None
                referenced[subject, version] = None
            except httpx.TransportError as exc:  # refused, timed out, DNS, TLS
                raise answers.unreachable_error(url, schema_id, exc) from None
            except Exception as exc:  # noqa: BLE001 - e.g. a 200 that is not a registry's JSON
                raise answers.answer_error(url, schema_id, None, None,
                                           f"{what}: not a schema registry's answer ({type(exc).__name__}: {exc})"
                                           ) from None
            else:
                referenced[subject, version] = (found.schema.schema_str, found.schema.references or ())
        return referenced[subject, version]

    return get


def likely_schema_ids(store, registry: SchemaRegistryResource, cfg: TopicConfig, first_hour: Hour) -> tuple[int, ...]:
    """The schema ids the hours' records most likely carry, best first: the registry's latest for
    `<topic>-value`, then those of the hour before the run. Only a guess (see job.HoursToLand): any
    answer that is not one is ignored, and so is a done file before that cannot be trusted (its
    own load says why)."""
    ids: list[int] = []
    try:
        ids.append(int(registry.client().get_latest_version(f"{cfg.topic}-value").schema_id))
    except Exception:  # noqa: BLE001 - another subject naming, or no registry answer: no guess from it
        pass
    for table in cfg.tables:
        try:
            before = read_done_file_or_none(store, done_file_path(cfg.dataset, table, first_hour.plus(-1)))
        except DoneFileError as exc:
            if exc.transient:
                raise
            continue
        ids += sorted((i for i in before[0].schema_ids if isinstance(i, int)), reverse=True) if before else []
    return tuple(dict.fromkeys(ids))
