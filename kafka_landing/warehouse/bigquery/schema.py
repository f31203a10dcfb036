"""What one BigQuery load needs so that its Avro files (an hour's, a day's, an event partition's)
land in the table as it is now, whatever changes the producer's schema went through and in
whatever order hours load.

Input: the table's columns (None if the first load creates it) and the writer schema of
each schema id the load's files hold. Output (`plan_load`), or IncompatibleSchemaError naming
the field, the schema ids and what to do:

- `widenings`: top-level columns whose type must widen before the load, by
  `ALTER TABLE t ALTER COLUMN c SET DATA TYPE FLOAT64 | BIGNUMERIC` (INTEGER -> FLOAT
  for int/long -> float/double, NUMERIC -> BIGNUMERIC for a decimal that outgrew
  NUMERIC). BigQuery changes a type only by such a coercion and only of a top-level
  column; a nested or repeated column that would need one is refused.
- `reader`: an Avro reader schema for the load (`reference_file_schema_uri`), or None
  when the hour's one writer schema already gives exactly the columns wanted. Every file
  is read through it by Avro schema resolution, so:
  * a field is the widest type the table and the files need: long when int and long
    meet, double when an integer meets a float or the column is FLOAT, the decimal of
    the largest precision (made BIGNUMERIC-sized when the column is BIGNUMERIC), an
    enum with every file's symbols;
  * a field is nullable (["null", T], default null) when a file lacks it or has it
    nullable, when its column is NULLABLE, or when it is new in an existing table or
    record (a load adds only NULLABLE columns); a REQUIRED column no file of the hour
    has is in it as nullable too: the load relaxes it;
  * what no file has and the table holds as NULLABLE or REPEATED is left out (it stays).
  Named types keep their unqualified names (Avro resolution matches records, enums
  and fixed by them) under a namespace per field path, so no name is defined twice.

Refused, terminal: STRING <-> BYTES (no coercion exists either way), a type change of
a nested or repeated column, changes Avro cannot resolve (a type becoming another
kind, differently named records or enums).

Not one reader, but not refused (`ReaderConflict`): schema ids that give one column
the same BigQuery type through Avro types no single reader schema reads without
changing values: two scales of one decimal (decimal(10,2) -> decimal(12,4), both
NUMERIC), a bytes and a fixed decimal, two units of one timestamp, time or local
timestamp (millis -> micros, both TIMESTAMP). Such files load in one job per group
of schema ids (`reader_groups`), each through its own reader, into one column.

What the design relies on, and where BigQuery documents it:
- "Load Avro data from Cloud Storage": the schema of a multi-file Avro load is
  the alphabetically last file's, "all schemas must be compatible with Avro's
  schema resolution"; and jobs.insert `referenceFileSchemaUri`: "a reference
  file with the reader schema ... enabled for AVRO". So when the hour's files
  do not give exactly the columns wanted, the load names a reader schema: a
  zero-record Avro file written once under the landing root,
  tables/<dataset>/<table>/_reader_schemas/<sha256 of the schema>.avro (never
  a source URI, so never loaded; `reader_schema_uri`). Every file is then read by
  Avro's resolution, which promotes int -> long -> float -> double, fills a field
  a file lacks with the reader's default (null) and reads a [null, T] union of the
  file's T. An explicit `schema` is never sent: whether a load converts a file's
  long into a FLOAT column is not documented, and is not relied on.
- "Modifying table schemas": ALLOW_FIELD_ADDITION adds NULLABLE (or REPEATED)
  columns only, nested ones too; ALLOW_FIELD_RELAXATION makes REQUIRED columns
  NULLABLE; a REQUIRED column absent from the load's schema fails the load
  ("Field x is missing in new schema"). So a field new to an existing table or
  record, and a REQUIRED column the hour lacks, are nullable in the reader.
- The DDL reference (ALTER COLUMN SET DATA TYPE: a coercion to a less restrictive
  type, of a top-level column; DDL is free) and "Troubleshoot schema errors" ("has
  changed type": INT64 -> NUMERIC, INT64 -> FLOAT64, NUMERIC -> BIGNUMERIC by
  ALTER COLUMN). So int/long -> float/double widens the column to FLOAT64 and a
  decimal outgrowing NUMERIC widens it to BIGNUMERIC, by a query before the load;
  older hours of narrower files are then promoted by the reader schema.
- Not documented, assumed (Avro Java's resolution does it): a decimal is read
  into a decimal of the same scale and a larger precision (the same unscaled
  value); that is how a NUMERIC-sized file loads into a BIGNUMERIC column.

Pure: no Dagster, no Spark, no client; the landing store only for the files' headers
(`plan_from_files`) and the reader schema file.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from dataclasses import dataclass, field
from typing import Sequence

import fastavro

from kafka_landing.handoff.manifests import Manifest
from kafka_landing.naming import reader_schema_path
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError

_PRIMITIVES = {"boolean": "BOOLEAN", "int": "INTEGER", "long": "INTEGER", "float": "FLOAT", "double": "FLOAT",
               "bytes": "BYTES", "string": "STRING"}
_LOGICAL = {"date": "DATE", "time-millis": "TIME", "time-micros": "TIME", "timestamp-millis": "TIMESTAMP",
            "timestamp-micros": "TIMESTAMP", "local-timestamp-millis": "DATETIME",
            "local-timestamp-micros": "DATETIME"}
_NAMED = ("record", "error", "enum", "fixed")
_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBERS = ("int", "long", "float", "double")
# BigQuery's API names for the same types (tables.get answers the legacy names)
_API_TYPES = {"INT64": "INTEGER", "FLOAT64": "FLOAT", "BOOL": "BOOLEAN", "STRUCT": "RECORD"}
_SQL_TYPES = {"FLOAT": "FLOAT64", "BIGNUMERIC": "BIGNUMERIC"}
READER_NAMESPACE = "kafka_landing.reader"
REMEDY_GROUPS = ("Nothing was loaded by this plan: such files load in one job per group of schema ids (a load too "
                 "large for one job goes through a scratch table)")
REMEDY_TYPE = ("Nothing was loaded; the table and the landing files are as they were. To go on: give the field a "
               "new name in the producer's schema (a new optional field) and stop writing the old one, or rebuild "
               "the table with the new type (CREATE TABLE ... AS SELECT with a CAST, then swap), then load the hour "
               "again")


def bq_decimal_type(precision: int, scale: int) -> str:
    """What BigQuery makes of decimal(p, s) with decimal_target_types ["NUMERIC", "BIGNUMERIC"]."""
    return "NUMERIC" if precision - scale <= 29 and scale <= 9 else "BIGNUMERIC"


def _fixed_precision(size: int) -> int:
    """The largest precision a decimal in `size` bytes holds (Avro specification)."""
    return math.floor(math.log10(2 ** (8 * size - 1) - 1))


@dataclass(frozen=True)
class FileSchema:
    """The writer schema of one schema id of the hour, as read from one of its files."""

    schema_id: int | None
    uri: str
    writer: dict

    @property
    def label(self) -> str:
        return f"schema id {self.schema_id} ({self.uri})"


@dataclass(frozen=True)
class Widening:
    """A top-level column whose type widens before the load (a coercion BigQuery applies in place)."""

    column: str
    old: str  # BigQuery API type names: INTEGER, NUMERIC
    new: str  # FLOAT, BIGNUMERIC

    def statement(self, table_id: str) -> str:
        return f"ALTER TABLE `{table_id}` ALTER COLUMN `{self.column}` SET DATA TYPE {_SQL_TYPES[self.new]}"


@dataclass(frozen=True)
class LoadSchema:
    reader: dict | None  # the Avro reader schema, or None: the files' own schema is the load's
    widenings: tuple[Widening, ...]
    columns: list[dict] = field(default_factory=list)  # the BigQuery columns the load brings

    def reader_file(self) -> tuple[str, bytes]:
        """(content hash, a zero-record Avro file whose schema is the reader schema)."""
        assert self.reader is not None
        canonical = json.dumps(self.reader, sort_keys=True, separators=(",", ":"))
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(self.reader), [])
        return hashlib.sha256(canonical.encode()).hexdigest(), buf.getvalue()


# --- Avro -> BigQuery columns (BigQuery's documented conversions, use_avro_logical_types) ----------

def avro_columns(writer_schema: dict) -> list[dict]:
    """BigQuery fields (API form) for a record's fields with use_avro_logical_types and decimals
    as NUMERIC or BIGNUMERIC. Raises IncompatibleSchemaError for what BigQuery cannot take."""
    names = _Names()

    def column(name: str, t, ns: str) -> dict | None:
        nullable, t = _split(t, name)
        if t == "null":
            return None  # BigQuery ignores null-only fields
        t, ns = names.resolve(t, ns)
        mode = "NULLABLE" if nullable else "REQUIRED"
        kind = _kind(t)
        if kind == "array":
            inner = column(name, t["items"], ns)
            return None if inner is None else {**inner, "mode": "REPEATED"}
        if kind == "map":
            value = column("value", t["values"], ns)
            return {"name": name, "type": "RECORD", "mode": "REPEATED",
                    "fields": [{"name": "key", "type": "STRING", "mode": "REQUIRED"}] + ([value] if value else [])}
        if kind == "record":
            return {"name": name, "type": "RECORD", "mode": mode, "fields": fields(t, ns)}
        return {"name": name, "type": _bq_type(t), "mode": mode}

    def fields(record: dict, ns: str) -> list[dict]:
        inner = _namespace_of(record, ns)
        return [c for c in (column(f["name"], f["type"], inner) for f in record["fields"]) if c is not None]

    root, ns = names.resolve(writer_schema, "")
    return fields(root, ns)


class _Names:
    """Named types of one schema, by full name, registered where they are defined."""

    def __init__(self):
        self.types: dict[str, dict] = {}
        self.stack: list[str] = []

    def resolve(self, t, ns: str):
        """(t with a reference replaced by its definition, the namespace inside t)."""
        if isinstance(t, dict) and isinstance(t.get("type"), (dict, list, str)) and t.get("type") not in (
                *_PRIMITIVES, "null", *_NAMED, "array", "map") and not t.get("logicalType"):
            return self.resolve(t["type"], ns)  # {"type": "other.Name"} or {"type": {...}}
        if isinstance(t, str) and t not in _PRIMITIVES and t != "null":
            full = t if "." in t or not ns else f"{ns}.{t}"
            found = self.types.get(full) or self.types.get(t)
            if found is None:
                raise IncompatibleSchemaError(f"the Avro type {t!r} is used but never defined")
            return found, _namespace_of(found, ns)
        if isinstance(t, dict) and t.get("type") in _NAMED:
            self.types.setdefault(_fullname(t, ns), t)
            return t, _namespace_of(t, ns)
        return t, ns


def _fullname(t: dict, ns: str) -> str:
    name = t["name"]
    if "." in name:
        return name
    space = t.get("namespace", ns)
    return f"{space}.{name}" if space else name


def _namespace_of(t: dict, ns: str) -> str:
    return _fullname(t, ns).rpartition(".")[0] if isinstance(t, dict) and t.get("type") in _NAMED else ns


def _split(t, name: str) -> tuple[bool, object]:
    """(nullable, the one non-null type) of a field's type."""
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) > 1:
            raise IncompatibleSchemaError(f"field {name} is a union of several types, which kafka_landing does not "
                                          "load into BigQuery")
        return "null" in t, branches[0] if branches else "null"
    return False, t


def _kind(t) -> str:
    """int, long, ..., decimal, a logical type's name, enum, fixed, record, array or map."""
    if isinstance(t, str):
        return t
    base, logical = t.get("type"), t.get("logicalType")
    if logical == "decimal" and base in ("bytes", "fixed"):
        return "decimal"
    if base in ("record", "error"):
        return "record"
    if base in ("enum", "fixed", "array", "map"):
        return base
    if logical in _LOGICAL:
        return logical
    return base


def _bq_type(t) -> str:
    kind = _kind(t)
    if kind == "decimal":
        return bq_decimal_type(int(t["precision"]), int(t.get("scale", 0)))
    if kind in _LOGICAL:
        return _LOGICAL[kind]
    return {"enum": "STRING", "fixed": "BYTES", "record": "RECORD"}.get(kind) or _PRIMITIVES[kind]


def _strip(t):
    """A primitive given as {"type": "long"} (no logical type) as "long"."""
    if isinstance(t, dict) and t.get("type") in _PRIMITIVES and not t.get("logicalType"):
        return t["type"]
    return t


# --- the plan ---------------------------------------------------------------------------------------

def plan_load(table: list[dict] | None, files: Sequence[FileSchema], where: str,
              widest: dict[str, str] | None = None) -> LoadSchema:
    """The reader schema and the widenings a load of `files` into `table` needs (see the module
    doc). `where` names the load (table and hour) in errors. `widest`: for one step of a load in
    steps, the BigQuery type of each field path the whole sequence needs (`sequence_types`): a field
    new to the table is read as that type already (a long as a double, a NUMERIC-sized decimal as a
    BIGNUMERIC one), so a later step never needs a column widened half way."""
    return _Planner(where, files, widest=widest).plan(table)


def sequence_types(table: list[dict] | None, files: Sequence[FileSchema], where: str) -> dict[str, str]:
    """The BigQuery type of every field path (lower case, `record.field`) that a load of all `files`
    into `table` brings, whichever step loads it: planned for the whole sequence before its first
    job (what no grouping loads is refused here, before any job, as `reader_groups` refuses it)."""
    out: dict[str, str] = {}

    def walk(columns: list[dict], prefix: str) -> None:
        for c in columns:
            path = f"{prefix}{c['name'].lower()}"
            if c.get("fields"):
                walk(c["fields"], path + ".")
            else:
                out[path] = _api_type(c["type"])
    walk(_Planner(where, files, lenient=True).plan(table).columns, "")
    return out


def plan_from_files(store: LandingStore, dones: Sequence[Manifest], columns: Sequence | None, where: str) -> LoadSchema:
    """`plan_load` for the files of `dones` into a table of `columns` (BigQuery's SchemaFields; None
    if the load creates it): the writer schema of each schema id, from its smallest file's header."""
    return plan_load(api_columns(columns), file_schemas(store, dones), where)


def api_columns(columns: Sequence | None) -> list[dict] | None:
    """BigQuery's SchemaFields in API form (None: no table)."""
    return [f.to_api_repr() for f in columns] if columns is not None else None


def reader_schema_uri(store: LandingStore, dataset: str, table: str, plan: LoadSchema) -> str | None:
    """The gs:// URI of the plan's reader schema file, written once (content-addressed), or None."""
    if plan.reader is None:
        return None
    sha, data = plan.reader_file()
    rel = reader_schema_path(dataset, table, sha)
    if not store.exists(rel):
        store.create_exclusive(rel, data)  # False: another load wrote the same schema first
    return store.location(rel)


class ReaderConflict(IncompatibleSchemaError):
    """The files of one load give a column one BigQuery type through Avro types that no single reader
    schema reads without changing values (two decimal scales, two timestamp units): loadable by one
    job per group of schema ids (`reader_groups`), not by one job."""


# Logical types of one BigQuery type in several units: files of each unit load through readers of their own.
_UNITS = ({"timestamp-millis", "timestamp-micros"}, {"time-millis", "time-micros"},
          {"local-timestamp-millis", "local-timestamp-micros"})


def file_schemas(store: LandingStore, dones: Sequence[Manifest]) -> list[FileSchema]:
    """The writer schema of each schema id of the files of `dones`, from its smallest file's header."""
    every = [f for d in dones for f in d.landed_files]
    files = []
    for sid in sorted({f.schema_id for f in every}, key=lambda s: (s is None, s)):
        smallest = min((f for f in every if f.schema_id == sid), key=lambda f: f.bytes)
        files.append(FileSchema(sid, store.location(smallest.path), store.avro_schema(smallest.path)))
    return files


def reader_groups(table: list[dict] | None, files: Sequence[FileSchema], where: str) -> list[list[FileSchema]]:
    """The schema ids of one load in groups that each load through one reader schema, when no single
    reader reads them all (the plan raised `ReaderConflict`): first fit, in schema id order, so the
    groups depend on the files alone. Raises what no grouping helps: a refusal of the files together
    (or against `table`, the table's columns) once units and scales are set aside."""
    _Planner(where, files, lenient=True).plan(table)  # the files together, each column of one BigQuery type
    groups: list[list[FileSchema]] = []
    for f in files:
        for group in groups:
            try:
                plan_load(None, [*group, f], where)
            except ReaderConflict:
                continue
            group.append(f)
            break
        else:
            groups.append([f])
    return groups


class _Planner:
    def __init__(self, where: str, files: Sequence[FileSchema], lenient: bool = False,
                 widest: dict[str, str] | None = None):
        """`lenient`: plan as if one reader could read every unit and scale of a column (what
        `reader_groups` checks the files together with); such a plan is never loaded."""
        self.where = where
        self.lenient = lenient
        self.widest = widest or {}
        # newest schema first: its field order and names lead
        self.files = sorted(files, key=lambda f: (f.schema_id is None, -(f.schema_id or 0)))
        self.widenings: list[Widening] = []
        self.names: dict[int, _Names] = {}

    def refuse(self, path: str, what: str, remedy: str = REMEDY_TYPE,
               kind: type[IncompatibleSchemaError] = IncompatibleSchemaError) -> IncompatibleSchemaError:
        ids = ", ".join(f"schema id {f.schema_id}" for f in self.files)
        return kind(f"{self.where}: field {path}: {what} (the files of this load hold {ids}). {remedy}",
                    nothing_loaded=True)  # every remedy starts with it

    def plan(self, table: list[dict] | None) -> LoadSchema:
        roots = []
        for f in self.files:
            names = self.names.setdefault(id(f), _Names())
            try:
                root, ns = names.resolve(f.writer, "")
                _check_acyclic(root, names, ns, [])
            except IncompatibleSchemaError as exc:
                raise IncompatibleSchemaError(f"{self.where}: {f.label}: {exc}. Nothing was loaded",
                                              nothing_loaded=True) from None
            roots.append((f, root, ns))
        record_names = {_fullname(r, "").rsplit(".", 1)[-1] for _, r, _ in roots}
        if len(record_names) > 1:
            raise self.refuse("(the record)", f"the record is named {' and '.join(sorted(record_names))} in "
                                              "different schema ids; Avro reads one as the other only under one name")
        reader = {"type": "record", "name": record_names.pop(), "namespace": READER_NAMESPACE,
                  "fields": self.fields("", [(f, r, ns) for f, r, ns in roots], table, table is not None)}
        try:
            columns = avro_columns(reader)
        except IncompatibleSchemaError as exc:
            raise IncompatibleSchemaError(f"{self.where}: {exc}. Nothing was loaded", nothing_loaded=True) from None
        distinct = {json.dumps(f.writer, sort_keys=True) for f in self.files}
        if len(distinct) == 1 and avro_columns(self.files[0].writer) == columns:
            reader = None  # the files' own schema gives exactly these columns
        return LoadSchema(reader, tuple(self.widenings), columns)

    # fields of one record position, over the files that have it
    def fields(self, path: str, records: list[tuple[FileSchema, dict, str]], cols: list[dict] | None,
               exists: bool) -> list[dict]:
        per_file, order, spelled = [], [], {}
        for f, rec, ns in records:
            inner = _namespace_of(rec, ns)
            found = {}
            for fd in rec["fields"]:
                nullable, t = _split(fd["type"], path + fd["name"])
                if t == "null":
                    continue
                key = fd["name"].lower()
                spelled.setdefault(key, set()).add(fd["name"])
                found[key] = (nullable, t, inner)
                if key not in order:
                    order.append(key)
            per_file.append((f, found))
        table_cols = {c["name"].lower(): c for c in cols or []}
        out = []
        for key in order:
            if len(spelled[key]) > 1:
                raise self.refuse(path + sorted(spelled[key])[0], f"it is spelled {' and '.join(sorted(spelled[key]))}"
                                  " in different schema ids; BigQuery takes them for one column, Avro for two")
            name = spelled[key].pop()
            present = [(f, *found[key]) for f, found in per_file if key in found]
            missing = [f for f, found in per_file if key not in found]
            out.append(self.field(path + name, name, present, missing, table_cols.get(key), exists))
        for key, col in table_cols.items():
            if key not in order and col.get("mode", "NULLABLE") == "REQUIRED":
                # a REQUIRED column no file of the hour has: in the reader as nullable, so the load relaxes it
                out.append({"name": col["name"], "type": ["null", self.from_table(path + col["name"], col)],
                            "default": None})
        return out

    def field(self, path: str, name: str, present: list, missing: list, col: dict | None, exists: bool) -> dict:
        mode = (col or {}).get("mode", "NULLABLE")
        nullable = (any(n for _, n, _, _ in present) or bool(missing) or (col is not None and mode == "NULLABLE")
                    or (col is None and exists))
        t = self.type(path, [(f, t, ns) for f, _, t, ns in present], col, top="." not in path)
        return {"name": name, "type": ["null", t], "default": None} if nullable else {"name": name, "type": t}

    def slot(self, path: str, present: list, col: dict | None) -> object:
        """Array items or map values: nullable if a file has them so, or the table's value column is."""
        nullable = any(n for _, n, _, _ in present) or (col is not None and col.get("mode") == "NULLABLE")
        t = self.type(path, [(f, t, ns) for f, _, t, ns in present], col, top=False)
        return ["null", t] if nullable else t

    def type(self, path: str, present: list[tuple[FileSchema, object, str]], col: dict | None, top: bool):
        """The reader type (without null) of a position, after the files' types and the table's column."""
        resolved = []
        for f, t, ns in present:
            t, inner = self.names[id(f)].resolve(t, ns)
            resolved.append((f, _strip(t), inner))
        kinds = {_kind(t) for _, t, _ in resolved}
        groups = {"number" if k in _NUMBERS else k for k in kinds}
        if len(groups) > 1 and any(kinds <= units for units in _UNITS):
            if not self.lenient:
                said = " and ".join(sorted(_describe(t) for t in {json.dumps(t, sort_keys=True): t
                                                                  for _, t, _ in resolved}.values()))
                raise self.refuse(path, f"it is {said} in different schema ids of this load; one reader schema "
                                  "cannot read both without changing values", REMEDY_GROUPS, ReaderConflict)
            return self.against_table(path, resolved[0][1], col, top, resolved)
        if len(groups) > 1:
            said = "; ".join(f"{_describe(t)} in {f.label}" for f, t, _ in resolved)
            types = sorted({_bq_type(t) for _, t, _ in resolved})
            raise self.refuse(path, f"its type differs between schema ids ({said}); "
                              + _why(types[0], types[-1], kinds))
        group = groups.pop()
        if col is not None:
            self.check_shape(path, group, resolved, col)
        if group == "number":
            if kinds <= {"int"}:
                t = "int"
            elif kinds <= {"int", "long"}:
                t = "long"
            elif kinds == {"float"}:
                t = "float"
            else:
                t = "double"
            return self.against_table(path, t, col, top, resolved)
        if group == "decimal":
            return self.against_table(path, self.decimal(path, resolved), col, top, resolved)
        if group == "enum":
            return self.against_table(path, self.enum(path, resolved), col, top, resolved)
        if group == "fixed":
            self.same_names(path, resolved, sizes=True)
            return self.against_table(path, _renamed(resolved[0][1], path), col, top, resolved)
        if group == "record":
            self.same_names(path, resolved)
            first = resolved[0][1]
            return {"type": "record", "name": _fullname(first, "").rsplit(".", 1)[-1], "namespace": _space(path),
                    "fields": self.fields(path + ".", resolved, (col or {}).get("fields"), col is not None)}
        if group == "array":
            items = [(f, *_split(t["items"], path), ns) for f, t, ns in resolved]
            elem = None if col is None else {**col, "mode": "REQUIRED"}
            return {"type": "array", "items": self.slot(path, items, elem)}
        if group == "map":
            values = [(f, *_split(t["values"], path + ".value"), ns) for f, t, ns in resolved]
            value_col = next((c for c in (col or {}).get("fields", []) if c["name"].lower() == "value"), None)
            return {"type": "map", "values": self.slot(path + ".value", values, value_col)}
        # boolean, string, bytes, logical types: one type across the files
        distinct = {_describe(t) for _, t, _ in resolved}
        if len(distinct) > 1:
            raise self.refuse(path, f"it is {' and '.join(sorted(distinct))} in different schema ids of this load; "
                              "Avro cannot read one as the other", "Nothing was loaded. To go on: keep one type for "
                              "the field")
        return self.against_table(path, resolved[0][1], col, top, resolved)

    def check_shape(self, path: str, group: str, resolved: list, col: dict) -> None:
        repeated = col.get("mode") == "REPEATED"
        if (group in ("array", "map")) != repeated:
            raise self.refuse(path, f"the table's column is {col.get('mode', 'NULLABLE')} {col['type']} and "
                              f"{resolved[0][0].label} has {_describe(resolved[0][1])}; BigQuery cannot change a "
                              "column's mode between REPEATED and not")
        if group == "map" and not (repeated and col["type"] == "RECORD"):
            raise self.refuse(path, f"the table's column is {col.get('mode', 'NULLABLE')} {col['type']} and "
                              f"{resolved[0][0].label} has a map; BigQuery cannot change a column's type")
        if group == "record" and _api_type(col["type"]) != "RECORD":
            raise self.refuse(path, f"the table's column is {col['type']} and {resolved[0][0].label} has a record; "
                              "BigQuery cannot change a column's type")

    def against_table(self, path: str, t, col: dict | None, top: bool, resolved: list):
        """The reader type `t` adjusted to the table's column, with the widening the column needs; for a
        column new to the table, to the type the whole load needs of it (`widest`)."""
        if col is None:
            wanted = (self.widest.get(path.lower()), _bq_type(t))
            if wanted == ("FLOAT", "INTEGER"):
                return "double"  # Avro promotes int and long to double
            if wanted == ("BIGNUMERIC", "NUMERIC"):
                return self.bignumeric(path, t)
            return t
        have, want = _api_type(col["type"]), _bq_type(t)
        if have == want:
            return t
        if (have, want) == ("FLOAT", "INTEGER"):
            return "double"  # Avro promotes int and long to double
        if (have, want) == ("BIGNUMERIC", "NUMERIC"):
            return self.bignumeric(path, t)
        if (have, want) in (("INTEGER", "FLOAT"), ("NUMERIC", "BIGNUMERIC")):
            if not top or col.get("mode") == "REPEATED":
                where = "repeated" if col.get("mode") == "REPEATED" else "nested"
                raise self.refuse(path, f"the table's {where} column is {have} and {_label(resolved, t)} needs {want}; "
                                  "BigQuery changes a column's type only by ALTER COLUMN SET DATA TYPE, and that only "
                                  "for top-level, non-repeated columns")
            if not _AVRO_NAME.match(col["name"]):
                raise self.refuse(path, f"column name {col['name']!r} cannot be quoted safely in DDL")
            self.widenings.append(Widening(col["name"], have, want))
            return t
        raise self.refuse(path, f"the table's column is {have} and {_label(resolved, t)} has {want}; "
                          + _why(have, want, {_kind(ft) for _, ft, _ in resolved}))

    def decimal(self, path: str, resolved: list) -> dict:
        scales = {int(t.get("scale", 0)) for _, t, _ in resolved}
        if len(scales) > 1 and not self.lenient:
            raise self.refuse(path, f"its decimal scale is {' and '.join(map(str, sorted(scales)))} in different "
                              "schema ids of this load; one reader schema cannot read both without changing values",
                              REMEDY_GROUPS, ReaderConflict)
        bases = {(t["type"], t.get("size"), _fullname(t, "").rsplit(".", 1)[-1] if t["type"] == "fixed" else None)
                 for _, t, _ in resolved}
        if len(bases) > 1 and not self.lenient:
            raise self.refuse(path, "its decimal is bytes in one schema id and fixed (or fixed of another size) in "
                              "another; one reader schema cannot read both", REMEDY_GROUPS, ReaderConflict)
        first = resolved[0][1]
        scale = max(scales)  # one scale unless lenient: then the column's widest, to check it fits the column
        digits = max(int(t["precision"]) - int(t.get("scale", 0)) for _, t, _ in resolved)
        out = {**({"type": "bytes"} if first["type"] == "bytes" else _renamed(first, path)),
               "logicalType": "decimal",
               "precision": max(int(t["precision"]) for _, t, _ in resolved) if len(scales) == 1 else digits + scale,
               "scale": scale}
        return out

    def bignumeric(self, path: str, t: dict) -> dict:
        """decimal(p, s) that BigQuery reads as BIGNUMERIC: the same scale (the same values), more digits."""
        scale = int(t.get("scale", 0))
        precision = max(int(t["precision"]), scale + 30)
        if t["type"] == "fixed" and precision > _fixed_precision(int(t["size"])):
            raise self.refuse(path, f"the table's column is BIGNUMERIC and the files' fixed({t['size']}) decimal "
                              "cannot be declared with BIGNUMERIC's precision",
                              "Nothing was loaded. To go on: use a bytes decimal, or a fixed of 13 bytes or more")
        return {**t, "precision": precision}

    def enum(self, path: str, resolved: list) -> dict:
        self.same_names(path, resolved)
        symbols: list[str] = []
        for _, t, _ in resolved:
            symbols += [s for s in t["symbols"] if s not in symbols]
        out = {"type": "enum", "name": _fullname(resolved[0][1], "").rsplit(".", 1)[-1], "namespace": _space(path),
               "symbols": symbols}
        default = resolved[0][1].get("default")
        return {**out, "default": default} if default in symbols else out

    def same_names(self, path: str, resolved: list, sizes: bool = False) -> None:
        names = {_fullname(t, "").rsplit(".", 1)[-1] for _, t, _ in resolved}
        if len(names) > 1:
            raise self.refuse(path, f"its {resolved[0][1]['type']} is named {' and '.join(sorted(names))} in different "
                              "schema ids; Avro reads one as the other only under one name")
        if sizes and len({t["size"] for _, t, _ in resolved}) > 1:
            raise self.refuse(path, "its fixed size differs between schema ids; Avro cannot read one as the other")

    def from_table(self, path: str, col: dict):
        """An Avro type giving column `col` (for a column no file has: nothing is read through it)."""
        kind, mode = _api_type(col["type"]), col.get("mode", "NULLABLE")
        if not _AVRO_NAME.match(col["name"]):
            raise self.refuse(path, f"the table's REQUIRED column {col['name']!r} is in no file of this load and its "
                              "name is no Avro name, so the load cannot relax it",
                              "Nothing was loaded. To go on: make the column NULLABLE (ALTER COLUMN DROP NOT NULL)")
        simple = {"INTEGER": "long", "FLOAT": "double", "BOOLEAN": "boolean", "STRING": "string", "BYTES": "bytes",
                  "NUMERIC": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 9},
                  "BIGNUMERIC": {"type": "bytes", "logicalType": "decimal", "precision": 76, "scale": 38},
                  "TIMESTAMP": {"type": "long", "logicalType": "timestamp-micros"},
                  "DATE": {"type": "int", "logicalType": "date"},
                  "TIME": {"type": "long", "logicalType": "time-micros"},
                  "DATETIME": {"type": "long", "logicalType": "local-timestamp-micros"}}
        if kind == "RECORD":
            fields = []
            for sub in col.get("fields", []):
                t = self.from_table(f"{path}.{sub['name']}", sub)
                sub_mode = sub.get("mode", "NULLABLE")
                fields.append({"name": sub["name"], "type": t} if sub_mode != "NULLABLE"
                              else {"name": sub["name"], "type": ["null", t], "default": None})
            t = {"type": "record", "name": f"T_{col['name']}", "namespace": _space(path), "fields": fields}
        elif kind in simple:
            t = simple[kind]
        else:
            raise self.refuse(path, f"the table's REQUIRED column is {col['type']}, which no Avro type gives, and no "
                              "file of this load has it, so the load cannot relax it",
                              "Nothing was loaded. To go on: make the column NULLABLE (ALTER COLUMN DROP NOT NULL)")
        return {"type": "array", "items": t} if mode == "REPEATED" else t


def _check_acyclic(t, names: _Names, ns: str, stack: list[str]) -> None:
    """Register every named type of a schema, refusing a recursive one (BigQuery has no recursive columns)."""
    t, inner = names.resolve(t, ns)
    if isinstance(t, list):
        for b in t:
            _check_acyclic(b, names, ns, stack)
        return
    if not isinstance(t, dict):
        return
    kind = t.get("type")
    if kind in ("record", "error"):
        full = _fullname(t, ns)
        if full in stack:
            raise IncompatibleSchemaError(f"the record {full} contains itself, which BigQuery cannot load")
        for f in t["fields"]:
            _check_acyclic(f["type"], names, inner, stack + [full])
    elif kind == "array":
        _check_acyclic(t["items"], names, inner, stack)
    elif kind == "map":
        _check_acyclic(t["values"], names, inner, stack)


def _space(path: str) -> str:
    """The reader's namespace for the named type at a field path: unique per path."""
    return ".".join([READER_NAMESPACE, *(p for p in path.split(".") if p)])


def _renamed(t: dict, path: str) -> dict:
    """A named type under the reader's namespace for its path, keeping its unqualified name."""
    if t.get("type") not in _NAMED:
        return t
    return {**t, "name": _fullname(t, "").rsplit(".", 1)[-1], "namespace": _space(path)}


def _api_type(t: str) -> str:
    return _API_TYPES.get(t, t)


def _describe(t) -> str:
    if isinstance(t, str):
        return t
    kind = _kind(t)
    if kind == "decimal":
        return f"decimal({t['precision']},{t.get('scale', 0)})"
    if kind in _LOGICAL:
        return f"{t['type']} ({kind})"
    if kind in ("record", "enum", "fixed"):
        return f"{kind} {_fullname(t, '').rsplit('.', 1)[-1]}"
    return kind


def _label(resolved: list, t) -> str:
    wanted = _bq_type(t)
    ids = [f.label for f, ft, _ in resolved if _bq_type(ft) == wanted] or [resolved[0][0].label]
    return " and ".join(ids)


def _why(a: str, b: str = "", kinds: set = frozenset()) -> str:
    pair = {_api_type(a), _api_type(b)}
    if pair == {"STRING", "BYTES"}:
        if kinds & {"enum", "fixed"}:
            return "Avro cannot read one as the other"
        return ("BigQuery cannot change a column between STRING and BYTES: ALTER COLUMN SET DATA TYPE has no such "
                "coercion and a load does not convert")
    if len(pair) == 1:
        return "Avro cannot read one as the other"
    return (f"BigQuery changes a column's type only INTEGER -> FLOAT or NUMERIC -> BIGNUMERIC (and Avro promotes "
            f"only int -> long -> float -> double), not between {' and '.join(sorted(pair))}")


__all__ = ["FileSchema", "LoadSchema", "ReaderConflict", "Widening", "api_columns", "avro_columns", "bq_decimal_type",
           "file_schemas", "plan_from_files", "plan_load", "reader_groups", "reader_schema_uri", "sequence_types"]
