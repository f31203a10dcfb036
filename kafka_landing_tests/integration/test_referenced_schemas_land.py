"""Confluent schema references on the real broker, registry (Apicurio's ccompat API) and Spark:
a value schema whose named types are registered under other subjects lands like any other,
and a reference the registry cannot give fails the hour clearly before anything is published."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.errors import LandingError
from kafka_landing.resources import SchemaRegistryResource
from kafka_landing_tests.integration.test_decode import (
    assert_conserved,
    assert_nothing_published,
    avro_body,
    land,
    produce_values,
    topic_cfg,
)

COUNTRY = {"type": "enum", "name": "Country", "namespace": "com.acme.geo", "symbols": ["FR", "DE", "US"]}
ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme", "fields": [
    {"name": "street", "type": "string"},
    {"name": "zip", "type": ["null", "string"], "default": None},
    {"name": "country", "type": "com.acme.geo.Country"},  # a reference of a reference
]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "kl.test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "home", "type": "com.acme.Address"},
    {"name": "work", "type": ["null", "com.acme.Address"], "default": None},  # the same type again, by name
    {"name": "previous", "type": {"type": "array", "items": "com.acme.Address"}},
    {"name": "born_in", "type": "com.acme.geo.Country"},
]}
# What the producer's serializer writes with: the same schema, every type inline (written by hand).
CUSTOMER_WHOLE = {**CUSTOMER, "fields": [
    CUSTOMER["fields"][0],
    {"name": "home", "type": {**ADDRESS, "fields": [*ADDRESS["fields"][:2], {"name": "country", "type": COUNTRY}]}},
    *CUSTOMER["fields"][2:],
]}


@pytest.fixture(scope="module")
def sr(registry_url) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url})


def register_with_references(sr: SchemaRegistryClient, topic: str) -> int:
    """Country under `<topic>-country`, Address (referencing it) under `<topic>-address`, and the
    value schema referencing both under `<topic>-value`: its schema id."""
    sr.register_schema(f"{topic}-country", Schema(json.dumps(COUNTRY), "AVRO"))
    country = sr.get_latest_version(f"{topic}-country").version
    sr.register_schema(f"{topic}-address", Schema(json.dumps(ADDRESS), "AVRO", references=[
        SchemaReference("com.acme.geo.Country", f"{topic}-country", country)]))
    address = sr.get_latest_version(f"{topic}-address").version
    return sr.register_schema(f"{topic}-value", Schema(json.dumps(CUSTOMER), "AVRO", references=[
        SchemaReference("com.acme.Address", f"{topic}-address", address),
        SchemaReference("com.acme.geo.Country", f"{topic}-country", country)]))


def customers() -> list[dict]:
    def address(i: int, country: str = "FR") -> dict:
        return {"street": f"{i} rue de la Paix", "zip": None if i % 2 else f"750{i:02d}", "country": country}

    return [
        {"id": 1, "home": address(1), "work": None, "previous": [], "born_in": "FR"},
        {"id": 2, "home": address(2, "DE"), "work": address(3, "US"), "previous": [address(4), address(5, "DE")],
         "born_in": "US"},
        {"id": 3, "home": address(6, "US"), "work": address(6, "US"), "previous": [address(7)], "born_in": "DE"},
    ]


def test_a_schema_with_references_lands_every_field_and_no_dead_letter(
        make_topic, send, sr, registry, kafka, spark, store):
    topic = make_topic()
    sid = register_with_references(sr, topic)
    assert sr.get_schema(sid).references, "the registry keeps the references (Apicurio's ccompat API does)"
    rows = customers()
    produce_values(send, topic, [frame(sid, avro_body(CUSTOMER_WHOLE, r)) for r in rows])
    cfg = topic_cfg(topic)
    plan, result = land(spark, store, kafka, cfg, schema_fetcher(registry))
    landed, dead = assert_conserved(store, plan, result)
    assert dead == {} and result.dead_letters.rows == 0
    assert result.done["t"].schema_ids == (sid,)
    fields = [f["name"] for f in CUSTOMER["fields"]]
    assert [{k: landed[o][k] for k in fields} for o in sorted(landed)] == rows
    assert landed and all(landed[o]["_kafka_topic"] == topic for o in landed)


class ReferencingRegistry:
    """A real HTTP server answering like a Confluent registry for one schema id whose reference
    lookup gets `answer` (status, body): Apicurio cannot be made to lose a referenced version
    (it refuses to delete one, and fails the schema id itself when a reference dangles)."""

    def __init__(self, schema_id: int, answer: tuple[int, dict]):
        schema = {"schema": json.dumps(CUSTOMER), "schemaType": "AVRO", "references": [
            {"name": "com.acme.Address", "subject": "shared-address", "version": 3}]}
        self.asked: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                stub.asked.append(self.path)
                status, body = (200, schema) if self.path.startswith(f"/schemas/ids/{schema_id}") else answer
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("answer, expected, transient", [
    ((404, {"error_code": 40402, "message": "Version 3 not found."}),
     r"schema id {sid} cannot be landed: it references type 'com.acme.Address' \(subject 'shared-address' version 3\), "
     r"which the schema registry says does not exist.*restore that subject version", False),
    ((404, {"error_code": 40401, "message": "Subject 'shared-address' not found."}),
     r"schema id {sid} cannot be landed: it references type 'com.acme.Address'", False),
    ((500, {"error_code": 50001, "message": "Error in the backend datastore"}),
     r"answered HTTP 500, error code 50001.*subject 'shared-address' version 3.*schema id {sid}", True),
])
def test_a_reference_the_registry_cannot_give_fails_the_hour_before_publishing(
        answer, expected, transient, make_topic, send, kafka, spark, store):
    topic = make_topic()
    sid = 4242
    produce_values(send, topic, [frame(sid, avro_body(CUSTOMER_WHOLE, customers()[0]))])
    stub = ReferencingRegistry(sid, answer)
    cfg = topic_cfg(topic)
    try:
        with pytest.raises(LandingError, match=expected.format(sid=sid)) as err:
            land(spark, store, kafka, cfg, schema_fetcher(SchemaRegistryResource(url=stub.url)))
    finally:
        stub.close()
    assert getattr(err.value.__cause__, "transient", False) is transient
    assert any(p.startswith("/subjects/shared-address/versions/3") for p in stub.asked), stub.asked
    assert_nothing_published(store, cfg)


def test_each_referenced_version_is_asked_once_per_run(sr, registry, make_topic):
    topic = make_topic()
    first = register_with_references(sr, topic)
    second = sr.register_schema(f"{topic}-value", Schema(json.dumps(
        {**CUSTOMER, "fields": [*CUSTOMER["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}),
        "AVRO", references=sr.get_schema(first).references))
    fetch = schema_fetcher(registry)
    asked: list[tuple] = []
    client_get_version = SchemaRegistryClient.get_version

    def counting(self, subject, version="latest", *a, **kw):
        asked.append((subject, version))
        return client_get_version(self, subject, version, *a, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(SchemaRegistryClient, "get_version", counting)
    try:
        texts = [json.loads(fetch(first)), json.loads(fetch(second)), json.loads(fetch(first))]
    finally:
        mp.undo()
    assert sorted(asked) == sorted({(f"{topic}-address", 1), (f"{topic}-country", 1)}), asked
    assert texts[0]["fields"][1]["type"]["name"] == "Address" and texts[1]["fields"][-1]["name"] == "note"
