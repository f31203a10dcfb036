"""The BigQuery warehouse against real Avro landing files in a GcsStore on the GCS
emulator and the strict BigQuery fake at the client's HTTP transport (no Spark):
one load job per hour from exactly the done file's objects, idempotent by job id,
hour partitions replaced whole, schemas evolved or refused as BigQuery does."""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import time
import uuid
from datetime import datetime, timezone

import fastavro
import pytest
from google.api_core import exceptions as gexc
from google.cloud import bigquery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.manifests import DeadLetters, DoneFile, LandedFile
from kafka_landing.naming import (
    done_file_path,
    hour_from_tag,
    landing_file_name,
    table_hour_dir,
)
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.bigquery import BigQueryWarehouse, job_id, partition_id
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.bigquery_fake import FakeBigQuery

PROJECT = "kl-bq-test"
H1, H2 = "2026-01-31T13", "2026-01-31T14"
NO_SPARK = lambda: pytest.fail("the BigQuery backend must not start Spark")  # noqa: E731

KAFKA_HEADER = {"type": "record", "name": "KafkaHeader", "namespace": "kafka_landing",
                "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"]}]}
META = [{"name": "_kafka_topic", "type": "string"}, {"name": "_kafka_partition", "type": "int"},
        {"name": "_kafka_offset", "type": "long"},
        {"name": "_kafka_timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "_kafka_key", "type": ["null", "bytes"], "default": None},
        {"name": "_kafka_headers", "type": ["null", {"type": "array", "items": KAFKA_HEADER}], "default": None}]
V1 = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"}]
V2 = V1 + [{"name": "coupon", "type": ["null", "string"], "default": None}]
V_BAD = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "string"}]


@pytest.fixture
def store(gcs_store_factory):
    return gcs_store_factory(prefix="landing", lease_seconds=5)


@pytest.fixture
def fake(gcs_client):
    def read_object(uri: str) -> bytes:
        bucket, _, name = uri[len("gs://"):].partition("/")
        try:
            return gcs_client.bucket(bucket).blob(name).download_as_bytes()
        except gexc.NotFound:
            raise FileNotFoundError(uri) from None

    f = FakeBigQuery(read_object)
    f.start()
    yield f
    f.stop()


@pytest.fixture
def dataset() -> str:
    return f"shop_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def warehouse(fake, store, dataset):
    return BigQueryWarehouse(fake.client(PROJECT), store, PROJECT, location="US", datasets=[dataset])


def avro_bytes(fields: list, records: list[dict]) -> bytes:
    buf = io.BytesIO()
    schema = {"type": "record", "name": "Order", "namespace": "shop", "fields": fields + META}
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    return buf.getvalue()


def land(store, dataset: str, hour: str, parts: list[tuple[int, int, list, list[dict]]], table: str = "orders",
         topic: str = "orders") -> str:
    """Write an hour's landing files and its done file, as landing does; the done file's path.
    `parts`: (Kafka partition, schema id, Avro fields, records without Kafka columns)."""
    hour_dt = hour_from_tag(hour)
    files, offset = [], 1000
    for partition, schema_id, fields, records in parts:
        rows = [{**r, "_kafka_topic": topic, "_kafka_partition": partition, "_kafka_offset": offset + i,
                 "_kafka_timestamp": int(hour_dt.timestamp() * 1000) + i, "_kafka_key": None,
                 "_kafka_headers": [{"key": "h", "value": b"v"}]} for i, r in enumerate(records)]
        first, last = offset, offset + max(len(rows) - 1, 0)
        rel = f"{table_hour_dir(dataset, table, hour_dt)}/" \
              f"{landing_file_name(topic, partition, dataset, table, schema_id, first, last)}"
        data = avro_bytes(fields, rows)
        store.write_atomic(rel, data)
        files.append(LandedFile(rel, len(rows), len(data), partition, first, last, schema_id))
        offset += 1000
    done = DoneFile(topic=topic, dataset=dataset, table=table, hour=hour, rows=sum(f.rows for f in files),
                    schema_ids=tuple(sorted({f.schema_id for f in files})), files=tuple(files),
                    dead_letters=DeadLetters(0, {}, ()), slice={"manifest": "m", "records": 0, "partitions": []},
                    topic_records_read=sum(f.rows for f in files), offset_gaps=0, attempt=uuid.uuid4().hex,
                    landed_at=datetime.now(timezone.utc).isoformat())
    rel = done_file_path(dataset, table, hour_dt)
    store.write_json_atomic(rel, done.to_dict())
    return rel


def content_sha(data: bytes) -> str:
    """What load_done_file hashes: the done file's bytes."""
    return hashlib.sha256(data).hexdigest()


def orders(n: int, start: int = 0, **extra) -> list[dict]:
    return [{"order_id": f"o{start + i}", "amount": start + i, **extra} for i in range(n)]


def rows_of(fake, dataset: str, hour: str, table: str = "orders") -> list[dict]:
    return fake.partition_rows(PROJECT, dataset, table, partition_id(hour))


def load_jobs(fake) -> list[dict]:
    return [j["resource"] for j in fake.jobs.values()]


def test_an_hour_is_one_load_job_of_exactly_its_done_files(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(3)), (1, 1, V1, orders(2, 10))])
    stray = f"{table_hour_dir(dataset, 'orders', hour_from_tag(H1))}/orders+9+{dataset}.orders+1+0+0.avro"
    store.write_atomic(stray, avro_bytes(V1, []))  # an attempt's leftover: in the folder, not in the done file

    result = load_done_file(warehouse, store, done_rel, NO_SPARK)

    done = json.loads(store.read_bytes(done_rel))
    assert result.rows == 5 and result.files == 2
    assert result.location == f"{PROJECT}.{dataset}.orders$2026013113"
    assert result.job_id == job_id(dataset, "orders", H1, content_sha(store.read_bytes(done_rel)))
    [job] = load_jobs(fake)
    load = job["configuration"]["load"]
    assert load["sourceUris"] == [store.location(f["path"]) for f in done["files"]]
    assert load["destinationTable"]["tableId"] == "orders$2026013113"
    assert (load["writeDisposition"], load["sourceFormat"], load["useAvroLogicalTypes"]) == \
        ("WRITE_TRUNCATE", "AVRO", True)
    assert set(load["schemaUpdateOptions"]) == {"ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"}
    assert "schema" not in load  # one schema id: BigQuery derives the schema from the files
    table = fake.table_state(PROJECT, dataset, "orders")
    assert table["resource"]["timePartitioning"] == {"type": "HOUR"}
    assert sorted(r["_kafka_offset"] for r in rows_of(fake, dataset, H1)) == [1000, 1001, 1002, 2000, 2001]
    assert {f["name"]: f["type"] for f in fake.schema(PROJECT, dataset, "orders")}["_kafka_timestamp"] == "TIMESTAMP"
    assert warehouse.hour_rows(dataset, "orders", H1) == 5
    assert warehouse.loaded_sha(dataset, "orders", H1) == result.done_sha256
    assert warehouse.loaded(dataset, "orders", H1)["job_id"] == result.job_id
    assert warehouse.loaded_hours(dataset, "orders") == {H1}


def test_reloading_the_same_content_waits_for_the_existing_job(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(4))])
    first = load_done_file(warehouse, store, done_rel, NO_SPARK)
    again = load_done_file(warehouse, store, done_rel, NO_SPARK)
    assert again.job_id == first.job_id and again.rows == 4
    assert fake.calls_of("jobs.insert") == 2 and len(fake.jobs) == 1  # the second insert answered 409
    assert len(rows_of(fake, dataset, H1)) == 4


def test_a_job_left_running_by_a_dead_load_is_awaited_not_repeated(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(3))])
    sha = content_sha(store.read_bytes(done_rel))
    jid = job_id(dataset, "orders", H1, sha)
    warehouse.check_writable()
    fake.running_polls = 3  # the job a crashed loader started is still running
    config = bigquery.LoadJobConfig(source_format="AVRO", use_avro_logical_types=True,
                                    write_disposition="WRITE_TRUNCATE",
                                    time_partitioning=bigquery.TimePartitioning(type_="HOUR"))
    uris = [store.location(f["path"]) for f in json.loads(store.read_bytes(done_rel))["files"]]
    fake.client(PROJECT).load_table_from_uri(uris, f"{PROJECT}.{dataset}.orders$2026013113", job_id=jid,
                                             location="US", job_config=config)
    assert rows_of(fake, dataset, H1) == []

    result = load_done_file(warehouse, store, done_rel, NO_SPARK)

    assert result.job_id == jid and result.rows == 3 and list(fake.jobs) == [(PROJECT, jid)]
    assert len(rows_of(fake, dataset, H1)) == 3 and warehouse.loaded(dataset, "orders", H1)["job_id"] == jid


def test_new_content_replaces_only_its_hour(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(5))]), NO_SPARK)
    load_done_file(warehouse, store, land(store, dataset, H2, [(0, 1, V1, orders(3, 100))]), NO_SPARK)
    before = warehouse.loaded(dataset, "orders", H1)["job_id"]

    relanded = load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(2, 50))]), NO_SPARK)

    assert relanded.job_id != before
    assert sorted(r["order_id"] for r in rows_of(fake, dataset, H1)) == ["o50", "o51"]
    assert sorted(r["order_id"] for r in rows_of(fake, dataset, H2)) == ["o100", "o101", "o102"]
    assert (warehouse.hour_rows(dataset, "orders", H1), warehouse.hour_rows(dataset, "orders", H2)) == (2, 3)


def test_returning_to_an_earlier_content_loads_it_again(warehouse, store, fake, dataset):
    first_rel = land(store, dataset, H1, [(0, 1, V1, orders(2))])
    first_bytes = {rel: store.read_bytes(rel) for rel in store.walk("tables")}
    first = load_done_file(warehouse, store, first_rel, NO_SPARK)
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(7, 20))]), NO_SPARK)
    for rel, data in first_bytes.items():  # the very same bytes again: same content hash, same first job id
        store.write_atomic(rel, data)

    back = load_done_file(warehouse, store, first_rel, NO_SPARK)

    assert back.job_id == f"{first.job_id}_r1"  # the first job's result was replaced since: load again
    assert sorted(r["order_id"] for r in rows_of(fake, dataset, H1)) == ["o0", "o1"]
    assert warehouse.loaded(dataset, "orders", H1)["earlier_jobs"][0]["job_id"] == first.job_id


def test_loads_of_one_hour_never_overlap(warehouse, store, fake, dataset):
    older = land(store, dataset, H1, [(0, 1, V1, orders(2))])
    older_done = DoneFile.from_dict(json.loads(store.read_bytes(older)))
    fake.running_polls = 2  # jobs take a while
    first = threading.Thread(target=warehouse.load_hour, args=(store, older_done, NO_SPARK, older))
    first.start()
    while not fake.jobs:
        time.sleep(0.01)
    newer = land(store, dataset, H1, [(1, 1, V1, orders(3, 30))])  # a re-land while the first load runs
    load_done_file(warehouse, store, newer, NO_SPARK)
    first.join()
    assert fake.overlaps == [] and len(fake.jobs) == 2
    assert sorted(r["order_id"] for r in rows_of(fake, dataset, H1)) == ["o30", "o31", "o32"]
    assert warehouse.loaded_sha(dataset, "orders", H1) == content_sha(store.read_bytes(newer))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([H1, H2]), st.integers(0, 2)), min_size=1, max_size=6))
def test_property_each_hour_holds_its_last_loaded_content_and_repeats_add_no_job(store, fake, steps):
    dataset = f"prop_{uuid.uuid4().hex[:8]}"
    warehouse = BigQueryWarehouse(fake.client(PROJECT), store, PROJECT, location="US")
    contents = {}  # (hour, variant) -> (done file bytes, order ids); variants use other partitions, other files
    for hour in (H1, H2):
        for variant in range(3):
            rel = land(store, dataset, hour, [(variant, 1, V1, orders(variant + 1, 100 * variant))])
            contents[(hour, variant)] = (rel, store.read_bytes(rel), [f"o{100 * variant + i}" for i in range(variant + 1)])
    loaded: dict[str, int] = {}
    for hour, variant in steps:
        rel, data, ids = contents[(hour, variant)]
        store.write_atomic(rel, data)
        jobs_before = len(fake.jobs)
        load_done_file(warehouse, store, rel, NO_SPARK)
        assert len(fake.jobs) == jobs_before + (0 if loaded.get(hour) == variant else 1)
        loaded[hour] = variant
        assert warehouse.loaded_sha(dataset, "orders", hour) == content_sha(data)
        for h in (H1, H2):
            want = contents[(h, loaded[h])][2] if h in loaded else []
            assert sorted(r["order_id"] for r in rows_of(fake, dataset, h)) == sorted(want)


def test_a_field_added_in_a_later_hour_is_added_to_the_table(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(2))]), NO_SPARK)
    result = load_done_file(warehouse, store, land(store, dataset, H2, [(0, 2, V2, orders(2, coupon="X"))]), NO_SPARK)
    assert result.added_columns == ("coupon",)
    assert [r["coupon"] for r in rows_of(fake, dataset, H2)] == ["X", "X"]
    assert [r["coupon"] for r in rows_of(fake, dataset, H1)] == [None, None]


def test_an_hour_mixing_schema_ids_keeps_every_files_fields(warehouse, store, fake, dataset):
    # Partition 0 has the new schema (with coupon); partition 1's file, of the old schema, sorts last.
    done_rel = land(store, dataset, H1, [(0, 2, V2, orders(2, coupon="C")), (1, 1, V1, orders(3, 10))])
    result = load_done_file(warehouse, store, done_rel, NO_SPARK)
    assert result.rows == 5 and result.schema_ids == (1, 2)
    got = sorted((r["order_id"], r["coupon"]) for r in rows_of(fake, dataset, H1))
    assert got == [("o0", "C"), ("o1", "C"), ("o10", None), ("o11", None), ("o12", None)]


def test_an_incompatible_schema_fails_clearly_and_changes_nothing(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(2))]), NO_SPARK)
    schema_before = fake.schema(PROJECT, dataset, "orders")
    bad_rel = land(store, dataset, H2, [(0, 3, V_BAD, [{"order_id": "x", "amount": "a lot"}])])
    jid = job_id(dataset, "orders", H2, content_sha(store.read_bytes(bad_rel)))

    with pytest.raises(IncompatibleSchemaError) as failed:
        load_done_file(warehouse, store, bad_rel, NO_SPARK)

    message = str(failed.value)
    assert f"{PROJECT}.{dataset}.orders hour {H2}" in message and jid in message
    assert "Field amount has changed type from INTEGER to STRING" in message
    assert fake.schema(PROJECT, dataset, "orders") == schema_before and len(rows_of(fake, dataset, H1)) == 2
    assert rows_of(fake, dataset, H2) == [] and warehouse.loaded(dataset, "orders", H2) is None
    assert store.exists(bad_rel)  # the landing files stay for a fixed reload

    with pytest.raises(IncompatibleSchemaError, match=f"{jid}_r1 failed.*earlier job {jid}: failed"):
        load_done_file(warehouse, store, bad_rel, NO_SPARK)  # a retry really runs, under the next id


def test_output_rows_other_than_the_done_files_are_caught(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(4))])
    [listed] = json.loads(store.read_bytes(done_rel))["files"]
    shorter = avro_bytes(V1, [{**r, "_kafka_topic": "orders", "_kafka_partition": 0, "_kafka_offset": 1,
                               "_kafka_timestamp": 0} for r in orders(3)])
    read = fake.read_object
    # The object changes between the row check and the load (rewritten by someone else).
    fake.read_object = lambda uri: shorter if uri == store.location(listed["path"]) else read(uri)

    with pytest.raises(LoadError, match=r"load job kafka_landing_\S+ wrote 3 rows, the done file lists 4"):
        load_done_file(warehouse, store, done_rel, NO_SPARK)
    assert warehouse.loaded(dataset, "orders", H1) is None


def test_conservation_reads_the_partition_back_from_bigquery(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(6))]), NO_SPARK)
    assert warehouse.hour_rows(dataset, "orders", H1) == 6
    assert warehouse.hour_rows(dataset, "orders", H2) is None
    assert warehouse.hour_rows(dataset, "other", H1) is None and warehouse.hour_rows("no_such", "orders", H1) is None
    fake.tables[(PROJECT, dataset, "orders")]["partitions"][partition_id(H1)].pop()  # BigQuery now holds 5
    assert warehouse.hour_rows(dataset, "orders", H1) == 5
    assert fake.calls_of("jobs.query") == 5


def test_an_empty_hour_empties_its_partition(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(3))]), NO_SPARK)
    load_done_file(warehouse, store, land(store, dataset, H2, [(0, 1, V1, orders(2))]), NO_SPARK)

    result = load_done_file(warehouse, store, land(store, dataset, H1, []), NO_SPARK)

    assert (result.rows, result.job_id) == (0, None)
    assert rows_of(fake, dataset, H1) == [] and len(rows_of(fake, dataset, H2)) == 2
    assert warehouse.hour_rows(dataset, "orders", H1) is None
    recorded = warehouse.loaded(dataset, "orders", H1)
    assert recorded["rows"] == 0 and recorded["deleted_partition"] and recorded["sha256"] == result.done_sha256
    assert load_done_file(warehouse, store, land(store, dataset, H1, [], table="never_loaded"), NO_SPARK).rows == 0


def test_a_done_file_listing_a_missing_file_loads_nothing(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(2))])
    [listed] = json.loads(store.read_bytes(done_rel))["files"]
    store.delete(listed["path"])
    with pytest.raises(LoadError, match=re.escape(f"listed file {store.location(listed['path'])} does not exist")):
        load_done_file(warehouse, store, done_rel, NO_SPARK)
    assert fake.jobs == {} and warehouse.loaded(dataset, "orders", H1) is None


def test_a_local_landing_root_is_refused(warehouse, tmp_path, dataset, fake):
    local = LocalStore(tmp_path / "landing")
    done_rel = land(local, dataset, H1, [(0, 1, V1, orders(1))])
    with pytest.raises(LoadError, match="BigQuery loads from Cloud Storage only.*gs://"):
        load_done_file(warehouse, local, done_rel, NO_SPARK)
    assert fake.jobs == {}


def test_a_table_partitioned_otherwise_is_refused(warehouse, store, fake, dataset):
    client = fake.client(PROJECT)
    client.create_dataset(bigquery.Dataset(f"{PROJECT}.{dataset}"))
    table = bigquery.Table(f"{PROJECT}.{dataset}.orders")
    table.time_partitioning = bigquery.TimePartitioning(type_="DAY")
    client.create_table(table)
    with pytest.raises(LoadError, match=f"table {PROJECT}.{dataset}.orders exists but is partitioned by DAY"):
        load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(1))]), NO_SPARK)
    assert fake.jobs == {}


def test_check_writable_creates_the_dataset_and_names_a_missing_role(warehouse, fake, store, dataset):
    warehouse.check_writable()
    assert fake.datasets[(PROJECT, dataset)]["location"] == "US"
    BigQueryWarehouse(fake.client(PROJECT), store, PROJECT).check_writable()  # no datasets: the project answers
    other = BigQueryWarehouse(fake.client(PROJECT), store, PROJECT, location="US", datasets=[dataset + "_x"])
    fake.deny("bigquery.datasets.create")
    with pytest.raises(LoadError, match=r"BigQuery Data Editor \(roles/bigquery.dataEditor\)"):
        other.check_writable()
    fake.denied.clear()
    fake.deny("bigquery.jobs.create")
    with pytest.raises(LoadError, match=r"grant the identity running kafka_landing BigQuery Job User"):
        load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(1))]), NO_SPARK)


def test_a_dataset_in_another_location_is_refused(fake, store, dataset):
    fake.client(PROJECT, location="EU").create_dataset(bigquery.Dataset(f"{PROJECT}.{dataset}"))
    warehouse = BigQueryWarehouse(fake.client(PROJECT), store, PROJECT, location="US", datasets=[dataset])
    with pytest.raises(LoadError, match=f"dataset {PROJECT}.{dataset} is in EU"):
        warehouse.check_writable()
