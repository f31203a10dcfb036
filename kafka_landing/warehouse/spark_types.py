"""One walk over two Spark types side by side, for every rule that compares a table's type with
another: the merge of `schema_evolution`, the fields a merge gained, Iceberg's rewrite decision and
its type changes, and the expressions that conform rows to a table (`iceberg.files`). Each names
only what it does to a pair of nodes, as `avro_types.py` does for Avro. Types are Spark's JSON
(`StructType.jsonValue()`): a primitive is its name, a struct, array or map a dict. Pure.

A path is a tuple of steps from the root: a struct field's name, or ELEMENT, KEY and VALUE (an
array's items, a map's keys and values), which no Avro name can be.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ELEMENT, KEY, VALUE = "[]", "{key}", "{}"  # the steps into an array's items and a map's keys and values
Path = tuple[str, ...]
Node = Callable[[Path, Any, Any, dict], Any]  # (path, old, new, what it gave their children) -> what it gives


CONTAINERS = ("struct", "array", "map")


def kind(t) -> str | None:
    """"struct", "array" or "map" for a type that holds others; None for any other (or no type)."""
    return t["type"] if isinstance(t, dict) and t.get("type") in CONTAINERS else None


def zip_types(old, new, node: Node, path: Path = ()):
    """`node(path, old, new, inner)` for the pair of types and, first, for every pair inside them:
    `inner` maps each step to what `node` gave for that child. A struct's children are its fields
    by name, `old`'s in their order then those only `new` has, the side without one None; an
    array's its ELEMENT; a map's its KEY and VALUE. A primitive, a side None, or two sides of
    different kinds have none (`inner` is empty): `node` decides what that means."""
    inner = {}
    if kind(old) is not None and kind(old) == kind(new):
        for step, a, b in _children(old, new):
            inner[step] = zip_types(a, b, node, (*path, step))
    return node(path, old, new, inner)


def _children(old: dict, new: dict):
    if kind(old) == "struct":
        theirs = {f["name"]: f["type"] for f in new["fields"]}
        mine = {f["name"]: f["type"] for f in old["fields"]}
        yield from ((name, t, theirs.get(name)) for name, t in mine.items())
        yield from ((name, None, t) for name, t in theirs.items() if name not in mine)
    elif kind(old) == "array":
        yield ELEMENT, old["elementType"], new["elementType"]
    else:
        yield KEY, old["keyType"], new["keyType"]
        yield VALUE, old["valueType"], new["valueType"]


def dotted(path: Path) -> str:
    """A path as messages name a field: a.b, a[] (its items), a{} (a map's values), a{key}."""
    out = ""
    for step in path:
        out += step if step in (ELEMENT, KEY, VALUE) else (f"{out and '.'}{step}")
    return out


def iceberg_path(path: Path) -> Path:
    """A path as Iceberg names nested fields: element, key, value."""
    return tuple({ELEMENT: "element", KEY: "key", VALUE: "value"}.get(step, step) for step in path)
