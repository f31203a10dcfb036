"""Confluent schema references: a writer schema that uses named types registered under
other subjects (`references: [{name, subject, version}]`), made into one self-contained
Avro schema, as the registry's own Java client sees it.

Every named type the references define (recursively: references of references) is known
before the writer schema is read; the result defines each one inline at its first use in
Avro's depth-first order, with its namespace made explicit where the place it lands in
would give it another, and uses it by name afterwards. Types the references define but
the schema never uses are left out. A reference the registry says does not exist, a cycle
of references, a referenced schema that is not Avro JSON, or two different definitions of
one name make the schema unlandable: SchemaReferenceError, naming the schema id, the
subject and version, the type and what to do. A registry that cannot answer is the
fetcher's RegistryError, passed through untouched. Pure: no Dagster, no Spark, no HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kafka_landing.avro_landing.avro_schemas import SchemaError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
COMPLEX = NAMED | {"array", "map"}


class SchemaReferenceError(SchemaError):
    """A writer schema whose references cannot be resolved: its records cannot be decoded."""


@dataclass(frozen=True)
class Reference:
    name: str  # the referenced type's full name, as the referencing schema declares it
    subject: str
    version: int

    def __str__(self) -> str:
        return f"type {self.name!r} (subject {self.subject!r} version {self.version})"


# (subject, version) -> (schema text, its own references), or None: the registry says it does not exist.
Fetched = tuple[str, Iterable] | None
Fetch = Callable[[str, int], Fetched] | Mapping[tuple[str, int], tuple[str, Iterable]]


def as_reference(ref) -> Reference:
    """A Reference from a registry client's reference object, a dict or a (name, subject, version) tuple."""
    if isinstance(ref, Reference):
        return ref
    if isinstance(ref, Mapping):
        name, subject, version = ref.get("name"), ref.get("subject"), ref.get("version")
    elif isinstance(ref, tuple):
        name, subject, version = ref
    else:
        name, subject, version = (getattr(ref, a, None) for a in ("name", "subject", "version"))
    return Reference(str(name), str(subject), version)


def self_contained(schema_str: str, references: Iterable, fetch: Fetch, schema_id: int | None = None) -> str:
    """The writer schema with every referenced named type defined inline, as JSON text.
    Without references the text is returned as it is (parse() judges it)."""
    refs = [as_reference(r) for r in references or ()]
    if not refs:
        return schema_str
    try:
        root = json.loads(schema_str)
    except (TypeError, ValueError):
        return schema_str  # parse() says why it is not valid JSON
    what = f"schema id {schema_id}" if schema_id is not None else "the writer schema"
    known = _Known(what, _fetcher(fetch))
    for ref in refs:
        known.load(ref, ())
    return json.dumps(_Writer(known, root).walk(root, ""))


def _fetcher(fetch: Fetch) -> Callable[[str, int], Fetched]:
    if isinstance(fetch, Mapping):
        return lambda subject, version: fetch.get((subject, version))
    return fetch


def _unlandable(what: str, why: str) -> SchemaReferenceError:
    return SchemaReferenceError(f"the writer schema of {what} cannot be landed: {why}")


def _chain(path: tuple[Reference, ...]) -> str:
    """' (referenced by subject 'a' version 1, itself referenced by ...)' for a reference of a reference."""
    if not path:
        return ""
    return " (referenced by " + ", itself referenced by ".join(
        f"subject {r.subject!r} version {r.version}" for r in reversed(path)) + ")"


def _full_name(node: dict, space: str) -> str:
    """The full name of a named type defined by `node` where the enclosing namespace is `space`."""
    name = str(node.get("name"))
    if "." in name:
        return name
    ns = node.get("namespace")
    ns = space if ns is None else str(ns)
    return f"{ns}.{name}" if ns else name


def _namespace_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


@dataclass
class _Definition:
    node: dict
    origin: str  # where it is defined, for messages


class _Known:
    """Every named type the references define, by full name, loaded depth first."""

    def __init__(self, what: str, fetch: Callable[[str, int], Fetched]):
        self.what, self.fetch = what, fetch
        self.types: dict[str, _Definition] = {}
        self.loaded: set[tuple[str, int]] = set()

    def load(self, ref: Reference, path: tuple[Reference, ...]) -> None:
        key = (ref.subject, ref.version)
        if any((r.subject, r.version) == key for r in path):
            cycle = " -> ".join(f"subject {r.subject!r} version {r.version}" for r in (*path, ref))
            raise _unlandable(self.what, (
                f"its references form a cycle ({cycle}), which no schema can be built from; "
                "register the referenced schemas without the cycle and produce with the new schema id"))
        if key in self.loaded:
            return
        answer = self.fetch(ref.subject, ref.version)
        if answer is None:
            raise _unlandable(self.what, (
                f"it references {ref}{_chain(path)}, which the schema registry says does not exist; "
                "its records cannot be decoded without it: restore that subject version in the registry, "
                "then re-land the hour"))
        text, nested = answer
        try:
            doc = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise _unlandable(self.what, (
                f"its reference {ref}{_chain(path)} is not an Avro schema in JSON ({exc}); "
                "a schema can only reference Avro schemas")) from None
        self.loaded.add(key)
        for sub in nested or ():  # a reference's own references are known before it is read
            self.load(as_reference(sub), (*path, ref))
        origin = f"{ref}{_chain(path)}"
        for name, node in _definitions(doc, ""):
            seen = self.types.setdefault(name, _Definition(node, origin))
            if seen.node != node:
                raise _unlandable(self.what, (
                    f"type {name!r} is defined differently by {seen.origin} and by {origin}; "
                    "one name can have one definition: make the references agree"))


def _definitions(node, space: str):
    """(full name, definition) of every named type a schema defines, at any depth."""
    if isinstance(node, list):
        for branch in node:
            yield from _definitions(branch, space)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in NAMED and "name" in node:
            name = _full_name(node, space)
            yield name, node
            if kind in ("record", "error"):
                for f in node.get("fields") or ():
                    if isinstance(f, dict):
                        yield from _definitions(f.get("type"), _namespace_of(name))
        elif kind == "array":
            yield from _definitions(node.get("items"), space)
        elif kind == "map":
            yield from _definitions(node.get("values"), space)
        elif isinstance(kind, (dict, list)):
            yield from _definitions(kind, space)


class _Writer:
    """The writer schema walked depth first, each referenced type defined at its first use."""

    def __init__(self, known: _Known, root):
        self.known = known
        self.defined: dict[str, dict] = {}  # full name -> the definition it was given, in the output
        for name, node in _definitions(root, ""):
            other = known.types.get(name)
            if other is not None and other.node != node:
                raise _unlandable(known.what, (
                    f"it defines type {name!r} itself and {other.origin} defines it differently; "
                    "one name can have one definition: rename one or use the referenced type"))

    def resolve(self, name: str, space: str) -> str | None:
        """The full name a type name means where the enclosing namespace is `space` (Avro Java's
        rule: the enclosing namespace first, then the null namespace), or None if none is known."""
        candidates = [name] if "." in name else ([f"{space}.{name}"] if space else []) + [name]
        return next((c for c in candidates if c in self.defined or c in self.known.types), None)

    def walk(self, node, space: str):
        if isinstance(node, list):
            return [self.walk(b, space) for b in node]
        if isinstance(node, str):
            return self.use(node, space, node)
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in NAMED and "name" in node:
            return self.define(node, _full_name(node, space))
        if kind == "array":
            return {**node, "items": self.walk(node.get("items"), space)}
        if kind == "map":
            return {**node, "values": self.walk(node.get("values"), space)}
        if isinstance(kind, (dict, list)):
            return {**node, "type": self.walk(kind, space)}
        if isinstance(kind, str) and kind not in PRIMITIVES and kind not in COMPLEX:
            # {"type": "com.acme.Address"}: a use by name too, written as a name (not every reader takes this form)
            return node if self.resolve(kind, space) is None else self.use(kind, space, kind)
        return node

    def use(self, name: str, space: str, as_written):
        if name in PRIMITIVES:
            return as_written
        full = self.resolve(name, space)
        if full is None or full in self.defined:
            return as_written  # defined before (so it means the same here), or unknown: Spark will say
        return self.define(self.known.types[full].node, full, inserted_at=space)

    def define(self, node: dict, full: str, inserted_at: str | None = None):
        if full in self.defined:
            return full  # a referenced type defined again inside another referenced type: a use now
        out = dict(node)
        own = _namespace_of(full)
        if inserted_at is not None and "." not in str(node.get("name")) and own != inserted_at:
            out["namespace"] = own  # moved from its own schema: keep its full name where it lands
        self.defined[full] = out
        if node.get("type") in ("record", "error"):
            out["fields"] = [{**f, "type": self.walk(f.get("type"), own)} if isinstance(f, dict) else f
                             for f in node.get("fields") or ()]
        return out
