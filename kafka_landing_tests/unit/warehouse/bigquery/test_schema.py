"""Every schema change a Confluent registry accepts loads into BigQuery in any order of hours,
and what BigQuery cannot do fails once, terminal, naming the field and the schema ids: one
(old field, new field, expected column and values) case per line, each loaded oldest hour
first, newest first and mixed hour first, through the real BigQueryWarehouse and the strict
BigQuery fake over HTTP (no stack: landing files in a local folder that calls itself gs://).
Also: which BigQuery failures are transient, decided in one place."""

from __future__ import annotations

import concurrent.futures
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal

import pytest
import requests
from google.api_core import exceptions as gexc

from kafka_landing.handoff.manifests import DoneFile
from kafka_landing.warehouse.bigquery import DAY, BigQueryWarehouse, partition_id
from kafka_landing.warehouse.bigquery.jobs import job_failure
from kafka_landing.warehouse.bigquery.schema import FileSchema, plan_load
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse, serving_gs_folder
from kafka_landing_tests.helpers import GsLikeStore, write_hour

PROJECT = "kl-bq-unit"
# v1 only, v2 only, v2 and v1 mixed; a day each, so that each is loaded alone, in the order given
H1, H2, H3 = "2026-01-31T13", "2026-02-01T14", "2026-02-02T15"
ORDERS = {"oldest first": (H1, H2, H3), "newest first": (H2, H1, H3), "mixed first": (H3, H2, H1)}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One landing root and fake for the whole module: its many cases share them."""
    with serving_gs_folder(tmp_path_factory.mktemp("landing")) as served:
        yield served


def land(store, dataset: str, hour: str, parts: list[tuple[int, int, list, list[dict]]]) -> str:
    """An hour's landing files and done file; `parts`: (Kafka partition, schema id, the record's
    Avro fields, records)."""
    return write_hour(store, dataset, "t", hour, [
        (partition, sid, {"type": "record", "name": "Event", "namespace": "shop", "fields": fields}, records)
        for partition, sid, fields, records in parts])


def F(name, t, **kw):  # noqa: N802 - reads like the Avro it writes
    return {"name": name, "type": t, **kw}


def REC(name, *fields):  # noqa: N802
    return {"type": "record", "name": name, "fields": list(fields)}


def DEC(p, s):  # noqa: N802
    return {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s}


def ENUM(*symbols):  # noqa: N802
    return {"type": "enum", "name": "Kind", "symbols": list(symbols)}


def ARR(items):  # noqa: N802
    return {"type": "array", "items": items}


def MAP(values):  # noqa: N802
    return {"type": "map", "values": values}


OPT = dict(default=None)
BIG = Decimal("12345678901234567890123456789012345.50")  # 35 integer digits: BIGNUMERIC only


@dataclass
class Case:
    name: str
    old: dict | None  # field c in schema id 1 (None: v1 has no c)
    new: dict | None  # field c in schema id 2
    old_value: object  # c as v1 writes it
    new_value: object
    column: tuple[str, str, str] | None = None  # (path, type, mode) at the end; None: refused in every order
    read_old: object = None  # c of v1's rows as BigQuery gives them back at the end
    read_new: object = None
    refused_field: str = "c"
    refused_in: tuple[str, ...] = ()  # orders in which a load is refused (all if `column` is None)


CASES = [
    Case("new field with a default, non-null", None, F("c", "string", default="EUR"), None, "EUR",
         ("c", "STRING", "NULLABLE"), None, "EUR"),
    Case("new field without a default (FORWARD)", None, F("c", "string"), None, "x",
         ("c", "STRING", "NULLABLE"), None, "x"),
    Case("new optional field", None, F("c", ["null", "string"], **OPT), None, "x",
         ("c", "STRING", "NULLABLE"), None, "x"),
    Case("field with a default removed", F("c", "long", default=0), None, 5, None,
         ("c", "INTEGER", "NULLABLE"), 5, None),
    Case("field without a default removed", F("c", "long"), None, 5, None,
         ("c", "INTEGER", "NULLABLE"), 5, None),
    Case("optional field removed", F("c", ["null", "long"], **OPT), None, 5, None,
         ("c", "INTEGER", "NULLABLE"), 5, None),
    Case("int -> long", F("c", "int"), F("c", "long"), 5, 2 ** 40, ("c", "INTEGER", "REQUIRED"), 5, 2 ** 40),
    Case("float -> double", F("c", "float"), F("c", "double"), 1.5, 0.1, ("c", "FLOAT", "REQUIRED"), 1.5, 0.1),
    Case("int -> double", F("c", "int"), F("c", "double"), 5, 2.5, ("c", "FLOAT", "REQUIRED"), 5.0, 2.5),
    Case("long -> float", F("c", "long"), F("c", "float"), 7, 0.5, ("c", "FLOAT", "REQUIRED"), 7.0, 0.5),
    Case("decimal precision grows", F("c", DEC(10, 2)), F("c", DEC(12, 2)), Decimal("1.25"),
         Decimal("1234567890.12"), ("c", "NUMERIC", "REQUIRED"), Decimal("1.25"), Decimal("1234567890.12")),
    Case("decimal NUMERIC -> BIGNUMERIC", F("c", DEC(10, 2)), F("c", DEC(40, 2)), Decimal("1.25"), BIG,
         ("c", "BIGNUMERIC", "REQUIRED"), Decimal("1.25"), BIG),
    Case("string -> bytes", F("c", "string"), F("c", "bytes"), "x", b"x"),
    Case("bytes -> string", F("c", "bytes"), F("c", "string"), b"x", "x"),
    Case("becomes a union with null", F("c", "long"), F("c", ["null", "long"], **OPT), 5, None,
         ("c", "INTEGER", "NULLABLE"), 5, None),
    Case("union with null becomes required (FORWARD)", F("c", ["null", "long"], **OPT), F("c", "long"), None, 5,
         ("c", "INTEGER", "NULLABLE"), None, 5),
    Case("enum symbol added", F("c", ENUM("A", "B")), F("c", ENUM("A", "B", "C")), "A", "C",
         ("c", "STRING", "REQUIRED"), "A", "C"),
    Case("new optional nested record", None, F("c", ["null", REC("Sub", F("q", "long"))], **OPT), None, {"q": 1},
         ("c", "RECORD", "NULLABLE"), None, {"q": 1}),
    Case("field added inside a nested record", F("c", REC("Sub", F("q", "long"))),
         F("c", REC("Sub", F("q", "long"), F("r", "string", default="x"))), {"q": 1}, {"q": 2, "r": "y"},
         ("c.r", "STRING", "NULLABLE"), {"q": 1, "r": None}, {"q": 2, "r": "y"}),
    # BigQuery widens no nested or repeated column: refused once the narrow type is in the table; a table
    # that has the wide type already (newest hour first) loads the older files by Avro's promotion
    Case("nested int -> double", F("c", REC("Sub", F("q", "int"))), F("c", REC("Sub", F("q", "double"))),
         {"q": 1}, {"q": 1.5}, ("c.q", "FLOAT", "REQUIRED"), {"q": 1.0}, {"q": 1.5}, refused_field="c.q",
         refused_in=("oldest first",)),
    Case("array items int -> long", F("c", ARR("int")), F("c", ARR("long")), [1, 2], [2 ** 40],
         ("c", "INTEGER", "REPEATED"), [1, 2], [2 ** 40]),
    Case("array items long -> double", F("c", ARR("long")), F("c", ARR("double")), [1], [1.5],
         ("c", "FLOAT", "REPEATED"), [1.0], [1.5], refused_in=("oldest first",)),
    Case("field added to array items", F("c", ARR(REC("Item", F("q", "long")))),
         F("c", ARR(REC("Item", F("q", "long"), F("r", ["null", "string"], **OPT)))), [{"q": 1}], [{"q": 2, "r": "z"}],
         ("c.r", "STRING", "NULLABLE"), [{"q": 1, "r": None}], [{"q": 2, "r": "z"}]),
    Case("map values int -> long", F("c", MAP("int")), F("c", MAP("long")), {"k": 1}, {"k": 2 ** 40},
         ("c.value", "INTEGER", "REQUIRED"), [{"key": "k", "value": 1}], [{"key": "k", "value": 2 ** 40}]),
    Case("field added to map values", F("c", MAP(REC("Val", F("q", "long")))),
         F("c", MAP(REC("Val", F("q", "long"), F("r", "long", default=0)))), {"k": {"q": 1}}, {"k": {"q": 2, "r": 3}},
         ("c.value.r", "INTEGER", "NULLABLE"), [{"key": "k", "value": {"q": 1, "r": None}}],
         [{"key": "k", "value": {"q": 2, "r": 3}}]),
]


def same(a, b) -> bool:
    """Equal values of the same types (1 and 1.0 differ), recursively."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def column(schema: list[dict], path: str) -> tuple[str, str]:
    head, _, rest = path.partition(".")
    col = next(c for c in schema if c["name"] == head)
    return column(col["fields"], rest) if rest else (col["type"], col.get("mode", "NULLABLE"))


def run_case(store, fake, case: Case, name: str) -> list[str]:
    """Load the case's three hours in order `name`; what differs from the expectation, in words."""
    order, refusing = ORDERS[name], case.column is None or name in case.refused_in
    dataset = f"u_{uuid.uuid4().hex[:10]}"
    v1 = [F("v", "int")] + ([case.old] if case.old else [])
    v2 = [F("v", "int")] + ([case.new] if case.new else [])
    r1 = {"v": 1, **({"c": case.old_value} if case.old else {})}
    r2 = {"v": 2, **({"c": case.new_value} if case.new else {})}
    hours = {H1: [(0, 1, v1, [r1])], H2: [(0, 2, v2, [r2])],
             H3: [(0, 2, v2, [r2]), (1, 1, v1, [r1])]}  # the old file sorts last: BigQuery's default reader
    warehouse = bigquery_warehouse(fake, store, PROJECT)
    problems, refused = [], []
    for hour in order:
        jobs_before = len(fake.jobs)
        try:
            load_done_file(warehouse, store, land(store, dataset, hour, hours[hour]), NO_SPARK)
        except IncompatibleSchemaError as exc:
            refused.append(hour)
            message = str(exc)
            if not refusing:
                problems.append(f"{hour} refused: {message}")
            elif exc.transient or case.refused_field not in message or not re.search(r"schema id [12]", message):
                problems.append(f"{hour}: the refusal must be terminal and name field {case.refused_field} and "
                                f"the schema id: {message}")
            elif len(fake.jobs) != jobs_before:
                problems.append(f"{hour}: a refused change must not cost a load job")
        except LoadError as exc:
            problems.append(f"{hour} failed: {exc}")
    if refusing:
        if not refused:
            problems.append("nothing was refused")
        return problems
    got = column(fake.schema(PROJECT, dataset, "t"), case.column[0])
    if got != case.column[1:]:
        problems.append(f"column {case.column[0]} is {got}, expected {case.column[1:]}")
    for hour in (H1, H2, H3):
        for row in fake.partition_rows(PROJECT, dataset, "t", partition_id(hour, DAY)):
            want = case.read_old if row["v"] == 1 else case.read_new
            if not same(row.get("c"), want):
                problems.append(f"{hour} v{row['v']}: c is {row.get('c')!r}, expected {want!r}")
    counts = fake.partition_counts(PROJECT, dataset, "t")
    if sorted(counts.values()) != [1, 1, 2]:
        problems.append(f"rows per hour {counts}")
    return problems


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_registry_compatible_change_loads_in_any_order_or_fails_once_naming_the_field(env, case):
    store, fake = env
    problems = {name: run_case(store, fake, case, name) for name in ORDERS}
    assert {k: v for k, v in problems.items() if v} == {}



def _schema(*fields) -> dict:
    return {"type": "record", "name": "Event", "namespace": "shop", "fields": list(fields)}


@pytest.mark.parametrize("files, table", [
    ([_schema(F("c", "int")), _schema(F("c", "string"))], None),  # the planner's own refusal
    ([_schema(F("c", "long"))], [{"name": "c", "type": "STRING", "mode": "NULLABLE"}]),  # against the table
    ([_schema(F("c", "shop.Nowhere"))], None),  # a schema that cannot be read, wrapped by the plan
    ([_schema(F("c", REC("Loop", F("next", ["null", "shop.Loop"]))))], None),  # a record that contains itself
], ids=["two schema ids", "the table", "undefined type", "recursive"])
def test_a_refused_plan_says_once_that_nothing_was_loaded_and_marks_it(files, table):
    with pytest.raises(IncompatibleSchemaError) as refused:
        plan_load(table, [FileSchema(i + 1, f"gs://unit/{i}.avro", w) for i, w in enumerate(files)], "d.t hour H")
    assert refused.value.nothing_loaded and str(refused.value).count("Nothing was loaded") == 1, str(refused.value)

# --- transient or terminal: one decision for API answers, job errors and waiting ---------------

def api_error(cls, reason: str, message: str = "m"):
    return cls(message, errors=[{"reason": reason, "message": message}])


@pytest.mark.parametrize("exc, transient", [
    (api_error(gexc.ServiceUnavailable, "backendError"), True),
    (api_error(gexc.InternalServerError, "internalError"), True),
    (api_error(gexc.TooManyRequests, "rateLimitExceeded"), True),
    (api_error(gexc.Forbidden, "rateLimitExceeded", "Exceeded rate limits: too many table update operations"), True),
    (api_error(gexc.Forbidden, "accessDenied", "Access Denied: bigquery.jobs.create"), False),
    (api_error(gexc.Forbidden, "quotaExceeded", "Quota exceeded: load jobs per table per day"), False),
    (api_error(gexc.BadRequest, "invalid"), False),
    (api_error(gexc.NotFound, "notFound"), False),
    (gexc.RetryError("deadline exceeded while retrying", cause=None), True),
    (requests.exceptions.ConnectionError("connection refused"), True),
])
def test_api_answers_are_transient_only_when_bigquery_says_not_now(env, exc, transient):
    store, fake = env
    warehouse = BigQueryWarehouse(fake.client(PROJECT), store, PROJECT)
    with pytest.raises(LoadError) as raised:
        with warehouse.jobs.answers("doing something"):
            raise exc
    assert raised.value.transient is transient and "doing something" in str(raised.value)


@pytest.mark.parametrize("error, cls, transient", [
    ({"reason": "backendError", "message": "Backend error. Job aborted."}, LoadError, True),
    ({"reason": "internalError", "message": "An internal error occurred"}, LoadError, True),
    ({"reason": "rateLimitExceeded", "message": "Exceeded rate limits"}, LoadError, True),
    ({"reason": "invalid", "message": "Provided Schema does not match Table p:d.t. Field a has changed type from "
                                      "INTEGER to STRING"}, IncompatibleSchemaError, False),
    ({"reason": "accessDenied", "message": "Access Denied: BigQuery BigQuery: Permission denied while getting Drive "
                                           "credentials."}, LoadError, False),
    ({"reason": "invalid", "message": "Error while reading data"}, LoadError, False),
])
def test_job_errors_are_transient_only_when_bigquery_says_not_now(env, error, cls, transient):
    store, fake = env
    failure = job_failure("job", error, "where", "loc", [])
    assert type(failure) is cls and failure.transient is transient


class _Job:
    job_id, state, error_result = "j", "RUNNING", None

    def __init__(self, raises):
        self.raises = raises

    def result(self, timeout=None):
        raise self.raises


@pytest.mark.parametrize("raises", [concurrent.futures.TimeoutError(), gexc.ServiceUnavailable("away")])
def test_a_job_still_running_or_a_wait_that_failed_is_transient(env, raises):
    store, fake = env
    with pytest.raises(LoadError) as raised:
        BigQueryWarehouse(fake.client(PROJECT), store, PROJECT).jobs.wait(_Job(raises), "where")
    assert raised.value.transient is True and "same job id" in str(raised.value)


def test_a_load_reads_only_the_header_of_a_landing_file(env):
    """N12: the writer schema of each schema id comes from its file's header, never a whole download
    by the Dagster worker (BigQuery reads the files itself)."""
    store, fake = env

    class HeaderOnly(GsLikeStore):
        downloaded: list[str] = []

        def read_bytes(self, rel: str) -> bytes:
            if rel.endswith(".avro"):
                self.downloaded.append(rel)
            return super().read_bytes(rel)

    only = HeaderOnly(store._root)
    dataset = f"hdr_{uuid.uuid4().hex[:6]}"
    rel = land(only, dataset, H1, [(0, 1, [F("a", "long")], [{"a": n} for n in range(50)])])
    warehouse = bigquery_warehouse(fake, only, PROJECT)
    result = load_done_file(warehouse, only, rel, NO_SPARK)
    assert result.rows == 50
    assert HeaderOnly.downloaded == []
    schema = only.avro_schema(DoneFile.from_dict(only.read_json(rel)).files[0].path)
    assert [f["name"] for f in schema["fields"]] == ["a"]
