"""The BigQuery fake enforces BigQuery's limits and implements its copy jobs as BigQuery documents
them ("Quotas and limits", "Partitioned tables", "Copy tables", the REST reference of
JobConfigurationTableCopy and tables.patch), seen through the real google-cloud-bigquery client
over HTTP: each limit refuses what BigQuery refuses."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from google.api_core import exceptions as gexc
from google.cloud import bigquery

from kafka_landing_tests.unit.test_bigquery_fake import (  # noqa: F401 - objects, fake, client are fixtures
    A_LONG,
    B_OPT,
    HOUR_A,
    P,
    avro,
    client,
    config,
    fake,
    load,
    objects,
    serving,
)

TS = {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}}


def micros(*ymd: int) -> int:
    return int(datetime(*ymd, tzinfo=timezone.utc).timestamp() * 1_000_000)


# --- source URIs per load job ---------------------------------------------------------------------

def test_a_load_job_naming_more_than_10000_source_uris_is_refused_as_bigquery_refuses_it(client, fake):
    uris = [f"gs://b/{i}.avro" for i in range(10_001)]  # never read: jobs.insert refuses the request
    with pytest.raises(gexc.BadRequest, match=r"Too many sources provided: 10001\. Limit is 10000\.") as refused:
        client.load_table_from_uri(uris, f"{P}.ds.t${HOUR_A}", job_config=config())
    assert refused.value.errors[0]["reason"] == "invalid" and fake.jobs == {}


def test_the_source_uri_limit_counts_exactly(objects):
    with serving(objects, max_source_uris=3) as (_, c):
        for i in range(4):
            objects[f"gs://b/{i}.avro"] = avro([A_LONG], [{"a": i}])
        assert load(c, [f"gs://b/{i}.avro" for i in range(3)]).output_rows == 3
        with pytest.raises(gexc.BadRequest, match=r"Too many sources provided: 4\. Limit is 3\."):
            load(c, [f"gs://b/{i}.avro" for i in range(4)], HOUR_A, job_id="four")


# --- the range of column partitioning ------------------------------------------------------------

def _by_day_on_ts(client, table: str = "e") -> None:
    t = bigquery.Table(f"{P}.ds.{table}", schema=[bigquery.SchemaField("ts", "TIMESTAMP")])
    t.time_partitioning = bigquery.TimePartitioning(type_="DAY", field="ts")
    client.create_table(t)


@pytest.mark.parametrize("day, value, refused", [
    ("19591231", (1959, 12, 31), True), ("19600101", (1960, 1, 1), False),
    ("21591231", (2159, 12, 31), False), ("21600101", (2160, 1, 1), True),
])
def test_a_decorator_outside_1960_to_2159_names_no_partition_of_a_column_partitioned_table(
        client, fake, objects, day, value, refused):
    _by_day_on_ts(client)
    objects["gs://b/1.avro"] = avro([TS], [{"ts": micros(*value)}])
    job = client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.e${day}", job_config=bigquery.LoadJobConfig(
        source_format="AVRO", use_avro_logical_types=True, write_disposition="WRITE_TRUNCATE"))
    try:
        job.result()
    except gexc.GoogleAPICallError:
        pass
    if refused:
        assert job.error_result["reason"] == "invalid"
        assert f"${day}" in job.error_result["message"] and "1960-01-01 to 2159-12-31" in job.error_result["message"]
        assert fake.partition_counts(P, "ds", "e") == {}
        with pytest.raises(gexc.BadRequest, match="1960-01-01 to 2159-12-31"):
            client.delete_table(f"{P}.ds.e${day}")
    else:
        assert job.error_result is None and fake.partition_counts(P, "ds", "e") == {day: 1}


def test_an_empty_load_into_an_out_of_range_decorator_is_refused_too(client, fake, objects):
    """Refused by the decorator, not by a row: a load of no row names no partition either."""
    _by_day_on_ts(client)
    objects["gs://b/0.avro"] = avro([TS], [])
    job = client.load_table_from_uri(["gs://b/0.avro"], f"{P}.ds.e$19000101", job_config=config(
        time_partitioning=None, schema_update_options=None))
    with pytest.raises(gexc.BadRequest):
        job.result()
    assert job.error_result["reason"] == "invalid" and "1960-01-01 to 2159-12-31" in job.error_result["message"]


# --- load jobs per table over a rolling 24 hours -------------------------------------------------

def test_load_jobs_per_table_are_counted_over_any_24_hours_not_per_utc_day(objects):
    now = [datetime(2026, 1, 31, 23, 0, tzinfo=timezone.utc).timestamp()]
    with serving(objects, max_load_jobs_per_day=2, clock=lambda: now[0]) as (_, c):
        objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
        assert load(c, ["gs://b/1.avro"]).error_result is None
        assert load(c, ["gs://b/1.avro"]).error_result is None
        now[0] += 2 * 3600  # past UTC midnight: BigQuery's window still holds both jobs
        third = load(c, ["gs://b/1.avro"])
        assert third.error_result["reason"] == "quotaExceeded"
        assert "exceeded quota for imports or query appends per table" in third.error_result["message"]
        assert load(c, ["gs://b/1.avro"], "2026013114").error_result["reason"] == "quotaExceeded"  # the table's
        now[0] += 22 * 3600 + 1  # the first two jobs are more than 24 hours old; the two failed ones are not
        assert load(c, ["gs://b/1.avro"]).error_result["reason"] == "quotaExceeded"
        now[0] += 2 * 3600
        assert load(c, ["gs://b/1.avro"]).error_result is None
        other = c.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.other${HOUR_A}", job_config=config())
        assert other.result().error_result is None  # another table: its own quota


# --- copy jobs -----------------------------------------------------------------------------------

def _two_tables(client, objects, schema_b=None) -> None:
    """ds.t and ds.s partitioned by HOUR; s$HOUR_A holds rows 1, 2; t$HOUR_A row 9."""
    objects["gs://b/t.avro"] = avro([A_LONG], [{"a": 9}])
    objects["gs://b/s.avro"] = avro(schema_b or [A_LONG], [{"a": 1}, {"a": 2}] if not schema_b else
                                    [{"a": 1, "b": "x"}, {"a": 2, "b": None}])
    load(client, ["gs://b/t.avro"])
    s = client.load_table_from_uri(["gs://b/s.avro"], f"{P}.ds.s${HOUR_A}", job_config=config())
    s.result()


def test_a_copy_job_replaces_one_partition_with_write_truncate(client, fake, objects):
    _two_tables(client, objects)
    objects["gs://b/other.avro"] = avro([A_LONG], [{"a": 5}])
    load(client, ["gs://b/other.avro"], "2026013114")
    truncate = bigquery.CopyJobConfig(write_disposition="WRITE_TRUNCATE", create_disposition="CREATE_NEVER")
    job = client.copy_table(f"{P}.ds.s${HOUR_A}", f"{P}.ds.t${HOUR_A}", job_id="swap", job_config=truncate)
    job.result()
    sent = fake.jobs[(P, "swap")]["resource"]["configuration"]
    assert sent["jobType"] == "COPY" and sent["copy"] == {
        "sourceTables": [{"projectId": P, "datasetId": "ds", "tableId": f"s${HOUR_A}"}],
        "destinationTable": {"projectId": P, "datasetId": "ds", "tableId": f"t${HOUR_A}"},
        "writeDisposition": "WRITE_TRUNCATE", "createDisposition": "CREATE_NEVER"}
    assert sorted(r["a"] for r in fake.partition_rows(P, "ds", "t", HOUR_A)) == [1, 2]
    assert fake.partition_counts(P, "ds", "t") == {HOUR_A: 2, "2026013114": 1}  # the other partition untouched
    assert fake.calls_of("jobs.insert") == 4 and fake.load_jobs.get((P, "ds", "t")) and \
        len(fake.load_jobs[(P, "ds", "t")]) == 2  # a copy job is no load job: the load quota does not count it


def test_copy_jobs_per_destination_table_are_counted_over_any_24_hours(objects):
    now = [datetime(2026, 1, 31, 23, 0, tzinfo=timezone.utc).timestamp()]
    with serving(objects, max_copy_jobs_per_day=2, clock=lambda: now[0]) as (fake, c):
        _two_tables(c, objects)
        truncate = bigquery.CopyJobConfig(write_disposition="WRITE_TRUNCATE", create_disposition="CREATE_NEVER")

        def copy(dest: str = f"{P}.ds.t${HOUR_A}"):
            job = c.copy_table(f"{P}.ds.s${HOUR_A}", dest, job_config=truncate)
            try:
                job.result()
            except gexc.GoogleAPICallError:
                pass
            return job.error_result
        assert copy() is None and copy() is None
        now[0] += 2 * 3600  # past UTC midnight: the window still holds both
        third = copy()
        assert third["reason"] == "quotaExceeded" and "exceeded quota for copies per destination table" in \
            third["message"]
        assert copy(f"{P}.ds.s${HOUR_A}") is None  # another destination table: its own quota
        now[0] += 22 * 3600 + 1  # the first two are older than 24 hours; the refused one is not
        assert copy() is None
        assert len(fake.copy_jobs[(P, "ds", "t")]) == 4 and len(fake.load_jobs[(P, "ds", "t")]) == 1


def test_a_copy_job_is_refused_what_bigquery_refuses(client, fake, objects):
    _two_tables(client, objects, schema_b=[A_LONG, B_OPT])
    def copy(src, dst, **kw):  # noqa: E306
        job = client.copy_table(src, dst, job_config=bigquery.CopyJobConfig(**kw))
        try:
            job.result()
        except gexc.GoogleAPICallError:
            pass
        return job.error_result
    # the source has a column the destination lacks: no copy updates a schema
    assert "Provided Schema does not match Table proj:ds.t. Cannot add fields (field: b)" in \
        copy(f"{P}.ds.s${HOUR_A}", f"{P}.ds.t${HOUR_A}", write_disposition="WRITE_TRUNCATE")["message"]
    # the default write disposition is WRITE_EMPTY: a partition holding rows is not replaced
    assert copy(f"{P}.ds.t${HOUR_A}", f"{P}.ds.t${HOUR_A}")["reason"] == "duplicate"
    # CREATE_NEVER into a table that does not exist
    assert copy(f"{P}.ds.t${HOUR_A}", f"{P}.ds.nope${HOUR_A}", create_disposition="CREATE_NEVER")["reason"] == \
        "notFound"
    assert sorted(r["a"] for r in fake.partition_rows(P, "ds", "t", HOUR_A)) == [9]  # nothing changed
    with pytest.raises(gexc.MethodNotImplemented, match="operationType"):
        client.copy_table(f"{P}.ds.s${HOUR_A}", f"{P}.ds.t${HOUR_A}",
                          job_config=bigquery.CopyJobConfig(operation_type="SNAPSHOT"))


def test_a_copy_into_a_column_partition_holds_only_its_rows(client, fake, objects):
    _by_day_on_ts(client)
    scratch = bigquery.Table(f"{P}.ds.scratch", schema=[bigquery.SchemaField("ts", "TIMESTAMP")])
    client.create_table(scratch)
    objects["gs://b/1.avro"] = avro([TS], [{"ts": micros(2026, 1, 31)}, {"ts": micros(2026, 2, 1)}])
    job = client.load_table_from_uri(["gs://b/1.avro"], f"{P}.ds.scratch", job_config=bigquery.LoadJobConfig(
        source_format="AVRO", use_avro_logical_types=True, write_disposition="WRITE_APPEND"))
    job.result()
    copy = client.copy_table(f"{P}.ds.scratch", f"{P}.ds.e$20260131",
                             job_config=bigquery.CopyJobConfig(write_disposition="WRITE_TRUNCATE"))
    with pytest.raises(gexc.BadRequest, match="Some rows belong to different partitions"):
        copy.result()
    assert fake.partition_counts(P, "ds", "e") == {}


# --- tables.patch and expiration -----------------------------------------------------------------

def test_tables_patch_adds_nullable_columns_and_relaxes_and_nothing_else(client, fake, objects):
    objects["gs://b/1.avro"] = avro([A_LONG], [{"a": 1}])
    load(client, ["gs://b/1.avro"])
    table = client.get_table(f"{P}.ds.t")
    table.schema = [bigquery.SchemaField("a", "INTEGER", "NULLABLE"), bigquery.SchemaField("b", "STRING")]
    patched = client.update_table(table, ["schema"])
    assert [(f.name, f.mode) for f in patched.schema] == [("a", "NULLABLE"), ("b", "NULLABLE")]
    for schema, words in (([bigquery.SchemaField("b", "STRING")], "Field a is missing in new schema"),
                          ([bigquery.SchemaField("a", "STRING"), bigquery.SchemaField("b", "STRING")],
                           "Field a has changed type from INTEGER to STRING"),
                          ([bigquery.SchemaField("a", "INTEGER"), bigquery.SchemaField("b", "STRING"),
                            bigquery.SchemaField("c", "STRING", "REQUIRED")], "Cannot add required fields")):
        patched.schema = schema
        with pytest.raises(gexc.BadRequest, match=words):
            client.update_table(patched, ["schema"])
    stale = table  # read before the patch: its etag is not the table's any more
    stale.schema = [bigquery.SchemaField("a", "INTEGER", "NULLABLE"), bigquery.SchemaField("z", "STRING")]
    with pytest.raises(gexc.PreconditionFailed):
        client.update_table(stale, ["schema"])
    assert [f["name"] for f in fake.schema(P, "ds", "t")] == ["a", "b"]


def test_a_table_past_its_expiration_is_gone(objects):
    now = [1_800_000_000.0]
    with serving(objects, clock=lambda: now[0]) as (_, c):
        t = bigquery.Table(f"{P}.ds.scratch", schema=[bigquery.SchemaField("a", "INTEGER")])
        t.expires = datetime.fromtimestamp(now[0] + 3600, tz=timezone.utc)
        c.create_table(t)
        assert c.get_table(f"{P}.ds.scratch").expires == t.expires
        now[0] += 3600
        with pytest.raises(gexc.NotFound):
            c.get_table(f"{P}.ds.scratch")
