"""The BigQuery fake is strict and behaves as BigQuery documents, seen through the real
google-cloud-bigquery client over HTTP: no stack, Avro files in memory."""

from __future__ import annotations

import io
from contextlib import contextmanager
from decimal import Decimal
from typing import Iterator

import fastavro
import pytest
import requests
from google.api_core import exceptions as gexc
from google.cloud import bigquery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing_tests.bigquery_fake import FakeBigQuery

P = "proj"
HOUR_A, HOUR_B = "2026013113", "2026013114"


def avro(fields: list, records: list[dict]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema({"type": "record", "name": "r", "fields": fields}), records)
    return buf.getvalue()


A_LONG = {"name": "a", "type": "long"}
B_OPT = {"name": "b", "type": ["null", "string"], "default": None}


class Objects(dict):
    def read(self, uri: str) -> bytes:
        if uri not in self:
            raise FileNotFoundError(uri)
        return self[uri]


@pytest.fixture
def objects() -> Objects:
    return Objects()


@pytest.fixture
def fake(objects):
    f = FakeBigQuery(objects.read, default_location="US")
    f.start()
    yield f
    f.stop()


@pytest.fixture
def client(fake):
    c = fake.client(P)
    c.create_dataset(bigquery.Dataset(f"{P}.ds"))
    return c


def config(**overrides) -> bigquery.LoadJobConfig:
    kw = dict(source_format="AVRO", use_avro_logical_types=True, write_disposition="WRITE_TRUNCATE",
              create_disposition="CREATE_IF_NEEDED",
              schema_update_options=["ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"],
              time_partitioning=bigquery.TimePartitioning(type_="HOUR"))
    kw.update(overrides)
    return bigquery.LoadJobConfig(**{k: v for k, v in kw.items() if v is not None})


def load(client, uris, hour=HOUR_A, job_id=None, **overrides) -> bigquery.LoadJob:
    job = client.load_table_from_uri(uris, f"{P}.ds.t${hour}", job_id=job_id, job_config=config(**overrides))
    try:
        job.result()
    except gexc.GoogleAPICallError:
        pass
    return job


def test_loads_avro_into_the_decorated_hour_and_counts_it(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}, {"a": 2}])
    job = load(client, ["gs://b/1.avro"])
    assert job.error_result is None and job.output_rows == 2
    assert fake.partition_counts(P, "ds", "t") == {HOUR_A: 2}
    assert client.get_table(f"{P}.ds.t").time_partitioning.type_ == "HOUR"


def test_an_unknown_request_field_is_refused_naming_it(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    cfg = config()
    cfg._properties["load"]["sourceUrisX"] = ["gs://b/1.avro"]
    with pytest.raises(gexc.BadRequest, match=r'Unknown name "sourceUrisX" at \'job.configuration.load\''):
        client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.t${HOUR_A}", job_config=cfg)
    assert fake.table_state(P, "ds", "t") is None and fake.job_ids(P) == []


def test_a_documented_field_the_fake_lacks_is_refused_not_ignored(client, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    with pytest.raises(gexc.MethodNotImplemented, match="autodetect"):
        client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.t${HOUR_A}", job_config=config(autodetect=True))


def test_an_unknown_query_string_parameter_is_refused(fake, client):
    r = requests.get(f"{fake.url}/bigquery/v2/projects/{P}/datasets/ds?verbose=1")
    assert r.status_code == 400 and "verbose" in r.json()["error"]["message"]


def test_a_wildcard_source_is_refused(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    with pytest.raises(gexc.BadRequest, match="wildcard"):
        client.load_table_from_uri(["gs://b/*.avro"], f"{P}.ds.t${HOUR_A}", job_config=config())
    assert fake.table_state(P, "ds", "t") is None


def test_a_repeated_job_id_answers_409_and_runs_nothing(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    objects["gs://b/2.avro"] = avro([A_LONG], [{"a": 1}, {"a": 2}, {"a": 3}])
    load(client, ["gs://b/1.avro"], job_id="same")
    with pytest.raises(gexc.Conflict, match=r"Already Exists: Job proj:US\.same"):
        client.load_table_from_uri(["gs://b/2.avro"], f"{P}.ds.t${HOUR_A}", job_id="same", job_config=config())
    assert fake.partition_counts(P, "ds", "t") == {HOUR_A: 1}
    assert client.get_job("same").output_rows == 1


def test_a_job_id_taken_by_a_query_job_cannot_start_a_load_and_the_query_changes_nothing(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    reserve = bigquery.QueryJobConfig(use_legacy_sql=False, labels={"kafka_landing_reserved_for": "abc"})
    query = client.query(r"SELECT ERROR('reserved: don\'t use')", job_config=reserve, job_id="taken",
                         job_retry=None)
    with pytest.raises(gexc.BadRequest, match="reserved: don't use"):
        query.result()
    assert query.error_result["reason"] == "invalidQuery" and client.get_job("taken").labels == {
        "kafka_landing_reserved_for": "abc"}
    with pytest.raises(gexc.Conflict, match=r"Already Exists: Job proj:US\.taken"):
        load(client, ["gs://b/1.avro"], job_id="taken")
    assert fake.tables == {} and fake.load_jobs == {}  # nothing loaded, nothing counted
    with pytest.raises(gexc.MethodNotImplemented, match="only `SELECT ERROR"):
        client.query("SELECT 1", job_id="other", job_retry=None)
    with pytest.raises(gexc.BadRequest, match="Invalid label"):
        client.query("SELECT ERROR('x')", job_config=bigquery.QueryJobConfig(labels={"Upper": "x"}), job_retry=None)


def test_write_truncate_replaces_only_the_decorated_partition(client, fake, objects):
    objects["gs://b/a1.avro"] = avro([A_LONG], [{"a": 1}, {"a": 2}])
    objects["gs://b/b.avro"] = avro([A_LONG], [{"a": 10}, {"a": 11}, {"a": 12}])
    objects["gs://b/a2.avro"] = avro([A_LONG], [{"a": 7}])
    load(client, ["gs://b/a1.avro"], HOUR_A)
    load(client, ["gs://b/b.avro"], HOUR_B)
    load(client, ["gs://b/a2.avro"], HOUR_A)
    assert fake.partition_rows(P, "ds", "t", HOUR_A) == [{"a": 7}]
    assert [r["a"] for r in fake.partition_rows(P, "ds", "t", HOUR_B)] == [10, 11, 12]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["2026013100", "2026013101", "2026013102"]), st.integers(0, 4)),
                min_size=1, max_size=6))
def test_property_each_partition_holds_exactly_its_last_load(fake, objects, loads):
    client = fake.client(P)
    dataset = f"ds{len(fake.datasets)}"  # a fresh dataset per example, on the same server
    client.create_dataset(bigquery.Dataset(f"{P}.{dataset}"))
    last: dict[str, list[int]] = {}
    for i, (hour, n) in enumerate(loads):
        values = [i * 100 + k for k in range(n)]
        objects[f"gs://b/{dataset}/{i}.avro"] = avro([A_LONG], [{"a": v} for v in values])
        job = client.load_table_from_uri([f"gs://b/{dataset}/{i}.avro"], f"{P}.{dataset}.t${hour}",
                                         job_config=config())
        assert job.result().error_result is None
        last[hour] = values
    for hour in ("2026013100", "2026013101", "2026013102"):
        assert [r["a"] for r in fake.partition_rows(P, dataset, "t", hour)] == last.get(hour, [])


def test_field_addition_needs_the_option_and_a_nullable_field(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    objects["gs://b/2.avro"] = avro([A_LONG, B_OPT], [{"a": 2, "b": "x"}])
    objects["gs://b/3.avro"] = avro([A_LONG, {"name": "c", "type": "long"}], [{"a": 3, "c": 1}])
    load(client, ["gs://b/1.avro"], HOUR_A)
    refused = load(client, ["gs://b/2.avro"], HOUR_B, schema_update_options=None)
    assert "Cannot add fields (field: b)" in refused.error_result["message"]
    assert [f["name"] for f in fake.schema(P, "ds", "t")] == ["a"] and HOUR_B not in fake.partition_counts(P, "ds", "t")
    assert load(client, ["gs://b/2.avro"], HOUR_B).error_result is None
    assert fake.schema(P, "ds", "t")[1] == {"name": "b", "type": "STRING", "mode": "NULLABLE"}
    assert fake.partition_rows(P, "ds", "t", HOUR_A) == [{"a": 1, "b": None}]
    required = load(client, ["gs://b/3.avro"], HOUR_B)
    assert "Cannot add required fields" in required.error_result["message"]


def test_relaxation_needs_its_option(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    objects["gs://b/2.avro"] = avro([{"name": "a", "type": ["null", "long"]}], [{"a": None}])
    load(client, ["gs://b/1.avro"], HOUR_A)
    refused = load(client, ["gs://b/2.avro"], HOUR_B, schema_update_options=["ALLOW_FIELD_ADDITION"])
    assert "Field a has changed mode from REQUIRED to NULLABLE" in refused.error_result["message"]
    assert load(client, ["gs://b/2.avro"], HOUR_B).error_result is None
    assert fake.schema(P, "ds", "t") == [{"name": "a", "type": "INTEGER", "mode": "NULLABLE"}]


def test_an_incompatible_change_fails_the_job_and_changes_nothing(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    objects["gs://b/2.avro"] = avro([{"name": "a", "type": "string"}], [{"a": "x"}])
    objects["gs://b/3.avro"] = avro([B_OPT], [{"b": "y"}])
    load(client, ["gs://b/1.avro"], HOUR_A)
    changed = load(client, ["gs://b/2.avro"], HOUR_A)
    assert changed.state == "DONE" and changed.error_result["reason"] == "invalid"
    assert "Field a has changed type from INTEGER to STRING" in changed.error_result["message"]
    missing = load(client, ["gs://b/3.avro"], HOUR_A)
    assert "Field a is missing in new schema" in missing.error_result["message"]
    assert fake.partition_rows(P, "ds", "t", HOUR_A) == [{"a": 1}]
    assert fake.schema(P, "ds", "t") == [{"name": "a", "type": "INTEGER", "mode": "REQUIRED"}]


def test_without_a_schema_the_alphabetically_last_file_decides(client, fake, objects):
    objects["gs://b/n_new.avro"] = avro([A_LONG, B_OPT], [{"a": 1, "b": "kept?"}])
    objects["gs://b/o_old.avro"] = avro([A_LONG], [{"a": 2}])
    objects["gs://b/a_old.avro"] = avro([A_LONG], [{"a": 3}])
    load(client, ["gs://b/n_new.avro", "gs://b/a_old.avro"], HOUR_A)  # n_new is last: its schema is taken
    assert [f["name"] for f in fake.schema(P, "ds", "t")] == ["a", "b"]
    load(client, ["gs://b/n_new.avro", "gs://b/o_old.avro"], HOUR_B)  # o_old is last: b is dropped
    assert fake.partition_rows(P, "ds", "t", HOUR_B) == [{"a": 1, "b": None}, {"a": 2, "b": None}]
    schema = [bigquery.SchemaField("a", "INTEGER", "REQUIRED"), bigquery.SchemaField("b", "STRING", "NULLABLE")]
    load(client, ["gs://b/n_new.avro", "gs://b/o_old.avro"], HOUR_B, schema=schema)
    assert fake.partition_rows(P, "ds", "t", HOUR_B) == [{"a": 1, "b": "kept?"}, {"a": 2, "b": None}]


def test_logical_types_map_as_documented(client, fake, objects):
    fields = [{"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
              {"name": "d", "type": {"type": "int", "logicalType": "date"}},
              {"name": "n", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
              {"name": "w", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 18}},
              {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
              {"name": "h", "type": ["null", {"type": "array", "items": {"type": "record", "name": "H", "fields": [
                  {"name": "k", "type": "string"}]}}]}]
    objects["gs://b/1.avro"] = avro(fields, [])
    load(client, ["gs://b/1.avro"], HOUR_A, decimal_target_types=["NUMERIC", "BIGNUMERIC"])
    got = {f["name"]: (f["type"], f["mode"]) for f in fake.schema(P, "ds", "t")}
    assert got == {"ts": ("TIMESTAMP", "REQUIRED"), "d": ("DATE", "REQUIRED"), "n": ("NUMERIC", "REQUIRED"),
                   "w": ("BIGNUMERIC", "REQUIRED"), "e": ("STRING", "REQUIRED"), "h": ("RECORD", "REPEATED")}
    load(client, ["gs://b/1.avro"], HOUR_A, use_avro_logical_types=False, time_partitioning=None)
    assert "Field ts has changed type from TIMESTAMP to INTEGER" in \
        client.get_job(fake.job_ids(P)[-1]).error_result["message"]


def test_the_partitions_view_answers_only_its_parameterised_query(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}, {"a": 2}])
    load(client, ["gs://b/1.avro"], HOUR_A)
    sql = ("SELECT total_rows FROM `proj.ds.INFORMATION_SCHEMA.PARTITIONS` "
           "WHERE table_name = @t AND partition_id = @p")

    def count(table, partition):
        cfg = bigquery.QueryJobConfig(query_parameters=[bigquery.ScalarQueryParameter("t", "STRING", table),
                                                        bigquery.ScalarQueryParameter("p", "STRING", partition)])
        return [r["total_rows"] for r in client.query_and_wait(sql, job_config=cfg)]

    assert count("t", HOUR_A) == [2] and count("t", HOUR_B) == [] and count("other", HOUR_A) == []
    with pytest.raises(gexc.MethodNotImplemented):
        client.query_and_wait("SELECT total_rows FROM `proj.ds.INFORMATION_SCHEMA.PARTITIONS` "
                              f"WHERE table_name = 't' AND partition_id = '{HOUR_A}'")
    with pytest.raises(gexc.NotFound, match="Dataset proj:nope"):
        client.query_and_wait(sql.replace(".ds.", ".nope."), job_config=bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter("t", "STRING", "t"), bigquery.ScalarQueryParameter("p", "STRING", "x")]))


def test_deleting_a_decorator_removes_only_that_partition(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    load(client, ["gs://b/1.avro"], HOUR_A)
    load(client, ["gs://b/1.avro"], HOUR_B)
    client.delete_table(f"{P}.ds.t${HOUR_A}")
    assert fake.partition_counts(P, "ds", "t") == {HOUR_B: 1}
    with pytest.raises(gexc.BadRequest, match="decorator"):
        client.delete_table(f"{P}.ds.t$20260131")  # a DAY decorator on an HOUR table


def test_locations_must_match(fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    eu = fake.client(P, location="EU")
    eu.create_dataset(bigquery.Dataset(f"{P}.eu"))
    us = fake.client(P, location="US")
    job = us.load_table_from_uri(["gs://b/1.avro"], f"{P}.eu.t${HOUR_A}", job_id="j", job_config=config())
    with pytest.raises(gexc.NotFound, match="not found in location US"):
        job.result()
    with pytest.raises(gexc.NotFound, match="Not found: Job"):
        eu.get_job("j")
    assert fake.table_state(P, "eu", "t") is None


def test_a_missing_source_object_fails_the_job(client, fake):
    job = load(client, ["gs://b/missing.avro"])
    assert job.error_result == {"reason": "notFound", "message": "Not found: URI gs://b/missing.avro"}
    assert fake.table_state(P, "ds", "t") is None


@contextmanager
def serving(objects, **settings) -> Iterator[tuple[FakeBigQuery, bigquery.Client]]:
    """A started fake of `settings` (FakeBigQuery's: its quotas, its clock) and a client of project P
    with dataset ds; the fake stopped on leaving."""
    served = FakeBigQuery(objects.read, **settings)
    served.start()
    try:
        client = served.client(P)
        client.create_dataset(bigquery.Dataset(f"{P}.ds"))
        yield served, client
    finally:
        served.stop()


def test_a_running_job_changes_the_table_only_when_done(objects):
    with serving(objects, running_polls=2) as (fake, client):
        objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
        job = client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.t${HOUR_A}", job_id="slow", job_config=config())
        assert job.state == "RUNNING" and fake.table_state(P, "ds", "t") is None
        job.reload()
        assert job.state == "RUNNING"
        job.result()
        assert job.state == "DONE" and fake.partition_counts(P, "ds", "t") == {HOUR_A: 1}


def test_a_denied_permission_answers_403_naming_it(client, fake, objects):
    fake.deny("bigquery.jobs.create")
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    with pytest.raises(gexc.Forbidden, match="bigquery.jobs.create"):
        client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.t${HOUR_A}", job_config=config())


# --- column widening by DDL, and reader schemas (referenceFileSchemaUri) -------------------------

def alter(client, column: str, sql_type: str, table: str = "t"):
    return list(client.query_and_wait(f"ALTER TABLE `{P}.ds.{table}` ALTER COLUMN {column} SET DATA TYPE {sql_type}"))


def test_alter_column_widens_a_top_level_column_and_the_rows_it_holds(client, fake, objects):
    dec = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    objects["gs://b/1.avro"] = avro([A_LONG, {"name": "n", "type": dec}, {"name": "i", "type": "long"}],
                                    [{"a": 1, "n": Decimal("1.25"), "i": 7}])
    load(client, ["gs://b/1.avro"], decimal_target_types=["NUMERIC", "BIGNUMERIC"])
    assert alter(client, "a", "FLOAT64") == [] and alter(client, "`n`", "BIGNUMERIC") == []
    alter(client, "i", "NUMERIC")
    alter(client, "a", "FLOAT64")  # the same type again: nothing to do, no error
    assert [(f["name"], f["type"], f["mode"]) for f in fake.schema(P, "ds", "t")] == \
        [("a", "FLOAT", "REQUIRED"), ("n", "BIGNUMERIC", "REQUIRED"), ("i", "NUMERIC", "REQUIRED")]
    [row] = fake.partition_rows(P, "ds", "t", HOUR_A)
    assert (type(row["a"]), row["a"], row["n"], type(row["i"]), row["i"]) == (float, 1.0, Decimal("1.25"), Decimal, 7)
    assert fake.ddl == [f"ALTER TABLE `{P}.ds.t` ALTER COLUMN a SET DATA TYPE FLOAT64",
                        f"ALTER TABLE `{P}.ds.t` ALTER COLUMN `n` SET DATA TYPE BIGNUMERIC",
                        f"ALTER TABLE `{P}.ds.t` ALTER COLUMN i SET DATA TYPE NUMERIC",
                        f"ALTER TABLE `{P}.ds.t` ALTER COLUMN a SET DATA TYPE FLOAT64"]


def test_alter_column_refuses_what_is_not_a_coercion_of_a_top_level_column(client, fake, objects):
    nested = {"name": "r", "type": {"type": "record", "name": "R", "fields": [{"name": "q", "type": "long"}]}}
    objects["gs://b/1.avro"] = avro([A_LONG, {"name": "s", "type": "string"}, {"name": "f", "type": "double"},
                                     {"name": "l", "type": {"type": "array", "items": "long"}}, nested],
                                    [{"a": 1, "s": "x", "f": 1.5, "l": [1], "r": {"q": 1}}])
    load(client, ["gs://b/1.avro"])
    with pytest.raises(gexc.BadRequest, match=r"existing column type \(STRING\) is assignable to the new type "
                                              r"\(FLOAT64\)"):
        alter(client, "s", "FLOAT64")
    with pytest.raises(gexc.BadRequest, match=r"\(FLOAT64\) is assignable to the new type \(INT64\)"):
        alter(client, "f", "INT64")
    with pytest.raises(gexc.BadRequest, match=r"\(ARRAY<INT64>\) is assignable to the new type \(FLOAT64\)"):
        alter(client, "l", "FLOAT64")
    with pytest.raises(gexc.BadRequest, match="nested"):
        alter(client, "r.q", "FLOAT64")
    with pytest.raises(gexc.BadRequest, match="Column nope not found"):
        alter(client, "nope", "FLOAT64")
    with pytest.raises(gexc.NotFound, match="Table proj:ds.other"):
        alter(client, "a", "FLOAT64", table="other")
    with pytest.raises(gexc.MethodNotImplemented):
        alter(client, "a", "NUMERIC(20, 2)")
    with pytest.raises(gexc.MethodNotImplemented):
        client.query_and_wait(f"ALTER TABLE `{P}.ds.t` DROP COLUMN s")
    assert fake.schema(P, "ds", "t")[0] == {"name": "a", "type": "INTEGER", "mode": "REQUIRED"} and fake.ddl == []


def test_a_long_file_does_not_load_into_a_widened_column_without_a_reader_schema(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    load(client, ["gs://b/1.avro"])
    alter(client, "a", "FLOAT64")
    job = load(client, ["gs://b/1.avro"], HOUR_B)
    assert "Field a has changed type from FLOAT to INTEGER" in job.error_result["message"]


def test_a_reference_file_gives_the_reader_schema_of_every_file(client, fake, objects):
    reader = [{"name": "a", "type": "double"}, {"name": "b", "type": ["null", "string"], "default": None},
              {"name": "n", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}],
               "default": None}]
    objects["gs://b/_reader.avro"] = avro(reader, [{"a": 99.0, "b": "never loaded", "n": None}])
    objects["gs://b/1.avro"] = avro([A_LONG, {"name": "n", "type": {"type": "bytes", "logicalType": "decimal",
                                                                     "precision": 10, "scale": 2}}],
                                    [{"a": 1, "n": Decimal("1.25")}])
    objects["gs://b/2.avro"] = avro([{"name": "a", "type": "int"}, {"name": "b", "type": "string"}],
                                    [{"a": 2, "b": "x"}])
    job = load(client, ["gs://b/1.avro", "gs://b/2.avro"], reference_file_schema_uri="gs://b/_reader.avro",
               decimal_target_types=["NUMERIC", "BIGNUMERIC"])
    assert job.error_result is None and job.output_rows == 2
    assert fake.schema(P, "ds", "t") == [{"name": "a", "type": "FLOAT", "mode": "REQUIRED"},
                                         {"name": "b", "type": "STRING", "mode": "NULLABLE"},
                                         {"name": "n", "type": "BIGNUMERIC", "mode": "NULLABLE"}]
    rows = fake.partition_rows(P, "ds", "t", HOUR_A)
    assert rows == [{"a": 1.0, "b": None, "n": Decimal("1.25")}, {"a": 2.0, "b": "x", "n": None}]
    assert rows and all(type(r["a"]) is float for r in rows)


@pytest.mark.parametrize("writer, reader, words", [
    ([A_LONG], [{"name": "a", "type": "string"}], "long cannot be read as string"),
    ([{"name": "a", "type": ["null", "long"]}], [A_LONG], "null cannot be read as long"),
    ([A_LONG], [A_LONG, {"name": "b", "type": "string"}], "field b has no default"),
    ([{"name": "a", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}],
     [{"name": "a", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 4}}], "scale"),
    ([{"name": "a", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}}],
     [{"name": "a", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}], "precision"),
    ([{"name": "a", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
     [{"name": "a", "type": {"type": "long", "logicalType": "timestamp-micros"}}], "timestamp-millis"),
    ([{"name": "a", "type": {"type": "record", "name": "R", "fields": [A_LONG]}}],
     [{"name": "a", "type": {"type": "record", "name": "S", "fields": [A_LONG]}}], "names R and S differ"),
], ids=["type", "null", "no-default", "decimal-scale", "decimal-narrower", "logical", "record-name"])
def test_a_reference_schema_must_resolve_each_file_as_avro_does(client, fake, objects, writer, reader, words):
    objects["gs://b/_reader.avro"] = avro(reader, [])
    objects["gs://b/1.avro"] = avro(writer, [])
    job = load(client, ["gs://b/1.avro"], reference_file_schema_uri="gs://b/_reader.avro")
    assert job.error_result["reason"] == "invalid" and words in job.error_result["message"]
    assert "gs://b/1.avro" in job.error_result["message"] and fake.table_state(P, "ds", "t") is None


def test_a_reference_file_is_a_plain_object_and_excludes_an_explicit_schema(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    assert load(client, ["gs://b/1.avro"], reference_file_schema_uri="gs://b/missing.avro").error_result == \
        {"reason": "notFound", "message": "Not found: URI gs://b/missing.avro"}
    with pytest.raises(gexc.BadRequest, match="wildcard"):
        client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.t${HOUR_A}",
                                   job_config=config(reference_file_schema_uri="gs://b/*.avro"))
    with pytest.raises(gexc.MethodNotImplemented, match="referenceFileSchemaUri together with schema"):
        client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.t${HOUR_A}", job_config=config(
            reference_file_schema_uri="gs://b/1.avro", schema=[bigquery.SchemaField("a", "INTEGER")]))


def test_a_required_field_added_inside_an_existing_record_is_refused(client, fake, objects):
    rec = lambda *f: {"name": "r", "type": {"type": "record", "name": "R", "fields": list(f)}}  # noqa: E731
    objects["gs://b/1.avro"] = avro([rec(A_LONG)], [{"r": {"a": 1}}])
    objects["gs://b/2.avro"] = avro([rec(A_LONG, {"name": "c", "type": "long"})], [{"r": {"a": 1, "c": 2}}])
    load(client, ["gs://b/1.avro"])
    job = load(client, ["gs://b/2.avro"], HOUR_B)
    assert "Cannot add required fields to an existing schema. (field: r.c)" in job.error_result["message"]
