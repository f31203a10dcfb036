"""A strict fake of the BigQuery REST API, for the calls kafka_landing's BigQuery
warehouse makes, served over real HTTP to the real google-cloud-bigquery client.

Why a local HTTP server (not a `requests` adapter on `client._http`): the client
runs unmodified, request building, retries and error parsing included; nothing
private is patched; and another process (a `dagster` run) can reach it through
the client's own `BIGQUERY_EMULATOR_HOST` variable. No emulator supports
partition-decorator loads, hence this fake.

Written from BigQuery's documentation (REST reference: datasets, tables, jobs,
jobs.query; "Load Avro data from Cloud Storage": schema of the alphabetically
last file, Avro conversions, logical types; "Load data into partitioned tables";
"Modifying table schemas": ALLOW_FIELD_ADDITION / ALLOW_FIELD_RELAXATION;
INFORMATION_SCHEMA.PARTITIONS; "Managing partitioned tables": deleting a
partition by its decorator; the DDL reference, ALTER COLUMN SET DATA TYPE, and
"Troubleshoot schema errors": INT64 -> NUMERIC/BIGNUMERIC/FLOAT64 and
NUMERIC -> BIGNUMERIC/FLOAT64 on top-level columns; jobs.insert
`referenceFileSchemaUri`: "a reference file with the reader schema"). Strict on
purpose:

- a request field the REST API does not have -> 400 "Unknown name", as Google's
  front end answers; a documented field this fake does not implement -> 501, so
  nothing is silently ignored;
- a wildcard in sourceUris -> 400 (BigQuery allows them; kafka_landing must never
  use one: it loads exactly the files its done file lists);
- a job id used before in the project, by a job of any kind -> 409 "Already Exists:
  Job ..." (so a job id taken by one job can never start another);
- query jobs: only `SELECT ERROR('...')`, which fails with its message (reason
  invalidQuery) and reads no table; job labels checked as BigQuery words them;
- a failed job changes nothing; WRITE_TRUNCATE on `table$YYYYMMDDHH` (or
  `$YYYYMMDD` in a table partitioned by DAY) replaces that partition only;
  WRITE_TRUNCATE without a decorator replaces an unpartitioned table whole, its
  schema included (and refuses schemaUpdateOptions, as BigQuery does);
- a table partitioned on a column ("time-unit column partitioning", on a
  TIMESTAMP, DATE or DATETIME column): each row goes to the partition of its
  value (UTC; NULL -> __NULL__, before 1960 or after 2159 -> __UNPARTITIONED__),
  a decorator load whose rows fall outside the decorated partition fails
  ("the partition ID specified in the decorator must match the data being
  written", "Managing partitioned table data"), and a decorator outside
  1960-01-01..2159-12-31 names no partition: a load, copy or delete through it
  fails; schema changes follow the documented update rules;
- BigQuery's quotas and limits ("Quotas and limits"): a load job naming more than
  10,000 source URIs is refused by jobs.insert (400 "Too many sources provided");
  a load that would add a partition to a table holding 10,000 fails; a table's
  load jobs past 1,500 in any 24 hours (a rolling window, by the fake's `clock`)
  fail (quotaExceeded; failed jobs count too), and so do a destination table's
  copy jobs past 1,000 ("Copy jobs per destination table per day", counted
  over any 24 hours as load jobs are, failed ones included). Tests may lower each;
- copy jobs (`configuration.copy`, JobConfigurationTableCopy: sourceTable(s),
  destinationTable, writeDisposition, default WRITE_EMPTY, createDisposition):
  a partition into a partition of a table of the same partitioning, or an
  unpartitioned table into a partition ("Copying tables into partitions") or
  over a whole unpartitioned table; the source schema must equal the
  destination's (BigQuery documents no schema update for copies, so the fake
  refuses any difference); rows of a table partitioned on a column must fall in
  the decorated partition;
- tables.patch of the schema ("Modifying table schemas": columns added NULLABLE
  or REPEATED, REQUIRED relaxed to NULLABLE, nothing else) and the expiration,
  refused (412) when the If-Match etag is not the table's now (every change of a
  table's data or schema gives it a new etag); a table past its
  `expirationTime` is gone;
- a multi-file Avro load reads every file through one reader schema (the
  reference file's, else the alphabetically last file's) by Avro schema
  resolution, checked as the Avro specification words it and stricter where
  BigQuery's reading is not documented: a decimal only into one of the same
  scale and no smaller precision, other logical types only into the same one
  (anything else could change values, so the fake refuses it);
- the only statements jobs.query runs are the INFORMATION_SCHEMA.PARTITIONS
  count and `ALTER TABLE ... ALTER COLUMN c SET DATA TYPE T` (a coercion of a
  top-level column, applied to the rows already held).

Source objects are read through `read_object(gs_uri) -> bytes` (tests read the
GCS emulator). Rows are kept as fastavro decodes them.
"""

from __future__ import annotations

import io
import json
import re
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

import fastavro

API_PREFIX = "/bigquery/v2"

# --- which request fields exist: implemented here / documented but not implemented ----------------

_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    "dataset": ({"datasetReference", "location", "labels", "description", "friendlyName"},
                {"kind", "etag", "id", "selfLink", "defaultTableExpirationMs", "defaultRoundingMode",
                 "defaultPartitionExpirationMs", "access", "creationTime", "lastModifiedTime",
                 "defaultEncryptionConfiguration", "satisfiesPzs", "satisfiesPzi", "type", "linkedDatasetSource",
                 "linkedDatasetMetadata", "externalDatasetReference", "externalCatalogDatasetOptions",
                 "isCaseInsensitive", "defaultCollation", "storageBillingModel", "maxTimeTravelHours", "tags",
                 "resourceTags", "restrictions"}),
    "datasetReference": ({"projectId", "datasetId"}, set()),
    "table": ({"tableReference", "schema", "timePartitioning", "labels", "description", "friendlyName",
               "expirationTime"},
              {"kind", "etag", "id", "selfLink", "rangePartitioning", "clustering", "requirePartitionFilter",
               "partitionDefinition", "numBytes", "numRows", "creationTime", "lastModifiedTime",
               "type", "view", "materializedView", "externalDataConfiguration", "biglakeConfiguration", "location",
               "encryptionConfiguration", "snapshotDefinition", "defaultCollation", "defaultRoundingMode",
               "cloneDefinition", "maxStaleness", "tableConstraints", "resourceTags", "tableReplicationInfo",
               "externalCatalogTableOptions", "managedTableType"}),
    "tableReference": ({"projectId", "datasetId", "tableId"}, set()),
    "schema": ({"fields"}, {"foreignTypeInfo"}),
    "field": ({"name", "type", "mode", "fields", "description"},
              {"policyTags", "dataPolicies", "maxLength", "precision", "scale", "timestampPrecision",
               "roundingMode", "collation", "defaultValueExpression", "rangeElementType", "foreignTypeDefinition"}),
    "timePartitioning": ({"type", "field"}, {"expirationMs", "requirePartitionFilter"}),
    "job": ({"jobReference", "configuration"},
            {"kind", "etag", "id", "selfLink", "user_email", "statistics", "status", "principal_subject",
             "jobCreationReason"}),
    "jobReference": ({"projectId", "jobId", "location"}, set()),
    "configuration": ({"load", "copy", "query", "labels", "jobType"},
                      {"extract", "dryRun", "jobTimeoutMs", "reservation", "maxSlots"}),
    # JobConfigurationQuery (REST reference, jobs): a query job; the fake runs only `SELECT ERROR('...')`
    "jobQuery": ({"query", "useLegacySql"},
                 {"destinationTable", "tableDefinitions", "userDefinedFunctionResources", "createDisposition",
                  "writeDisposition", "defaultDataset", "priority", "allowLargeResults", "useQueryCache",
                  "flattenResults", "maximumBillingTier", "maximumBytesBilled", "parameterMode", "queryParameters",
                  "systemVariables", "schemaUpdateOptions", "timePartitioning", "rangePartitioning", "clustering",
                  "destinationEncryptionConfiguration", "scriptOptions", "connectionProperties", "createSession",
                  "continuous", "writeIncrementalResults", "preserveNulls"}),
    # JobConfigurationTableCopy (REST reference, jobs): one source table or several, into one destination
    "copy": ({"sourceTable", "sourceTables", "destinationTable", "writeDisposition", "createDisposition"},
             {"operationType", "destinationExpirationTime", "destinationEncryptionConfiguration"}),
    "load": ({"sourceUris", "sourceFormat", "destinationTable", "writeDisposition", "createDisposition",
              "useAvroLogicalTypes", "schemaUpdateOptions", "timePartitioning", "schema", "decimalTargetTypes",
              "referenceFileSchemaUri"},
             {"fileSetSpecType", "destinationTableProperties", "nullMarker", "nullMarkers", "fieldDelimiter",
              "skipLeadingRows", "encoding", "quote", "maxBadRecords", "allowQuotedNewlines", "allowJaggedRows",
              "ignoreUnknownValues", "projectionFields", "autodetect", "rangePartitioning", "clustering",
              "destinationEncryptionConfiguration", "hivePartitioningOptions",
              "jsonExtension", "parquetOptions", "preserveAsciiControlCharacters", "connectionProperties",
              "createSession", "columnNameCharacterMap", "copyFilesOnly", "timeZone", "dateFormat",
              "datetimeFormat", "timeFormat", "timestampFormat", "sourceColumnMatch", "schemaInline",
              "schemaInlineFormat", "timestampTargetPrecision"}),
    "query": ({"kind", "query", "useLegacySql", "parameterMode", "queryParameters", "location", "formatOptions",
               "requestId", "timeoutMs", "maxResults", "jobCreationMode"},
              {"defaultDataset", "jobTimeoutMs", "maxSlots", "destinationEncryptionConfiguration", "dryRun",
               "useQueryCache", "preserveNulls", "connectionProperties", "labels", "maximumBytesBilled",
               "createSession", "reservation", "writeIncrementalResults", "continuous", "queryResultsFormat",
               "arrowSerializationOptions"}),
    "queryParameter": ({"name", "parameterType", "parameterValue"}, set()),
    "parameterType": ({"type"}, {"arrayType", "structTypes", "rangeElementType"}),
    "parameterValue": ({"value"}, {"arrayValues", "structValues", "rangeValue"}),
    "formatOptions": ({"useInt64Timestamp"}, {"timestampOutputFormat"}),
}
# Query-string parameters per method (plus Google's system parameter prettyPrint).
_PARAMS = {
    "datasets.get": ({"prettyPrint"}, {"datasetView", "accessPolicyVersion", "fields"}),
    "datasets.insert": ({"prettyPrint"}, {"accessPolicyVersion", "fields"}),
    "datasets.delete": ({"prettyPrint", "deleteContents"}, set()),
    "datasets.list": ({"prettyPrint", "maxResults", "pageToken", "all"}, {"filter", "fields"}),
    "tables.get": ({"prettyPrint"}, {"selectedFields", "view", "fields"}),
    "tables.insert": ({"prettyPrint"}, {"fields"}),
    "tables.delete": ({"prettyPrint"}, set()),
    "tables.patch": ({"prettyPrint"}, {"autodetect_schema", "fields"}),
    "jobs.insert": ({"prettyPrint"}, {"fields"}),
    # google-cloud-bigquery sends projection=full on jobs.get (a jobs.list parameter the API also takes here)
    "jobs.get": ({"prettyPrint", "location", "projection"}, {"fields"}),
    "jobs.query": ({"prettyPrint"}, {"fields"}),
}
# The permission each method needs (for `deny`, to test how 403s are reported).
PERMISSIONS = {
    "datasets.get": "bigquery.datasets.get", "datasets.insert": "bigquery.datasets.create",
    "datasets.delete": "bigquery.datasets.delete", "datasets.list": "bigquery.datasets.get",
    "tables.get": "bigquery.tables.get", "tables.insert": "bigquery.tables.create",
    "tables.delete": "bigquery.tables.delete", "tables.patch": "bigquery.tables.update",
    "jobs.insert": "bigquery.jobs.create",
    "jobs.get": "bigquery.jobs.get", "jobs.query": "bigquery.jobs.create",
}
_DECORATOR_DIGITS = {"HOUR": 10, "DAY": 8, "MONTH": 6, "YEAR": 4}
_DECORATOR_FORMAT = {"HOUR": "%Y%m%d%H", "DAY": "%Y%m%d", "MONTH": "%Y%m", "YEAR": "%Y"}
PARTITIONS_QUERY = re.compile(
    r"^\s*SELECT\s+total_rows\s+FROM\s+`(?P<project>[^`.]+)\.(?P<dataset>[^`.]+)\.INFORMATION_SCHEMA\.PARTITIONS`"
    r"\s+WHERE\s+table_name\s*=\s*@(?P<t>\w+)\s+AND\s+partition_id\s*=\s*@(?P<p>\w+)\s*;?\s*$",
    re.IGNORECASE)


# The one statement a query job runs: GoogleSQL's ERROR(), which fails the job with its message and
# reads no table (a job that exists, changes nothing and fails: what a reserved job id is).
ERROR_QUERY = re.compile(r"^\s*SELECT\s+ERROR\s*\(\s*'(?P<message>(?:[^'\\]|\\.)*)'\s*\)\s*;?\s*$", re.IGNORECASE)


ALTER_COLUMN = re.compile(
    r"^\s*ALTER\s+TABLE\s+`(?P<project>[^`.]+)\.(?P<dataset>[^`.]+)\.(?P<table>[^`.]+)`\s+ALTER\s+COLUMN\s+"
    r"(?P<column>`[^`]+`|[A-Za-z_][\w.]*)\s+SET\s+DATA\s+TYPE\s+(?P<type>[A-Za-z0-9_]+(?:\s*[(<].*)?)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL)
# SQL type names -> the API's (legacy) names that tables.get shows
_SQL_TYPES = {"INT64": "INTEGER", "INTEGER": "INTEGER", "INT": "INTEGER", "BIGINT": "INTEGER", "FLOAT64": "FLOAT",
              "NUMERIC": "NUMERIC", "DECIMAL": "NUMERIC", "BIGNUMERIC": "BIGNUMERIC", "BIGDECIMAL": "BIGNUMERIC",
              "STRING": "STRING", "BYTES": "BYTES", "BOOL": "BOOLEAN", "DATE": "DATE", "DATETIME": "DATETIME",
              "TIME": "TIME", "TIMESTAMP": "TIMESTAMP"}
_SQL_NAMES = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL", "RECORD": "STRUCT<...>"}
# "Coerce to" of GoogleSQL's conversion rules, the only changes ALTER COLUMN SET DATA TYPE makes
_COERCIONS = {("INTEGER", "NUMERIC"), ("INTEGER", "BIGNUMERIC"), ("INTEGER", "FLOAT"), ("NUMERIC", "BIGNUMERIC"),
              ("NUMERIC", "FLOAT"), ("BIGNUMERIC", "FLOAT")}


# Time-unit column partitioning has partitions for 1960-01-01 to 2159-12-31 ("Partitioned tables"):
# rows outside go to __UNPARTITIONED__, and no decorator names a partition outside.
FIRST_YEAR, LAST_YEAR = 1960, 2159


def _column_partition(value, kind: str) -> str:
    """The partition of a row's partitioning column value: UTC, NULL -> __NULL__, outside 1960-2159
    -> __UNPARTITIONED__ ("Partitioned tables": time-unit column partitioning)."""
    if value is None:
        return "__NULL__"
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        return "__UNPARTITIONED__"
    return value.strftime(_DECORATOR_FORMAT[kind])


def _partition_column(schema: list[dict], partitioning: dict, label: str) -> None:
    col = next((c for c in schema if c["name"].lower() == partitioning["field"].lower()), None)
    if col is None:
        raise JobFailed("invalid", f"The field specified for partitioning cannot be found in the schema of {label}")
    if col["type"] not in ("TIMESTAMP", "DATE", "DATETIME") or col.get("mode") == "REPEATED":
        raise JobFailed("invalid", f"Partitioning field {partitioning['field']} of {label} must be a top-level "
                                   f"TIMESTAMP, DATE or DATETIME field, not {col['type']}")


class ApiError(Exception):
    """An HTTP error answer, in Google's error shape."""

    STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
              412: "FAILED_PRECONDITION", 501: "NOT_IMPLEMENTED"}
    REASON = {400: "invalid", 403: "accessDenied", 404: "notFound", 409: "duplicate", 412: "conditionNotMet",
              501: "notImplemented"}

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "status": self.STATUS[self.code],
                          "errors": [{"message": self.message, "domain": "global", "reason": self.REASON[self.code]}]}}


class JobFailed(Exception):
    """A job that ran and failed: it ends DONE with this errorResult and changes nothing."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def _check_fields(obj, kind: str, where: str) -> dict:
    if not isinstance(obj, dict):
        raise ApiError(400, f"Invalid JSON payload received. Expected an object at '{where}'.")
    implemented, documented = _FIELDS[kind]
    for name in obj:
        if name in implemented:
            continue
        if name in documented:
            raise ApiError(501, f"bigquery_fake does not implement '{where}.{name}': extend the fake from "
                                "BigQuery's documentation before the product relies on it")
        raise ApiError(400, f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field.")
    return obj


def _check_params(method: str, params: dict) -> None:
    implemented, documented = _PARAMS[method]
    for name in params:
        if name in documented:
            raise ApiError(501, f"bigquery_fake does not implement the query parameter {name!r} of {method}")
        if name not in implemented:
            raise ApiError(400, f"Invalid request: unknown query parameter {name!r} for {method}")


def _check_labels(labels) -> None:
    """Job labels ("Labels"): keys and values of at most 63 lowercase letters, digits, _ and -, keys
    starting with a letter."""
    if not isinstance(labels, dict):
        raise ApiError(400, "Invalid value for configuration.labels: a map of strings")
    for key, value in labels.items():
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or not re.fullmatch(r"[a-z0-9_-]{0,63}", str(value)):
            raise ApiError(400, f"Invalid label {key}: {value}: keys and values hold at most 63 lowercase letters, "
                                "digits, underscores and dashes, and a key starts with a letter")


def _check_query(query) -> dict:
    """JobConfigurationQuery: GoogleSQL, and of statements only `SELECT ERROR('...')`."""
    _check_fields(query, "jobQuery", "job.configuration.query")
    if query.get("useLegacySql", True) is not False:
        raise ApiError(501, "bigquery_fake runs GoogleSQL query jobs only (useLegacySql must be false)")
    if not isinstance(query.get("query"), str) or not ERROR_QUERY.match(query["query"]):
        raise ApiError(501, f"bigquery_fake runs only `SELECT ERROR('...')` as a query job, not: {query.get('query')!r}")
    return query


def _check_schema_fields(fields, where: str) -> list[dict]:
    if not isinstance(fields, list):
        raise ApiError(400, f"Invalid JSON payload received. Expected a list at '{where}'.")
    for i, f in enumerate(fields):
        _check_fields(f, "field", f"{where}[{i}]")
        if f.get("type") in ("RECORD", "STRUCT"):
            _check_schema_fields(f.get("fields", []), f"{where}[{i}].fields")
    return fields


# --- Avro -> BigQuery, as "Avro conversions" documents ---------------------------------------------

_PRIMITIVE = {"boolean": "BOOLEAN", "int": "INTEGER", "long": "INTEGER", "float": "FLOAT", "double": "FLOAT",
              "bytes": "BYTES", "string": "STRING"}
_LOGICAL = {("int", "date"): "DATE", ("int", "time-millis"): "TIME", ("long", "time-micros"): "TIME",
            ("long", "timestamp-millis"): "TIMESTAMP", ("long", "timestamp-micros"): "TIMESTAMP",
            ("long", "local-timestamp-millis"): "DATETIME", ("long", "local-timestamp-micros"): "DATETIME"}


def _decimal_type(precision: int, scale: int, targets: list[str]) -> str:
    """The documented choice: NUMERIC if it holds the value, else BIGNUMERIC, else STRING, among the targets."""
    fits = {"NUMERIC": precision - scale <= 29 and scale <= 9, "BIGNUMERIC": precision - scale <= 38 and scale <= 38,
            "STRING": True}
    ordered = [t for t in ("NUMERIC", "BIGNUMERIC", "STRING") if t in targets]
    return next((t for t in ordered if fits[t]), ordered[-1])


class _Converter:
    def __init__(self, logical: bool, decimal_targets: list[str]):
        self.logical, self.decimal_targets, self.named = logical, decimal_targets, {}

    def record_fields(self, record: dict) -> list[dict]:
        out = []
        for f in record["fields"]:
            conv = self.field(f["name"], f["type"])
            if conv is not None:
                out.append(conv)
        return out

    def field(self, name: str, t) -> dict | None:
        """A TableFieldSchema for an Avro field; None for a null-only field ("BigQuery ignores these")."""
        mode = "REQUIRED"
        if isinstance(t, list):
            branches = [b for b in t if b != "null"]
            if not branches:
                return None
            if len(branches) > 1:
                raise ApiError(501, f"bigquery_fake does not implement unions of several non-null types (field {name})")
            mode = "NULLABLE" if "null" in t else "REQUIRED"
            t = branches[0]
        if t == "null":
            return None
        t = self.resolve(t)
        if isinstance(t, dict) and t.get("type") == "array":
            items = self.resolve(t["items"])
            if isinstance(items, dict) and items.get("type") == "array":
                raise JobFailed("invalid", f"Arrays of arrays are not supported (field {name})")
            inner = self.field(name, items)
            if inner is None:
                return None  # arrays containing only NULL types are ignored
            return {**inner, "mode": "REPEATED"}
        if isinstance(t, dict) and t.get("type") == "map":
            value = self.field("value", t["values"])
            return {"name": name, "type": "RECORD", "mode": "REPEATED",
                    "fields": [{"name": "key", "type": "STRING", "mode": "REQUIRED"}] + ([value] if value else [])}
        return {"name": name, "type": self.type_of(t, name), "mode": mode,
                **({"fields": self.record_fields(t)} if isinstance(t, dict) and t.get("type") == "record" else {})}

    def resolve(self, t):
        if isinstance(t, str) and t not in _PRIMITIVE and t != "null":
            if t not in self.named:
                raise JobFailed("invalid", f"Error while reading data: unknown Avro type name {t!r}")
            return self.named[t]
        if isinstance(t, dict) and t.get("type") in ("record", "enum", "fixed") and "name" in t:
            name = t["name"] if "." in t["name"] or not t.get("namespace") else f"{t['namespace']}.{t['name']}"
            self.named.setdefault(name, t)
            self.named.setdefault(t["name"], t)
        return t

    def type_of(self, t, name: str) -> str:
        if isinstance(t, str):
            return _PRIMITIVE[t]
        base, logical = t.get("type"), t.get("logicalType")
        if logical == "decimal" and base in ("bytes", "fixed"):
            return _decimal_type(int(t["precision"]), int(t.get("scale", 0)), self.decimal_targets)
        if base == "record":
            return "RECORD"
        if base == "enum":
            return "STRING"
        if base == "fixed":
            return "BYTES"
        if isinstance(base, (dict, list)):
            raise ApiError(501, f"bigquery_fake does not implement nested type wrappers (field {name})")
        if self.logical and (base, logical) in _LOGICAL:
            return _LOGICAL[(base, logical)]
        return _PRIMITIVE[base]


def avro_table_schema(writer_schema: dict, use_avro_logical_types: bool,
                      decimal_targets: list[str] | None = None) -> list[dict]:
    """The BigQuery fields BigQuery derives from an Avro writer schema (top-level record)."""
    return _Converter(use_avro_logical_types, decimal_targets or ["NUMERIC"]).record_fields(writer_schema)


# --- schema update rules ("Modifying table schemas") -----------------------------------------------

def _evolve(table: list[dict], new: list[dict], options: set[str], label: str, path: str = "") -> list[dict]:
    """The table's fields after a load with schema `new`; JobFailed as BigQuery words it."""
    have = {f["name"].lower(): f for f in new}
    out = []
    for old in table:
        full = f"{path}{old['name']}"
        cur = have.pop(old["name"].lower(), None)
        if cur is None:
            if old.get("mode", "NULLABLE") == "REQUIRED":
                raise JobFailed("invalid", f"Provided Schema does not match Table {label}. Field {full} is missing "
                                           "in new schema")
            out.append(old)
            continue
        if cur["type"] != old["type"]:
            raise JobFailed("invalid", f"Provided Schema does not match Table {label}. Field {full} has changed type "
                                       f"from {old['type']} to {cur['type']}")
        old_mode, new_mode = old.get("mode", "NULLABLE"), cur.get("mode", "NULLABLE")
        mode = old_mode
        if old_mode != new_mode:
            if old_mode == "REQUIRED" and new_mode == "NULLABLE" and "ALLOW_FIELD_RELAXATION" in options:
                mode = "NULLABLE"
            elif not (old_mode == "NULLABLE" and new_mode == "REQUIRED"):  # required data fits a nullable column
                raise JobFailed("invalid", f"Provided Schema does not match Table {label}. Field {full} has changed "
                                           f"mode from {old_mode} to {new_mode}")
        merged = {**old, "mode": mode}
        if old["type"] == "RECORD":
            merged["fields"] = _evolve(old.get("fields", []), cur.get("fields", []), options, label, f"{full}.")
        out.append(merged)
    for cur in new:
        if cur["name"].lower() not in have:
            continue
        full = f"{path}{cur['name']}"
        if "ALLOW_FIELD_ADDITION" not in options:
            raise JobFailed("invalid", f"Provided Schema does not match Table {label}. Cannot add fields "
                                       f"(field: {full})")
        if cur.get("mode") == "REQUIRED":
            raise JobFailed("invalid", f"Provided Schema does not match Table {label}. Cannot add required fields "
                                       f"to an existing schema. (field: {full})")
        out.append(cur)
    return out


def _patched(old: list[dict], new: list[dict], label: str, path: str = "") -> None:
    """Raise unless tables.patch may set schema `new` on a table of schema `old`: every column kept
    with its type, its mode kept or relaxed from REQUIRED to NULLABLE; new columns not REQUIRED."""
    have = {f["name"].lower(): f for f in new}
    for o in old:
        full, n = f"{path}{o['name']}", have.get(o["name"].lower())
        if n is None:
            raise ApiError(400, f"Provided Schema does not match Table {label}. Field {full} is missing in new schema")
        if n["type"] != o["type"]:
            raise ApiError(400, f"Provided Schema does not match Table {label}. Field {full} has changed type from "
                                f"{o['type']} to {n['type']}")
        om, nm = o.get("mode", "NULLABLE"), n.get("mode", "NULLABLE")
        if om != nm and (om, nm) != ("REQUIRED", "NULLABLE"):
            raise ApiError(400, f"Provided Schema does not match Table {label}. Field {full} has changed mode from "
                                f"{om} to {nm}")
        if o["type"] == "RECORD":
            _patched(o.get("fields", []), n.get("fields", []), label, f"{full}.")
    before = {o["name"].lower() for o in old}
    for n in new:
        if n["name"].lower() not in before and n.get("mode", "NULLABLE") == "REQUIRED":
            raise ApiError(400, f"Provided Schema does not match Table {label}. Cannot add required fields to an "
                                f"existing schema. (field: {path}{n['name']})")


def _same_schema(a: list[dict], b: list[dict]) -> bool:
    """The same columns in the same order, of the same types and modes (names compared as BigQuery
    compares them, case-insensitively)."""
    def key(fields):
        return [(f["name"].lower(), f["type"], f.get("mode", "NULLABLE"), key(f.get("fields", []))) for f in fields]
    return key(a) == key(b)


def _project_row(record: dict, fields: list[dict], where: str):
    """A decoded record read with the load schema: by name, missing columns null (or refused if REQUIRED)."""
    row = {}
    for f in fields:
        value = record.get(f["name"]) if record is not None else None
        mode = f.get("mode", "NULLABLE")
        if mode == "REPEATED":
            if isinstance(value, dict):  # an Avro map: BigQuery's REPEATED RECORD of key and value
                value = [{"key": k, "value": v} for k, v in value.items()]
            value = list(value or [])
            if f["type"] == "RECORD":
                value = [_project_row(v, f.get("fields", []), where) for v in value]
        elif value is None:
            if mode == "REQUIRED":
                raise JobFailed("invalid", f"Error while reading data, error message: {where}: required field "
                                           f"{f['name']} has no value")
        elif f["type"] == "RECORD":
            value = _project_row(value, f.get("fields", []), where)
        row[f["name"]] = value
    return row


def _nullable(fields: list[dict]) -> list[dict]:
    return [{**f, "mode": "NULLABLE" if f.get("mode") == "REQUIRED" else f.get("mode", "NULLABLE"),
             **({"fields": _nullable(f["fields"])} if f.get("fields") else {})} for f in fields]


def _same_column_types(file_fields: list[dict], schema: list[dict], where: str, path: str = "") -> None:
    """A provided schema overrides the derived one by name; a column typed otherwise cannot be read."""
    by_name = {f["name"].lower(): f for f in file_fields}
    for f in schema:
        src = by_name.get(f["name"].lower())
        if src is None:
            continue
        if src["type"] != f["type"] or (src["mode"] == "REPEATED") != (f.get("mode") == "REPEATED"):
            raise JobFailed("invalid", f"Error while reading data, error message: {where}: field {path}{f['name']} "
                                       f"is {src['mode']} {src['type']} in the file, {f.get('mode', 'NULLABLE')} "
                                       f"{f['type']} in the schema")
        if f["type"] == "RECORD":
            _same_column_types(src.get("fields", []), f.get("fields", []), where, f"{path}{f['name']}.")


# --- Avro schema resolution of a file to the load's reader schema -----------------------------------

_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}


_AVRO_PRIMITIVES = {*_PRIMITIVE, "null"}


class _Mismatch(Exception):
    """A writer schema that the reader schema cannot read."""


def _named(schema) -> dict:
    """Named types by full name (fastavro gives full names in `name` and in references)."""
    out: dict[str, dict] = {}

    def walk(t):
        if isinstance(t, list):
            for b in t:
                walk(b)
        elif isinstance(t, dict):
            kind = t.get("type")
            if kind in ("record", "error", "enum", "fixed"):
                out.setdefault(t["name"], t)
            for f in t.get("fields", []) if kind in ("record", "error") else []:
                walk(f["type"])
            if kind == "array":
                walk(t["items"])
            elif kind == "map":
                walk(t["values"])
            elif isinstance(kind, (dict, list)):
                walk(kind)
    walk(schema)
    return out


def _describe(t) -> str:
    if isinstance(t, list):
        return "union " + "|".join(_describe(b) for b in t)
    if isinstance(t, str):
        return t
    if t.get("logicalType") == "decimal":
        return f"decimal({t.get('precision')},{t.get('scale', 0)})"
    if t.get("logicalType"):
        return f"{t['type']} ({t['logicalType']})"
    if t.get("type") in ("record", "error", "enum", "fixed"):
        return f"{t['type']} {t['name'].rsplit('.', 1)[-1]}"
    return str(t.get("type"))


def _resolve(w, r, wn: dict, rn: dict, path: str, seen: set) -> None:
    """Raise _Mismatch unless data written with `w` can be read as `r` (Avro's "Schema Resolution",
    stricter for logical types: see the module doc)."""
    def deref(t, names):
        while True:
            if isinstance(t, str) and t in names:
                t = names[t]
            elif isinstance(t, dict) and isinstance(t.get("type"), (dict, list)):
                t = t["type"]
            elif isinstance(t, dict) and t.get("type") in _PRIMITIVE and not t.get("logicalType"):
                t = t["type"]
            else:
                return t
    w, r = deref(w, wn), deref(r, rn)
    if (id(w), id(r)) in seen:
        return
    seen = seen | {(id(w), id(r))}
    where = f"field {path}: " if path else ""
    if isinstance(w, list):  # every branch the writer may have used must be readable
        for branch in w:
            _resolve(branch, r, wn, rn, path, seen)
        return
    if isinstance(r, list):  # the first reader branch that matches is used
        for branch in r:
            try:
                return _resolve(w, branch, wn, rn, path, seen)
            except _Mismatch:
                continue
        raise _Mismatch(f"{where}{_describe(w)} cannot be read as {_describe(r)}")
    wl = w.get("logicalType") if isinstance(w, dict) else None
    rl = r.get("logicalType") if isinstance(r, dict) else None
    if wl == "decimal" and rl == "decimal":
        ws, rs, wp, rp = int(w.get("scale", 0)), int(r.get("scale", 0)), int(w["precision"]), int(r["precision"])
        if ws != rs:
            raise _Mismatch(f"{where}decimal scale {ws} cannot be read as scale {rs} (the values would change)")
        if rp < wp:
            raise _Mismatch(f"{where}decimal precision {wp} cannot be read as the narrower precision {rp}")
        if (w["type"] == "fixed") != (r["type"] == "fixed") or (
                w["type"] == "fixed" and (w["size"], w["name"].rsplit(".", 1)[-1]) !=
                (r["size"], r["name"].rsplit(".", 1)[-1])):
            raise _Mismatch(f"{where}{_describe(w)} of {w['type']} cannot be read as one of {r['type']}")
        return
    if wl != rl:
        raise _Mismatch(f"{where}{_describe(w)} cannot be read as {_describe(r)}: logical types must be the same")
    wt = w if isinstance(w, str) else w.get("type")
    rt = r if isinstance(r, str) else r.get("type")
    if wt in _AVRO_PRIMITIVES and rt in _AVRO_PRIMITIVES:
        if wt != rt and (wt, rt) not in _PROMOTIONS:
            raise _Mismatch(f"{where}{wt} cannot be read as {rt}")
        return
    if wt != rt and not (wt in ("record", "error") and rt in ("record", "error")):
        raise _Mismatch(f"{where}{_describe(w)} cannot be read as {_describe(r)}")
    if wt in ("record", "error", "enum", "fixed"):
        a, b = w["name"].rsplit(".", 1)[-1], r["name"].rsplit(".", 1)[-1]
        if a != b:
            raise _Mismatch(f"{where}{wt} names {a} and {b} differ")
    if wt == "fixed" and w["size"] != r["size"]:
        raise _Mismatch(f"{where}fixed sizes {w['size']} and {r['size']} differ")
    if wt == "array":
        _resolve(w["items"], r["items"], wn, rn, path, seen)
    elif wt == "map":
        _resolve(w["values"], r["values"], wn, rn, path, seen)
    elif wt in ("record", "error"):
        written = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            sub = f"{path}.{f['name']}" if path else f["name"]
            if f["name"] in written:
                _resolve(written[f["name"]]["type"], f["type"], wn, rn, sub, seen)
            elif "default" not in f:
                raise _Mismatch(f"field {sub} has no default and the file does not have it")


def _ms(t: float) -> str:
    return str(int(t * 1000))


def _destination(job: dict) -> dict | None:
    config = job["configuration"]
    spec = config.get("load") or config.get("copy")
    return spec["destinationTable"] if spec else None  # a query job here writes no table


class FakeBigQuery:
    """State and behaviour; `start()` serves it on 127.0.0.1 for google-cloud-bigquery."""

    def __init__(self, read_object: Callable[[str], bytes], *, default_location: str = "US",
                 running_polls: int = 0, max_partitions: int = 10_000, max_load_jobs_per_day: int = 1_500,
                 max_source_uris: int = 10_000, max_copy_jobs_per_day: int = 1_000,
                 clock: Callable[[], float] = time.time):
        self.read_object = read_object
        self.default_location = default_location
        #: BigQuery's quotas and limits: partitions per table; load jobs per table over any 24 hours,
        #: failed ones included; source URIs per load job
        self.max_partitions = max_partitions
        self.max_load_jobs_per_day = max_load_jobs_per_day
        self.max_source_uris = max_source_uris
        self.max_copy_jobs_per_day = max_copy_jobs_per_day  # per destination table, failed ones included
        #: the fake's time (seconds since the epoch): the quota's 24 hours and tables' expiration
        self.clock = clock
        self.load_jobs: dict[tuple[str, str, str], list[float]] = {}  # (project, dataset, table) -> job start times
        self.copy_jobs: dict[tuple[str, str, str], list[float]] = {}  # (project, dataset, destination) -> the same
        #: jobs.get answers RUNNING this many times before a job runs (0: jobs.insert runs it)
        self.running_polls = running_polls
        self.datasets: dict[tuple[str, str], dict] = {}
        self.tables: dict[tuple[str, str, str], dict] = {}  # {"resource", "schema", "partitions": {id: [rows]}}
        self.jobs: dict[tuple[str, str], dict] = {}  # {"resource", "polls_left"}
        self.calls: list[tuple[str, str]] = []  # (method name, path) of every request
        self.denied: set[str] = set()
        self.ddl: list[str] = []  # the ALTER statements run, in order
        #: (running job, job started beside it) for load jobs into one destination at once; BigQuery
        #: allows it, and whichever ends last wins: a test of a loader's serialisation reads this
        self.overlaps: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None

    # --- for tests -------------------------------------------------------------------------------

    def deny(self, *permissions: str) -> None:
        """Answer 403 to every method needing one of these permissions (e.g. bigquery.jobs.create)."""
        self.denied.update(permissions)

    def table_state(self, project: str, dataset: str, table: str) -> dict | None:
        return self.tables.get((project, dataset, table))

    def partition_rows(self, project: str, dataset: str, table: str, partition: str) -> list[dict]:
        """The partition's rows as a reader sees them: with every column of the table now."""
        t = self.tables.get((project, dataset, table))
        if t is None:
            return []
        return [_project_row(r, _nullable(t["schema"]), "read") for r in t["partitions"].get(partition, [])]

    def partition_counts(self, project: str, dataset: str, table: str) -> dict[str, int]:
        t = self.tables.get((project, dataset, table))
        return {p: len(r) for p, r in t["partitions"].items() if r} if t else {}

    def schema(self, project: str, dataset: str, table: str) -> list[dict] | None:
        t = self.tables.get((project, dataset, table))
        return t["schema"] if t else None

    def job_ids(self, project: str) -> list[str]:
        return [j for (p, j) in self.jobs if p == project]

    def calls_of(self, method: str) -> int:
        return sum(1 for m, _ in self.calls if m == method)

    # --- the HTTP server -------------------------------------------------------------------------

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: tests read `fake.calls`
                pass

            def setup(self):  # headers and body go out as separate writes: no Nagle delay between them
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body = fake.handle(self.command, self.path, raw, dict(self.headers.items()))
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="bigquery-fake",
                         daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None, "call start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def client(self, project: str, location: str | None = None):
        """A real google-cloud-bigquery Client talking to this fake, with anonymous credentials."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery

        return bigquery.Client(project=project, location=location, credentials=AnonymousCredentials(),
                               client_options={"api_endpoint": self.url})

    # --- routing ---------------------------------------------------------------------------------

    _ROUTES = [
        ("GET", r"/projects/(?P<p>[^/]+)/datasets", "datasets.list"),
        ("POST", r"/projects/(?P<p>[^/]+)/datasets", "datasets.insert"),
        ("GET", r"/projects/(?P<p>[^/]+)/datasets/(?P<d>[^/]+)", "datasets.get"),
        ("DELETE", r"/projects/(?P<p>[^/]+)/datasets/(?P<d>[^/]+)", "datasets.delete"),
        ("POST", r"/projects/(?P<p>[^/]+)/datasets/(?P<d>[^/]+)/tables", "tables.insert"),
        ("GET", r"/projects/(?P<p>[^/]+)/datasets/(?P<d>[^/]+)/tables/(?P<t>[^/]+)", "tables.get"),
        ("DELETE", r"/projects/(?P<p>[^/]+)/datasets/(?P<d>[^/]+)/tables/(?P<t>[^/]+)", "tables.delete"),
        ("PATCH", r"/projects/(?P<p>[^/]+)/datasets/(?P<d>[^/]+)/tables/(?P<t>[^/]+)", "tables.patch"),
        ("POST", r"/projects/(?P<p>[^/]+)/jobs", "jobs.insert"),
        ("GET", r"/projects/(?P<p>[^/]+)/jobs/(?P<j>[^/]+)", "jobs.get"),
        ("POST", r"/projects/(?P<p>[^/]+)/queries", "jobs.query"),
    ]

    def handle(self, verb: str, target: str, raw: bytes, headers: dict | None = None) -> tuple[int, dict | None]:
        url = urlsplit(target)
        path = url.path
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        with self._lock:
            self._expire()
            try:
                if not path.startswith(API_PREFIX):
                    raise ApiError(404, f"Not found: {path} is not a BigQuery v2 path")
                rel = path[len(API_PREFIX):]
                for v, pattern, method in self._ROUTES:
                    m = re.fullmatch(pattern, rel)
                    if m and v == verb:
                        break
                else:
                    raise ApiError(501, f"bigquery_fake does not implement {verb} {rel}")
                self.calls.append((method, rel))
                _check_params(method, params)
                if PERMISSIONS[method] in self.denied:
                    raise ApiError(403, f"Access Denied: Project {m['p']}: User does not have "
                                        f"{PERMISSIONS[method]} permission in project {m['p']}.")
                body = None
                if verb in ("POST", "PUT", "PATCH"):
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        raise ApiError(400, "Invalid JSON payload received.") from None
                args = {k: unquote(v) for k, v in m.groupdict().items()}
                if method == "tables.patch":
                    args["if_match"] = {k.lower(): v for k, v in (headers or {}).items()}.get("if-match")
                return getattr(self, "_" + method.replace(".", "_"))(body=body, params=params, **args)
            except ApiError as exc:
                return exc.code, exc.body()

    # --- datasets --------------------------------------------------------------------------------

    def _dataset(self, p: str, d: str) -> dict:
        ds = self.datasets.get((p, d))
        if ds is None:
            raise ApiError(404, f"Not found: Dataset {p}:{d}")
        return ds

    def _datasets_get(self, p, d, body, params):
        return 200, self._dataset(p, d)

    def _datasets_list(self, p, body, params):
        items = [{"kind": "bigquery#dataset", "id": r["id"], "datasetReference": r["datasetReference"],
                  "location": r["location"]} for (proj, _), r in sorted(self.datasets.items()) if proj == p]
        return 200, {"kind": "bigquery#datasetList", "datasets": items}

    def _datasets_insert(self, p, body, params):
        _check_fields(body, "dataset", "dataset")
        ref = _check_fields(body.get("datasetReference"), "datasetReference", "dataset.datasetReference")
        d = ref.get("datasetId")
        if ref.get("projectId", p) != p or not isinstance(d, str) or not re.fullmatch(r"[A-Za-z0-9_]{1,1024}", d):
            raise ApiError(400, f"Invalid dataset ID \"{d}\". Dataset IDs must be alphanumeric (plus underscores) "
                                "and must be at most 1024 characters long.")
        if (p, d) in self.datasets:
            raise ApiError(409, f"Already Exists: Dataset {p}:{d}")
        now = _ms(self.clock())
        resource = {"kind": "bigquery#dataset", "id": f"{p}:{d}", "datasetReference": {"projectId": p, "datasetId": d},
                    "location": body.get("location") or self.default_location, "creationTime": now,
                    "lastModifiedTime": now, "etag": uuid.uuid4().hex,
                    **{k: body[k] for k in ("labels", "description", "friendlyName") if k in body}}
        self.datasets[(p, d)] = resource
        return 200, resource

    def _datasets_delete(self, p, d, body, params):
        self._dataset(p, d)
        tables = [k for k in self.tables if k[:2] == (p, d)]
        if tables and params.get("deleteContents") != "true":
            raise ApiError(400, f"Dataset {p}:{d} is still in use")
        for k in tables:
            del self.tables[k]
        del self.datasets[(p, d)]
        return 204, None

    # --- tables ----------------------------------------------------------------------------------

    def _table(self, p: str, d: str, t: str) -> dict:
        self._dataset(p, d)
        table = self.tables.get((p, d, t))
        if table is None:
            raise ApiError(404, f"Not found: Table {p}:{d}.{t}")
        return table

    def _table_resource(self, table: dict) -> dict:
        rows = sum(len(r) for r in table["partitions"].values())
        return {**table["resource"], "schema": {"fields": table["schema"]}, "numRows": str(rows),
                "numPartitions": str(sum(1 for r in table["partitions"].values() if r))}

    def _tables_get(self, p, d, t, body, params):
        if "$" in t:
            raise ApiError(501, "bigquery_fake does not implement tables.get on a partition decorator")
        return 200, self._table_resource(self._table(p, d, t))

    def _new_table(self, p, d, t, schema: list[dict], partitioning: dict | None, extra: dict) -> dict:
        if not re.fullmatch(r"[\w-]{1,1024}", t):
            raise ApiError(400, f"Invalid table ID \"{t}\".")
        now = _ms(self.clock())
        resource = {"kind": "bigquery#table", "id": f"{p}:{d}.{t}", "etag": uuid.uuid4().hex,
                    "tableReference": {"projectId": p, "datasetId": d, "tableId": t}, "type": "TABLE",
                    "creationTime": now, "lastModifiedTime": now, "location": self.datasets[(p, d)]["location"],
                    **({"timePartitioning": dict(partitioning)} if partitioning else {}), **extra}
        table = {"resource": resource, "schema": schema, "partitions": {}}
        self.tables[(p, d, t)] = table
        return table

    def _tables_insert(self, p, d, body, params):
        _check_fields(body, "table", "table")
        ref = _check_fields(body.get("tableReference"), "tableReference", "table.tableReference")
        if (ref.get("projectId"), ref.get("datasetId")) != (p, d):
            raise ApiError(400, "Invalid table reference: project and dataset must match the request path")
        self._dataset(p, d)
        t = ref.get("tableId")
        if (p, d, t) in self.tables:
            raise ApiError(409, f"Already Exists: Table {p}:{d}.{t}")
        schema = _check_schema_fields(_check_fields(body.get("schema", {"fields": []}), "schema", "table.schema")
                                      .get("fields", []), "table.schema.fields")
        partitioning = body.get("timePartitioning")
        if partitioning is not None:
            _check_fields(partitioning, "timePartitioning", "table.timePartitioning")
            if partitioning.get("type") not in _DECORATOR_DIGITS:
                raise ApiError(400, f"Invalid value for type: {partitioning.get('type')} is not a valid value")
            if partitioning.get("field"):
                try:
                    _partition_column(schema, partitioning, f"{p}:{d}.{t}")
                except JobFailed as exc:
                    raise ApiError(400, exc.message) from None
        extra = {k: body[k] for k in ("labels", "description", "friendlyName") if k in body}
        if "expirationTime" in body:
            extra["expirationTime"] = self._expiration(body["expirationTime"])
        table = self._new_table(p, d, t, schema, partitioning, extra)
        return 200, self._table_resource(table)

    @staticmethod
    def _expiration(value) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.isdigit():
            raise ApiError(400, f"Invalid value for expirationTime: {value!r} (milliseconds since the epoch)")
        return value

    def _expire(self) -> None:
        """Tables past their expirationTime are deleted, as BigQuery deletes them."""
        now = self.clock() * 1000
        for key in [k for k, t in self.tables.items()
                    if t["resource"].get("expirationTime") and int(t["resource"]["expirationTime"]) <= now]:
            del self.tables[key]

    def _touch(self, table: dict) -> None:
        """A change of the table's data or schema: a new etag, as BigQuery gives one."""
        table["resource"]["lastModifiedTime"] = _ms(self.clock())
        table["resource"]["etag"] = uuid.uuid4().hex

    def _tables_patch(self, p, d, t, body, params, if_match=None):
        """tables.patch of the schema ("Modifying table schemas": add NULLABLE or REPEATED columns,
        nested ones too, relax REQUIRED to NULLABLE; nothing else) and of the expiration."""
        _check_fields(body, "table", "table")
        if "$" in t:
            raise ApiError(400, f"Invalid table ID \"{t}\": tables.patch takes a table, not a partition")
        table = self._table(p, d, t)
        if if_match is not None and if_match != table["resource"]["etag"]:
            raise ApiError(412, "Precondition check failed.")
        other = set(body) - {"schema", "expirationTime", "tableReference"}
        if other:
            raise ApiError(501, f"bigquery_fake does not implement tables.patch of {sorted(other)}")
        if "schema" in body:
            new = _check_schema_fields(_check_fields(body["schema"], "schema", "table.schema").get("fields", []),
                                       "table.schema.fields")
            _patched(table["schema"], new, f"{p}:{d}.{t}")
            table["schema"] = new
        if "expirationTime" in body:
            when = self._expiration(body["expirationTime"])
            if when is None:
                table["resource"].pop("expirationTime", None)
            else:
                table["resource"]["expirationTime"] = when
        self._touch(table)
        return 200, self._table_resource(table)

    def _partition_id(self, table: dict, label: str, decorator: str) -> str:
        kind = (table["resource"].get("timePartitioning") or {}).get("type")
        if kind is None:
            raise JobFailed("invalid", f"Cannot use a partition decorator on the non-partitioned table {label}")
        try:
            ok = len(decorator) == _DECORATOR_DIGITS[kind] and datetime.strptime(decorator, _DECORATOR_FORMAT[kind])
        except ValueError:
            ok = False
        if not ok:
            raise JobFailed("invalid", f"Invalid partition decorator ${decorator} for table {label} partitioned by "
                                       f"{kind}")
        field = table["resource"]["timePartitioning"].get("field")
        if field and not FIRST_YEAR <= ok.year <= LAST_YEAR:
            raise JobFailed("invalid", f"Invalid partition decorator ${decorator} for table {label}: a table "
                                       f"partitioned on column {field} has partitions for {FIRST_YEAR}-01-01 to "
                                       f"{LAST_YEAR}-12-31 only (rows outside are in __UNPARTITIONED__, which no "
                                       "decorator names)")
        return decorator

    @staticmethod
    def _rows_in(table: dict, rows: list[dict], pid: str, label: str) -> None:
        """A decorator load into a table partitioned on a column holds only rows of that partition."""
        tp = table["resource"].get("timePartitioning") or {}
        if not tp.get("field") or not pid:
            return
        for row in rows:
            value = next((v for k, v in row.items() if k.lower() == tp["field"].lower()), None)
            got = _column_partition(value, tp["type"])
            if got != pid:
                raise JobFailed("invalid", f"Some rows belong to different partitions rather than destination "
                                           f"partition {pid} of table {label} (a row's {tp['field']} is {value!r}, "
                                           f"partition {got})")

    def _tables_delete(self, p, d, t, body, params):
        name, _, decorator = t.partition("$")
        table = self._table(p, d, name)
        if decorator:  # "Delete a partition": the decorator names it
            try:
                pid = self._partition_id(table, f"{p}:{d}.{name}", decorator)
            except JobFailed as exc:
                raise ApiError(400, exc.message) from None
            table["partitions"].pop(pid, None)
        else:
            del self.tables[(p, d, name)]
        return 204, None

    # --- jobs ------------------------------------------------------------------------------------

    def _jobs_insert(self, p, body, params):
        _check_fields(body, "job", "job")
        ref = _check_fields(body.get("jobReference", {}), "jobReference", "job.jobReference")
        job_id = ref.get("jobId") or f"job_{uuid.uuid4().hex}"
        if ref.get("projectId", p) != p:
            raise ApiError(400, "The project in jobReference must match the request path")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,1024}", job_id):
            raise ApiError(400, f"Invalid job ID \"{job_id}\". Job IDs must be alphanumeric (plus underscores and "
                                "dashes) and must be at most 1024 characters long.")
        config = _check_fields(body.get("configuration"), "configuration", "job.configuration")
        kind = next((k for k in ("copy", "query") if k in config), "load")
        if config.get("jobType", kind.upper()) != kind.upper() or len({"load", "copy", "query"} & set(config)) != 1:
            raise ApiError(501, "bigquery_fake implements load, copy and query jobs only, one configuration per job")
        _check_labels(config.get("labels", {}))
        spec = self._check_load(config["load"], p) if kind == "load" else self._check_copy(config["copy"]) \
            if kind == "copy" else _check_query(config["query"])
        if (p, job_id) in self.jobs:  # job ids are unique in a project, whatever the kind and the location
            location = self.jobs[(p, job_id)]["resource"]["jobReference"]["location"]
            raise ApiError(409, f"Already Exists: Job {p}:{location}.{job_id}")
        dest = spec.get("destinationTable") or {}
        location = ref.get("location") or (self.datasets.get((p, dest.get("datasetId"))) or {}).get("location") \
            or self.default_location
        over_quota = False
        if kind in ("load", "copy"):  # "Load jobs per table per day", "Copy jobs per destination table per
            # day": counted over any 24 hours, failed ones included
            counts, limit = (self.load_jobs, self.max_load_jobs_per_day) if kind == "load" else \
                (self.copy_jobs, self.max_copy_jobs_per_day)
            started = counts.setdefault((dest.get("projectId", p), dest["datasetId"],
                                         dest["tableId"].partition("$")[0]), [])
            started.append(self.clock())
            over_quota = sum(t > self.clock() - 86_400 for t in started) > limit
        now = _ms(self.clock())
        resource = {"kind": "bigquery#job", "etag": uuid.uuid4().hex, "id": f"{p}:{location}.{job_id}",
                    "jobReference": {"projectId": p, "jobId": job_id, "location": location},
                    "configuration": {**config, "jobType": kind.upper()}, "user_email": "fake@kafka-landing.test",
                    "status": {"state": "RUNNING"}, "statistics": {"creationTime": now, "startTime": now}}
        job = {"resource": resource, "polls_left": self.running_polls, "over_quota": over_quota}
        self.overlaps += [(j, job_id) for (proj, j), other in self.jobs.items() if proj == p
                          and other["resource"]["status"]["state"] != "DONE"
                          and dest and _destination(other["resource"]) == dest]
        self.jobs[(p, job_id)] = job
        if job["polls_left"] <= 0:
            self._run(job)
        return 200, resource

    def _check_copy(self, copy) -> dict:
        """JobConfigurationTableCopy: `sourceTable` or `sourceTables`, `destinationTable` (required),
        `writeDisposition` (WRITE_TRUNCATE, WRITE_APPEND, WRITE_EMPTY: the default), `createDisposition`."""
        _check_fields(copy, "copy", "job.configuration.copy")
        if "sourceTable" in copy and "sourceTables" in copy:
            raise ApiError(400, "Only one of sourceTable and sourceTables may be specified")
        sources = copy.get("sourceTables") if "sourceTables" in copy else [copy.get("sourceTable")]
        if not isinstance(sources, list) or not sources or sources == [None]:
            raise ApiError(400, "Copy configuration must specify a source table")
        for i, src in enumerate(sources):
            _check_fields(src, "tableReference", f"job.configuration.copy.sourceTables[{i}]")
        if len(sources) != 1:
            raise ApiError(501, "bigquery_fake implements copies of one source table")
        dest = _check_fields(copy.get("destinationTable"), "tableReference", "job.configuration.copy.destinationTable")
        for ref in (*sources, dest):
            if not all(isinstance(ref.get(k), str) for k in ("projectId", "datasetId", "tableId")):
                raise ApiError(400, "Copy configuration must name each table by projectId, datasetId and tableId")
        for key, allowed in (("writeDisposition", {"WRITE_TRUNCATE", "WRITE_APPEND", "WRITE_EMPTY"}),
                             ("createDisposition", {"CREATE_IF_NEEDED", "CREATE_NEVER"})):
            if key in copy and copy[key] not in allowed:
                raise ApiError(400, f"Invalid value for {key}: {copy[key]}")
        return copy

    def _check_load(self, load, p: str) -> dict:
        _check_fields(load, "load", "job.configuration.load")
        if load.get("sourceFormat") != "AVRO":
            raise ApiError(501, f"bigquery_fake implements AVRO loads only, not {load.get('sourceFormat')}")
        uris = load.get("sourceUris")
        if not isinstance(uris, list) or not uris:
            raise ApiError(400, "Load configuration must specify at least one source URI")
        if len(uris) > self.max_source_uris:  # "Quotas and limits", load jobs: source URIs per job
            raise ApiError(400, f"Too many sources provided: {len(uris)}. Limit is {self.max_source_uris}.")
        for uri in uris:
            if not isinstance(uri, str) or not re.fullmatch(r"gs://[^/]+/.+", uri):
                raise ApiError(400, f"Invalid source URI {uri!r}: expected gs://bucket/object")
            if "*" in uri:
                raise ApiError(400, f"bigquery_fake refuses the wildcard URI {uri}: kafka_landing must load exactly "
                                    "the files its done file lists")
        dest = _check_fields(load.get("destinationTable"), "tableReference", "job.configuration.load.destinationTable")
        if not all(isinstance(dest.get(k), str) for k in ("projectId", "datasetId", "tableId")):
            raise ApiError(400, "Load configuration must specify a destination table")
        for key, allowed in (("writeDisposition", {"WRITE_TRUNCATE", "WRITE_APPEND"}),
                             ("createDisposition", {"CREATE_IF_NEEDED", "CREATE_NEVER"})):
            if key in load and load[key] not in allowed:
                code = 501 if load[key] in ("WRITE_EMPTY", "WRITE_TRUNCATE_DATA") else 400
                raise ApiError(code, f"Invalid value for {key}: {load[key]}")
        options = load.get("schemaUpdateOptions", [])
        if not isinstance(options, list) or not set(options) <= {"ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"}:
            raise ApiError(400, f"Invalid value for schemaUpdateOptions: {options}")
        decorated = "$" in dest["tableId"]
        if options and not (load.get("writeDisposition") == "WRITE_APPEND" or
                            (load.get("writeDisposition") == "WRITE_TRUNCATE" and decorated)):
            raise ApiError(400, "Schema update options should only be specified with WRITE_APPEND disposition, or "
                                "with WRITE_TRUNCATE disposition on a table partition.")
        if not decorated and load.get("writeDisposition") not in ("WRITE_TRUNCATE", "WRITE_APPEND"):
            raise ApiError(501, "bigquery_fake implements loads into a partition decorator (table$YYYYMMDDHH) and "
                                "WRITE_TRUNCATE or WRITE_APPEND of a whole table only")
        if "timePartitioning" in load:
            _check_fields(load["timePartitioning"], "timePartitioning", "job.configuration.load.timePartitioning")
        if "schema" in load:
            _check_schema_fields(_check_fields(load["schema"], "schema", "job.configuration.load.schema")
                                 .get("fields", []), "job.configuration.load.schema.fields")
        reference = load.get("referenceFileSchemaUri")
        if reference is not None:
            if not isinstance(reference, str) or not re.fullmatch(r"gs://[^/]+/.+", reference):
                raise ApiError(400, f"Invalid reference file schema URI {reference!r}: expected gs://bucket/object")
            if any(c in reference for c in "*?["):
                raise ApiError(400, f"bigquery_fake refuses the wildcard URI {reference}: a reference file is one "
                                    "object")
            if "schema" in load:
                raise ApiError(501, "bigquery_fake does not implement referenceFileSchemaUri together with schema "
                                    "(which of the two decides is not documented)")
        targets = load.get("decimalTargetTypes", ["NUMERIC"])
        if not targets or not set(targets) <= {"NUMERIC", "BIGNUMERIC", "STRING"} or len(set(targets)) != len(targets):
            raise ApiError(400, f"Invalid decimalTargetTypes: {targets}")
        return load

    def _object(self, uri: str) -> bytes:
        try:
            return self.read_object(uri)
        except FileNotFoundError:
            raise JobFailed("notFound", f"Not found: URI {uri}") from None

    @staticmethod
    def _read(uri: str, data: bytes, reader_schema: dict | None = None) -> tuple[dict, list[dict]]:
        """(writer schema, records read with `reader_schema` or the writer's)."""
        try:
            reader = fastavro.reader(io.BytesIO(data), reader_schema=reader_schema)
            return reader.writer_schema, list(reader)
        except Exception as exc:  # fastavro raises several types for a bad file
            raise JobFailed("invalid", f"Error while reading data, error message: The Apache Avro library "
                                       f"failed to read data with the following error: {exc} File: {uri}") from None

    def _jobs_get(self, p, j, body, params):
        job = self.jobs.get((p, j))
        location = params.get("location")
        if job is None or (location and location.lower() != job["resource"]["jobReference"]["location"].lower()):
            raise ApiError(404, f"Not found: Job {p}:{location or self.default_location}.{j}")
        if job["resource"]["status"]["state"] != "DONE":
            job["polls_left"] -= 1
            if job["polls_left"] <= 0:
                self._run(job)
        return 200, job["resource"]

    def _run(self, job: dict) -> None:
        """Run a load or copy job whole: on any failure nothing changes and the job ends DONE with
        errorResult."""
        resource = job["resource"]
        config = resource["configuration"]
        try:
            if "query" in config:  # SELECT ERROR('...'): checked by jobs.insert, fails with its message
                message = ERROR_QUERY.match(config["query"]["query"])["message"]
                raise JobFailed("invalidQuery", re.sub(r"\\(.)", r"\1", message))
            if "copy" in config:
                if job.get("over_quota"):
                    raise JobFailed("quotaExceeded", f"Quota exceeded: Your table exceeded quota for copies per "
                                                     f"destination table. Table: "
                                                     f"{config['copy']['destinationTable']['tableId'].partition('$')[0]}")
                resource["statistics"]["copy"] = self._copy(resource["jobReference"], config["copy"])
            else:
                load = config["load"]
                if job.get("over_quota"):
                    dest = load["destinationTable"]
                    raise JobFailed("quotaExceeded", f"Quota exceeded: Your table exceeded quota for imports or "
                                                     f"query appends per table. Table: "
                                                     f"{dest['tableId'].partition('$')[0]}")
                resource["statistics"]["load"] = self._load(resource["jobReference"], load)
        except (JobFailed, ApiError) as exc:  # an ApiError here: what the fake cannot load, said by the job
            reason = exc.reason if isinstance(exc, JobFailed) else ApiError.REASON[exc.code]
            error = {"reason": reason, "message": exc.message}
            resource["status"] = {"state": "DONE", "errorResult": error, "errors": [error]}
        except Exception as exc:  # noqa: BLE001 - a bug of the fake: end the job loudly, never leave it pending
            error = {"reason": "internalError", "message": f"the BigQuery fake failed: {exc!r}"}
            resource["status"] = {"state": "DONE", "errorResult": error, "errors": [error]}
        else:
            resource["status"] = {"state": "DONE"}
        resource["statistics"]["endTime"] = _ms(self.clock())

    def _load(self, ref: dict, load: dict) -> dict:
        dest = load["destinationTable"]
        p, d = dest["projectId"], dest["datasetId"]
        name, _, decorator = dest["tableId"].partition("$")
        label = f"{p}:{d}.{name}"
        ds = self.datasets.get((p, d))
        if ds is None:
            raise JobFailed("notFound", f"Not found: Dataset {p}:{d}")
        if ds["location"].lower() != ref["location"].lower():
            raise JobFailed("notFound", f"Not found: Dataset {p}:{d} was not found in location {ref['location']}")
        logical = bool(load.get("useAvroLogicalTypes"))
        targets = load.get("decimalTargetTypes", ["NUMERIC"])
        files, size = [], 0  # (uri, writer schema, bytes), bytes read
        for uri in load["sourceUris"]:
            data = self._object(uri)
            size += len(data)
            files.append((uri, self._read(uri, data)[0], data))
        if "schema" in load:  # a provided schema overrides the one derived from the files
            schema = load["schema"].get("fields", [])
            rows = []
            for uri, writer, data in files:
                _same_column_types(avro_table_schema(writer, logical, targets), schema, uri)
                rows += [_project_row(r, schema, uri) for r in self._read(uri, data)[1]]
        else:
            # The reader schema: the reference file's, else "the alphabetically last file is used"; every
            # file is read through it by Avro schema resolution.
            if "referenceFileSchemaUri" in load:
                uri = load["referenceFileSchemaUri"]
                reader = self._read(uri, self._object(uri))[0]
            else:
                reader = max(files, key=lambda f: f[0])[1]
            schema = avro_table_schema(reader, logical, targets)
            rows = []
            for uri, writer, data in files:
                try:
                    _resolve(writer, reader, _named(writer), _named(reader), "", set())
                except _Mismatch as exc:
                    raise JobFailed("invalid", f"Error while reading data, error message: The Apache Avro library "
                                               f"failed to resolve the schema of {uri} to the reader schema: {exc}") \
                        from None
                rows += [_project_row(r, schema, uri) for r in self._read(uri, data, reader)[1]]

        table = self.tables.get((p, d, name))
        partitioning = load.get("timePartitioning")
        if partitioning and partitioning.get("field"):
            _partition_column(schema, partitioning, label)
        if table is None:
            if load.get("createDisposition", "CREATE_IF_NEEDED") == "CREATE_NEVER":
                raise JobFailed("notFound", f"Not found: Table {label}")
            if not partitioning and decorator:
                raise JobFailed("invalid", f"Cannot load into a partition of the table {label}, which does not exist "
                                           "and is given no timePartitioning")
            new_schema, table = schema, None
        else:
            have = table["resource"].get("timePartitioning")
            if partitioning and have != partitioning:
                raise JobFailed("invalid", f"Incompatible table partitioning specification. Expects partitioning "
                                           f"specification {json.dumps(have)}, but input partitioning specification "
                                           f"is {json.dumps(partitioning)}")
            append = load.get("writeDisposition", "WRITE_APPEND") == "WRITE_APPEND"
            if decorator or (append and not have):
                new_schema = _evolve(table["schema"], schema, set(load.get("schemaUpdateOptions", [])), label)
            elif have:
                raise JobFailed("invalid", f"bigquery_fake does not implement loads into the whole partitioned "
                                           f"table {label}")
            else:
                new_schema = schema  # the whole table replaced: its schema is the load's
        # Everything checked: apply (a new table first, so the decorator is checked against its partitioning).
        if table is None:
            table = self._new_table(p, d, name, new_schema, partitioning, {})
            try:
                pid = self._partition_id(table, label, decorator) if decorator else ""
                self._rows_in(table, rows, pid, label)
            except JobFailed:
                del self.tables[(p, d, name)]
                raise
        else:
            pid = self._partition_id(table, label, decorator) if decorator else ""
            self._rows_in(table, rows, pid, label)
            self._partition_quota(table, pid, rows, label)
            table["schema"] = new_schema
        truncate = load.get("writeDisposition", "WRITE_APPEND") == "WRITE_TRUNCATE"
        if not decorator and truncate:
            table["partitions"].clear()
        if truncate:
            table["partitions"][pid] = rows
        else:
            table["partitions"].setdefault(pid, []).extend(rows)
        if not table["partitions"][pid]:
            del table["partitions"][pid]
        self._touch(table)
        return {"inputFiles": str(len(files)), "inputFileBytes": str(size), "outputRows": str(len(rows)),
                "outputBytes": str(size), "badRecords": "0"}

    def _partition_quota(self, table: dict, pid: str, rows: list, label: str) -> None:
        if rows and pid not in table["partitions"] and len(table["partitions"]) >= self.max_partitions:
            raise JobFailed("quotaExceeded", f"Quota exceeded: Your table {label} exceeded quota for number of "
                                             f"partitions per table: {self.max_partitions}")

    def _located_table(self, ref: dict, job_location: str) -> tuple[tuple[str, str, str], str, dict | None]:
        """((project, dataset, table), decorator, the table or None) of a job's table reference."""
        p, d = ref["projectId"], ref["datasetId"]
        name, _, decorator = ref["tableId"].partition("$")
        ds = self.datasets.get((p, d))
        if ds is None:
            raise JobFailed("notFound", f"Not found: Dataset {p}:{d}")
        if ds["location"].lower() != job_location.lower():
            raise JobFailed("notFound", f"Not found: Dataset {p}:{d} was not found in location {job_location}")
        return (p, d, name), decorator, self.tables.get((p, d, name))

    def _copy(self, ref: dict, copy: dict) -> dict:
        """A copy job ("Copy tables", "Copying tables into partitions"): the source table, or one of its
        partitions, into the destination table, or into one of its partitions by decorator. A
        partitioned source copies into a partitioned destination only with the same partitioning; an
        unpartitioned source goes into the decorated partition (rows of a table partitioned on a column
        must fall in it). The schemas must be equal: BigQuery documents no schema update for copies, so
        the fake refuses any difference. Atomic, like every job."""
        (sp, sd, sname), sdec, src = self._located_table(copy.get("sourceTables", [copy.get("sourceTable")])[0],
                                                         ref["location"])
        slabel = f"{sp}:{sd}.{sname}"
        if src is None:
            raise JobFailed("notFound", f"Not found: Table {slabel}")
        spart = src["resource"].get("timePartitioning")
        if sdec:
            rows = list(src["partitions"].get(self._partition_id(src, slabel, sdec), []))
        else:
            rows = [r for part in src["partitions"].values() for r in part]
        (dp, dd, dname), ddec, dest = self._located_table(copy["destinationTable"], ref["location"])
        dlabel = f"{dp}:{dd}.{dname}"
        write = copy.get("writeDisposition", "WRITE_EMPTY")
        if dest is None:
            if copy.get("createDisposition", "CREATE_IF_NEEDED") == "CREATE_NEVER":
                raise JobFailed("notFound", f"Not found: Table {dlabel}")
            if ddec or sdec:
                raise JobFailed("invalid", f"bigquery_fake does not implement a copy that creates {dlabel} from or "
                                           "into a partition decorator")
            new = self._new_table(dp, dd, dname, json.loads(json.dumps(src["schema"])), spart, {})
            new["partitions"] = {k: list(v) for k, v in src["partitions"].items()}
            self._touch(new)
            return {"copiedRows": str(len(rows)), "copiedLogicalBytes": "0"}
        dpart = dest["resource"].get("timePartitioning")
        if (spart is not None and not sdec) or (sdec and not ddec) or (dpart and not ddec):
            raise JobFailed("invalid", f"bigquery_fake implements copies of a whole unpartitioned table into a "
                                       f"whole unpartitioned table or a partition, and of a partition into a "
                                       f"partition; not {slabel}{'$' + sdec if sdec else ''} into "
                                       f"{dlabel}{'$' + ddec if ddec else ''}")
        if sdec and spart != dpart:
            raise JobFailed("invalid", f"Partitioning specification must match: {slabel} is partitioned "
                                       f"{json.dumps(spart)}, {dlabel} {json.dumps(dpart)}")
        if not _same_schema(src["schema"], dest["schema"]):
            try:
                _evolve(dest["schema"], src["schema"], set(), dlabel)
            except JobFailed:
                raise
            raise JobFailed("invalid", f"Provided Schema does not match Table {dlabel}: the copy's source "
                                       f"{slabel} has columns {[c['name'] for c in src['schema']]}, the table "
                                       f"{[c['name'] for c in dest['schema']]} (the fake copies only between "
                                       "equal schemas)")
        pid = self._partition_id(dest, dlabel, ddec) if ddec else ""
        self._rows_in(dest, rows, pid, dlabel)
        held = dest["partitions"].get(pid, [])
        if write == "WRITE_EMPTY" and held:
            raise JobFailed("duplicate", f"Already Exists: Table {dlabel}{'$' + ddec if ddec else ''}")
        self._partition_quota(dest, pid, rows, dlabel)
        dest["partitions"][pid] = list(rows) if write != "WRITE_APPEND" else held + list(rows)
        if not dest["partitions"][pid]:
            del dest["partitions"][pid]
        self._touch(dest)
        return {"copiedRows": str(len(rows)), "copiedLogicalBytes": "0"}

    # --- the one query answered: a partition's row count from INFORMATION_SCHEMA.PARTITIONS ------

    def _jobs_query(self, p, body, params):
        _check_fields(body, "query", "queryRequest")
        if body.get("useLegacySql", True) is not False:
            raise ApiError(501, "bigquery_fake answers GoogleSQL only (useLegacySql must be false)")
        _check_fields(body.get("formatOptions", {}), "formatOptions", "queryRequest.formatOptions")
        alter = ALTER_COLUMN.match(body.get("query", ""))
        if alter is not None:
            return self._alter_column(p, body, alter)
        m = PARTITIONS_QUERY.match(body.get("query", ""))
        if m is None:
            raise ApiError(501, "bigquery_fake answers only `SELECT total_rows FROM "
                                "`p.d.INFORMATION_SCHEMA.PARTITIONS` WHERE table_name = @t AND partition_id = @p` and `ALTER TABLE `p.d.t` ALTER COLUMN c "
                                f"SET DATA TYPE T`, not: {body.get('query')!r}")
        if body.get("parameterMode") != "NAMED":
            raise ApiError(400, "Query parameters must be NAMED for a query using @names")
        values = {}
        for i, qp in enumerate(body.get("queryParameters", [])):
            _check_fields(qp, "queryParameter", f"queryRequest.queryParameters[{i}]")
            _check_fields(qp.get("parameterType"), "parameterType", f"queryRequest.queryParameters[{i}].parameterType")
            _check_fields(qp.get("parameterValue"), "parameterValue",
                          f"queryRequest.queryParameters[{i}].parameterValue")
            if qp["parameterType"].get("type") != "STRING":
                raise ApiError(400, f"No matching signature for operator = for argument types: STRING, "
                                    f"{qp['parameterType'].get('type')}")
            values[qp["name"]] = qp["parameterValue"].get("value")
        for ref in (m["t"], m["p"]):
            if ref not in values:
                raise ApiError(400, f"Query parameter '{ref}' not found")
        proj, d = m["project"], m["dataset"]
        ds = self.datasets.get((proj, d))
        location = body.get("location") or (ds or {}).get("location") or self.default_location
        if ds is None or ds["location"].lower() != location.lower():
            raise ApiError(404, f"Not found: Dataset {proj}:{d} was not found in location {location}")
        table = self.tables.get((proj, d, values[m["t"]]))
        rows = table["partitions"].get(values[m["p"]]) if table else None
        result = [{"f": [{"v": str(len(rows))}]}] if rows else []
        job_id = f"job_{uuid.uuid4().hex}"
        return 200, {"kind": "bigquery#queryResponse", "jobComplete": True, "cacheHit": False,
                     "jobReference": {"projectId": p, "jobId": job_id, "location": location},
                     "schema": {"fields": [{"name": "total_rows", "type": "INTEGER", "mode": "NULLABLE"}]},
                     "totalRows": str(len(result)), "rows": result, "totalBytesProcessed": "0"}


    # --- the one DDL statement: ALTER COLUMN SET DATA TYPE, a coercion of a top-level column -----

    def _alter_column(self, p, body, m):
        if body.get("queryParameters"):
            raise ApiError(400, "Query parameters cannot be used in a DDL statement")
        proj, d, t = m["project"], m["dataset"], m["table"]
        ds = self.datasets.get((proj, d))
        location = body.get("location") or (ds or {}).get("location") or self.default_location
        if ds is None or ds["location"].lower() != location.lower():
            raise ApiError(404, f"Not found: Dataset {proj}:{d} was not found in location {location}")
        table = self._table(proj, d, t)
        name, sql_type = m["column"].strip("`"), m["type"].strip().upper()
        if "." in name:
            raise ApiError(400, f"ALTER TABLE ALTER COLUMN SET DATA TYPE cannot change the nested column {name}: "
                                "only top-level columns")
        if not re.fullmatch(r"[A-Z0-9_]+", sql_type):
            raise ApiError(501, f"bigquery_fake does not implement parameterized or complex types ({m['type']})")
        if sql_type not in _SQL_TYPES:
            raise ApiError(400, f"Type not found: {sql_type}")
        col = next((c for c in table["schema"] if c["name"].lower() == name.lower()), None)
        if col is None:
            raise ApiError(400, f"Column {name} not found in table {proj}:{d}.{t}")
        old, new = col["type"], _SQL_TYPES[sql_type]
        old_sql = _SQL_NAMES.get(old, old)
        if col.get("mode") == "REPEATED":
            old_sql = f"ARRAY<{old_sql}>"
        if col.get("mode") == "REPEATED" or (old != new and (old, new) not in _COERCIONS):
            raise ApiError(400, f"ALTER TABLE ALTER COLUMN SET DATA TYPE requires that the existing column type "
                                f"({old_sql}) is assignable to the new type ({sql_type})")
        if old != new:
            convert = float if new == "FLOAT" else (lambda v: Decimal(v)) if old == "INTEGER" else (lambda v: v)
            for rows in table["partitions"].values():
                for row in rows:
                    key = next((k for k in row if k.lower() == name.lower()), None)
                    if key is not None and row[key] is not None:
                        row[key] = convert(row[key])
            col["type"] = new
            self._touch(table)
        self.ddl.append(body["query"])
        return 200, {"kind": "bigquery#queryResponse", "jobComplete": True, "cacheHit": False,
                     "jobReference": {"projectId": p, "jobId": f"job_{uuid.uuid4().hex}", "location": location},
                     "totalBytesProcessed": "0"}


__all__ = ["ALTER_COLUMN", "ApiError", "FakeBigQuery", "JobFailed", "PARTITIONS_QUERY", "avro_table_schema"]


def serving_folder(folder, **settings) -> "FakeBigQuery":
    """A started fake whose load jobs read gs://unit/<rel> from a local folder (see GsLikeStore);
    `settings`: FakeBigQuery's (its quotas, for instance)."""
    from pathlib import Path

    def read_object(uri: str) -> bytes:
        path = Path(folder) / uri[len("gs://unit/"):]
        if not path.is_file():
            raise FileNotFoundError(uri)
        return path.read_bytes()

    fake = FakeBigQuery(read_object, **settings)
    fake.start()
    return fake
