"""Confluent schema references made into one self-contained Avro schema (schema_references):
each referenced named type defined at its first use, by name afterwards, full names kept."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from kafka_landing.avro_landing.avro_schemas import SchemaError, parse
from kafka_landing.avro_landing.registry_answers import RegistryError
from kafka_landing.avro_landing.schema_references import (
    Reference,
    SchemaReferenceError,
    as_reference,
    self_contained,
)

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme",
           "fields": [{"name": "street", "type": "string"}]}
COUNTRY = {"type": "enum", "name": "Country", "namespace": "com.acme.geo", "symbols": ["FR", "DE"]}


def registry(**subjects):
    """{(subject, 1): (schema text, references)} from subject=(schema, [references])."""
    return {(s.replace("_", "-"), 1): (json.dumps(schema), refs) for s, (schema, refs) in subjects.items()}


def ref(name: str, subject: str, version: int = 1) -> Reference:
    return Reference(name, subject, version)


def record(name: str, fields: list, namespace: str | None = "kl.test") -> dict:
    out = {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}
    if namespace is not None:
        out["namespace"] = namespace
    return out


def resolve(main: dict, refs: list, fetch, schema_id: int = 7) -> dict:
    return json.loads(self_contained(json.dumps(main), refs, fetch, schema_id))


def named_types(schema: dict) -> set[str]:
    """The full names fastavro finds in the schema, given nothing else: it is self-contained."""
    named: dict = {}
    fastavro.parse_schema(schema, named_schemas=named)
    return set(named)


def definitions(node) -> list[str]:
    """The names of every named type defined inline (not used by name), in depth-first order."""
    if isinstance(node, list):
        return [n for b in node for n in definitions(b)]
    if not isinstance(node, dict):
        return []
    kind = node.get("type")
    if kind in ("record", "enum", "fixed"):
        return [node["name"]] + [n for f in node.get("fields", ()) for n in definitions(f["type"])]
    return definitions(node.get("items")) + definitions(node.get("values")) + (
        definitions(kind) if isinstance(kind, (dict, list)) else [])


def round_trip(schema: dict, value: dict) -> dict:
    buf = io.BytesIO()
    parsed = fastavro.parse_schema(schema)
    fastavro.schemaless_writer(buf, parsed, value)
    buf.seek(0)
    return fastavro.schemaless_reader(buf, parsed)


def test_without_references_the_text_is_returned_as_it_is():
    text = '{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}  '
    assert self_contained(text, [], {}) is text
    assert self_contained(text, None, {}) is text


def test_a_referenced_record_is_defined_inline_where_it_is_used():
    main = record("Customer", [("id", "long"), ("home", "com.acme.Address")])
    out = resolve(main, [ref("com.acme.Address", "address")], registry(address=(ADDRESS, [])))
    assert out["fields"][1]["type"] == ADDRESS
    assert out["fields"][0] == {"name": "id", "type": "long"} and out["name"] == "Customer"
    assert named_types(out) == {"kl.test.Customer", "com.acme.Address"}
    parse(json.dumps(out))  # lands like any other writer schema
    assert round_trip(out, {"id": 1, "home": {"street": "x"}}) == {"id": 1, "home": {"street": "x"}}


def test_a_type_referenced_twice_is_defined_once_then_used_by_name():
    main = record("Customer", [("home", "com.acme.Address"), ("work", "com.acme.Address")])
    out = resolve(main, [ref("com.acme.Address", "address")], registry(address=(ADDRESS, [])))
    assert definitions(out) == ["Customer", "Address"]
    assert out["fields"][1]["type"] == "com.acme.Address"
    value = {"home": {"street": "a"}, "work": {"street": "b"}}
    assert round_trip(out, value) == value


def test_a_reference_of_a_reference_is_resolved_and_defined_inside_its_user():
    address = {**ADDRESS, "fields": [*ADDRESS["fields"], {"name": "country", "type": "com.acme.geo.Country"}]}
    main = record("Customer", [("home", "com.acme.Address"), ("born", "com.acme.geo.Country")])
    fetched = registry(address=(address, [ref("com.acme.geo.Country", "country")]), country=(COUNTRY, []))
    out = resolve(main, [ref("com.acme.Address", "address")], fetched)  # Country only through Address
    assert out["fields"][0]["type"]["fields"][1]["type"] == COUNTRY
    assert out["fields"][1]["type"] == "com.acme.geo.Country"
    assert named_types(out) == {"kl.test.Customer", "com.acme.Address", "com.acme.geo.Country"}


def test_a_type_the_main_schema_uses_first_is_taken_out_of_the_referenced_type_that_defines_it():
    address = {**ADDRESS, "fields": [*ADDRESS["fields"],
                                     {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["HOME"]}}]}
    main = record("Customer", [("kind", "com.acme.Kind"), ("home", "com.acme.Address")])
    out = resolve(main, [ref("com.acme.Address", "address")], registry(address=(address, [])))
    assert out["fields"][0]["type"] == {"type": "enum", "name": "Kind", "symbols": ["HOME"], "namespace": "com.acme"}
    assert out["fields"][1]["type"]["fields"][1]["type"] == "com.acme.Kind"
    assert named_types(out) == {"kl.test.Customer", "com.acme.Address", "com.acme.Kind"}


def test_namespaces_keep_every_full_name_where_the_type_lands():
    # Short names resolve in the enclosing namespace first, then in the null namespace (Avro's rule).
    plain = {"type": "record", "name": "Plain", "fields": [{"name": "p", "type": "int"}]}  # null namespace
    local = {"type": "record", "name": "Local", "namespace": "kl.test", "fields": [{"name": "l", "type": "int"}]}
    dotted = {"type": "fixed", "name": "org.x.Hash", "size": 4}
    point = {"type": "record", "name": "Point", "namespace": "geo",
             "fields": [{"name": "hash", "type": "org.x.Hash"}, {"name": "inner", "type": "kl.test.Local"}]}
    main = record("Customer", [("a", "Plain"), ("b", "Local"), ("c", "geo.Point")])
    fetched = registry(plain=(plain, []), local=(local, []), hash=(dotted, []),
                       point=(point, [ref("org.x.Hash", "hash"), ref("kl.test.Local", "local")]))
    out = resolve(main, [ref("Plain", "plain"), ref("kl.test.Local", "local"), ref("geo.Point", "point")], fetched)
    a, b, c = (f["type"] for f in out["fields"])
    assert a == {**plain, "namespace": ""}, "a null-namespace type keeps its name inside kl.test"
    assert b == local
    assert c["fields"][0]["type"] == dotted and c["fields"][1]["type"] == "kl.test.Local"
    assert named_types(out) == {"kl.test.Customer", "Plain", "kl.test.Local", "geo.Point", "org.x.Hash"}


def test_a_short_name_means_the_referenced_type_of_the_enclosing_namespace():
    mine = {"type": "record", "name": "Address", "namespace": "kl.test", "fields": [{"name": "mine", "type": "int"}]}
    other = {"type": "record", "name": "Address", "fields": [{"name": "other", "type": "int"}]}
    main = record("Customer", [("a", "Address")])
    out = resolve(main, [ref("Address", "other"), ref("kl.test.Address", "mine")],
                  registry(other=(other, []), mine=(mine, [])))
    assert out["fields"][0]["type"] == mine
    # Not in the enclosing namespace: the null namespace's (Avro Java's rule, which Spark follows)
    out = resolve(main, [ref("Address", "other")], registry(other=(other, [])))
    assert out["fields"][0]["type"] == {**other, "namespace": ""}


def test_arrays_maps_unions_and_object_uses_of_referenced_types():
    main = record("Customer", [
        ("maybe", ["null", "com.acme.Address"]),
        ("many", {"type": "array", "items": "com.acme.Address"}),
        ("by_name", {"type": "map", "values": "com.acme.geo.Country"}),
        ("once_more", {"type": "com.acme.geo.Country"}),
    ])
    out = resolve(main, [ref("com.acme.Address", "address"), ref("com.acme.geo.Country", "country")],
                  registry(address=(ADDRESS, []), country=(COUNTRY, [])))
    maybe, many, by_name, once_more = (f["type"] for f in out["fields"])
    assert maybe == ["null", ADDRESS]
    assert many == {"type": "array", "items": "com.acme.Address"}
    assert by_name == {"type": "map", "values": COUNTRY}
    assert once_more == "com.acme.geo.Country"
    value = {"maybe": {"street": "s"}, "many": [{"street": "t"}], "by_name": {"k": "DE"}, "once_more": "FR"}
    assert round_trip(out, value) == value


def test_referenced_types_the_schema_does_not_use_are_left_out():
    main = record("Customer", [("home", "com.acme.Address")])
    out = resolve(main, [ref("com.acme.Address", "address"), ref("com.acme.geo.Country", "country")],
                  registry(address=(ADDRESS, []), country=(COUNTRY, [])))
    assert definitions(out) == ["Customer", "Address"]


def test_a_callable_fetcher_is_asked_once_per_subject_version():
    asked = []
    shared = registry(address=(ADDRESS, []), country=(COUNTRY, []),
                      home=(record("Home", [("a", "com.acme.Address")], "h"), [ref("com.acme.Address", "address")]),
                      work=(record("Work", [("a", "com.acme.Address")], "w"), [ref("com.acme.Address", "address")]))

    def fetch(subject, version):
        asked.append((subject, version))
        return shared[subject, version]

    main = record("Customer", [("h", "h.Home"), ("w", "w.Work")])
    out = resolve(main, [ref("h.Home", "home"), ref("w.Work", "work")], fetch)
    assert sorted(asked) == [("address", 1), ("home", 1), ("work", 1)]
    assert definitions(out) == ["Customer", "Home", "Address", "Work"]


def test_references_may_be_registry_objects_dicts_or_tuples():
    class ClientReference:  # what confluent_kafka's SchemaReference looks like
        name, subject, version = "com.acme.Address", "address", 1

    expected = ref("com.acme.Address", "address")
    assert as_reference(ClientReference()) == expected
    assert as_reference({"name": "com.acme.Address", "subject": "address", "version": 1}) == expected
    assert as_reference(("com.acme.Address", "address", 1)) == expected


def test_a_missing_reference_names_the_schema_id_subject_version_and_type():
    main = record("Customer", [("home", "com.acme.Address")])
    with pytest.raises(SchemaReferenceError) as err:
        resolve(main, [ref("com.acme.Address", "address", 3)], {}, schema_id=41)
    msg = str(err.value)
    assert msg.startswith("the writer schema of schema id 41 cannot be landed: it references type "
                          "'com.acme.Address' (subject 'address' version 3), which the schema registry says "
                          "does not exist"), msg
    assert "restore that subject version" in msg
    assert isinstance(err.value, SchemaError), "a schema that cannot land, like any other"


def test_a_missing_reference_of_a_reference_names_who_references_it():
    address = {**ADDRESS, "fields": [{"name": "country", "type": "com.acme.geo.Country"}]}
    main = record("Customer", [("home", "com.acme.Address")])
    fetched = registry(address=(address, [ref("com.acme.geo.Country", "country", 2)]))
    with pytest.raises(SchemaReferenceError, match=(
            r"schema id 7 cannot be landed: it references type 'com.acme.geo.Country' \(subject 'country' version 2\) "
            r"\(referenced by subject 'address' version 1\), which the schema registry says does not exist")):
        resolve(main, [ref("com.acme.Address", "address")], lambda s, v: fetched.get((s, v)))


def test_a_cycle_of_references_is_an_error_naming_it():
    a = record("A", [("b", "kl.test.B")])
    b = record("B", [("a", ["null", "kl.test.A"])])
    fetched = registry(a=(a, [ref("kl.test.B", "b")]), b=(b, [ref("kl.test.A", "a")]))
    with pytest.raises(SchemaReferenceError, match=(
            r"schema id 9 cannot be landed: its references form a cycle \(subject 'a' version 1 -> "
            r"subject 'b' version 1 -> subject 'a' version 1\)")):
        resolve(record("Main", [("a", "kl.test.A")]), [ref("kl.test.A", "a")], fetched, schema_id=9)


def test_two_definitions_of_one_name_are_an_error():
    other = {**ADDRESS, "fields": [{"name": "city", "type": "string"}]}
    main = record("Customer", [("home", "com.acme.Address")])
    with pytest.raises(SchemaReferenceError, match=r"type 'com.acme.Address' is defined differently by type "
                                                   r"'com.acme.Address' \(subject 'address' version 1\) and by"):
        resolve(main, [ref("com.acme.Address", "address"), ref("com.acme.Address", "address2")],
                registry(address=(ADDRESS, []), address2=(other, [])))
    mine = record("Customer", [("home", "com.acme.Address"), ("x", {**other})])
    with pytest.raises(SchemaReferenceError, match=r"it defines type 'com.acme.Address' itself"):
        resolve(mine, [ref("com.acme.Address", "address")], registry(address=(ADDRESS, [])))


def test_a_referenced_schema_that_is_not_json_is_an_error():
    main = record("Customer", [("home", "com.acme.Address")])
    with pytest.raises(SchemaReferenceError, match=r"its reference type 'com.acme.Address' \(subject 'address' "
                                                   r"version 1\) is not an Avro schema in JSON"):
        resolve(main, [ref("com.acme.Address", "address")], {("address", 1): ("message Address {}", [])})


def test_a_registry_that_cannot_answer_passes_through_untouched():
    boom = RegistryError("schema registry http://r answered HTTP 503", transient=True)

    def fetch(subject, version):
        raise boom

    with pytest.raises(RegistryError) as err:
        resolve(record("Customer", [("home", "com.acme.Address")]), [ref("com.acme.Address", "address")], fetch)
    assert err.value is boom and err.value.transient
