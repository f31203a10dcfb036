"""The one walk over two Spark types (`spark_types.zip_types`): every pair of nodes once, children
first, a struct's fields by name (the old side's order, then the new side's own), the path of each;
and the two ways a path is written, in messages and in Iceberg."""

from __future__ import annotations

from kafka_landing.warehouse.spark_types import ELEMENT, KEY, VALUE, dotted, iceberg_path, zip_types


def field(name: str, t) -> dict:
    return {"name": name, "type": t, "nullable": True, "metadata": {}}


OLD = {"type": "struct", "fields": [field("a", "long"), field("b", {"type": "array", "elementType": "integer",
                                                                     "containsNull": True})]}
NEW = {"type": "struct", "fields": [field("c", "string"), field("a", "double"),
                                    field("b", {"type": "array", "elementType": "long", "containsNull": True})]}


def test_every_pair_is_visited_once_children_first_with_its_path():
    seen = []
    zip_types(OLD, NEW, lambda path, old, new, inner: seen.append((path, old, new, sorted(inner))))

    assert seen == [
        (("a",), "long", "double", []),
        (("b", ELEMENT), "integer", "long", []),
        (("b",), OLD["fields"][1]["type"], NEW["fields"][2]["type"], [ELEMENT]),
        (("c",), None, "string", []),  # only the new side has it: no children, whatever its type
        ((), OLD, NEW, ["a", "b", "c"]),
    ]


def test_what_a_node_gives_its_parent_is_its_childrens_inner():
    depth = zip_types(NEW, NEW, lambda path, old, new, inner: 1 + max(inner.values(), default=0))
    assert depth == 3  # the struct, the array, its items


def test_a_map_has_its_keys_and_values_and_two_kinds_that_differ_have_no_children():
    m = {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}
    steps = zip_types(m, m, lambda path, old, new, inner: [path[-1:], *[s for got in inner.values() for s in got]])
    assert steps == [(), (KEY,), (VALUE,)]
    assert zip_types(m, "string", lambda path, old, new, inner: inner) == {}


def test_a_path_reads_as_messages_and_iceberg_name_it():
    path = ("orders", ELEMENT, "tags", VALUE, "x")
    assert dotted(path) == "orders[].tags{}.x" and dotted((KEY,)) == "{key}" and dotted(()) == ""
    assert iceberg_path(path) == ("orders", "element", "tags", "value", "x")
    assert iceberg_path(("m", KEY)) == ("m", "key")
