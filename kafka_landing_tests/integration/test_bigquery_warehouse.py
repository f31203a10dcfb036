"""The BigQuery warehouse against real Avro landing files in a GcsStore on the GCS
emulator and the strict BigQuery fake at the client's HTTP transport (no Spark):
one load job per day partition from exactly the objects of its hours' done files,
idempotent by job id, days replaced whole (tables made by hour before: hours), schemas
evolved or refused as BigQuery does. H1 and H2 are hours of two days, so that each
partition holds one hour; the tests of days hold several."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from decimal import Decimal

import pytest
from google.cloud import bigquery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.handoff.markers import Marks, mark_pending, parse_done_path, refusal
from kafka_landing.handoff.manifests import DoneFile
from kafka_landing.naming import (
    hour_from_tag,
    table_hour_dir,
)
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.bigquery import DAY, BigQueryWarehouse, day_sha, job_id, partition_id
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.helpers import avro_file, write_hour

PROJECT = "kl-bq-test"
H1, H2 = "2026-01-31T13", "2026-02-01T14"

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
def fake(bigquery_on_gcs):
    return bigquery_on_gcs


@pytest.fixture
def dataset() -> str:
    return f"shop_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def warehouse(fake, store, dataset):
    return bigquery_warehouse(fake, store, PROJECT, datasets=[dataset])


def order_schema(fields: list) -> dict:
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": fields + META}


def avro_bytes(fields: list, records: list[dict]) -> bytes:
    return avro_file(order_schema(fields), records)


def land(store, dataset: str, hour: str, parts: list[tuple[int, int, list, list[dict]]], table: str = "orders",
         topic: str = "orders") -> str:
    """Write an hour's landing files and its done file, as landing does; the done file's path.
    `parts`: (Kafka partition, schema id, Avro fields, records without Kafka columns)."""
    hour_ms = int(hour_from_tag(hour).timestamp() * 1000)
    return write_hour(store, dataset, table, hour, [
        (partition, sid, order_schema(fields),
         [{**r, "_kafka_topic": topic, "_kafka_partition": partition, "_kafka_offset": 1000 * (n + 1) + i,
           "_kafka_timestamp": hour_ms + i, "_kafka_key": None, "_kafka_headers": [{"key": "h", "value": b"v"}]}
          for i, r in enumerate(records)])
        for n, (partition, sid, fields, records) in enumerate(parts)], topic=topic)


def content_sha(data: bytes) -> str:
    """What load_done_file hashes: the done file's bytes."""
    return hashlib.sha256(data).hexdigest()


def orders(n: int, start: int = 0, **extra) -> list[dict]:
    return [{"order_id": f"o{start + i}", "amount": start + i, **extra} for i in range(n)]


def rows_of(fake, dataset: str, hour: str, table: str = "orders") -> list[dict]:
    """The rows of the hour's day partition."""
    return fake.partition_rows(PROJECT, dataset, table, partition_id(hour, DAY))


def day_job(dataset: str, hour: str, done_bytes: bytes, table: str = "orders") -> str:
    """The first job id of a day whose only landed hour is `hour`."""
    return job_id(dataset, table, hour, day_sha({hour: content_sha(done_bytes)}), layout=DAY)


def load_jobs(fake) -> list[dict]:
    return [j["resource"] for j in fake.jobs.values()]


def test_an_hour_is_one_load_job_of_exactly_its_done_files(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(3)), (1, 1, V1, orders(2, 10))])
    stray = f"{table_hour_dir(dataset, 'orders', hour_from_tag(H1))}/orders+9+{dataset}.orders+1+0+0.avro"
    store.write_atomic(stray, avro_bytes(V1, []))  # an attempt's leftover: in the folder, not in the done file

    result = load_done_file(warehouse, store, done_rel, NO_SPARK)

    done = json.loads(store.read_bytes(done_rel))
    assert result.rows == 5 and result.files == 2
    assert result.location == f"{PROJECT}.{dataset}.orders$20260131"
    assert result.job_id == day_job(dataset, H1, store.read_bytes(done_rel))
    [job] = load_jobs(fake)
    load = job["configuration"]["load"]
    assert load["sourceUris"] == [store.location(f["path"]) for f in done["files"]]
    assert load["destinationTable"]["tableId"] == "orders$20260131"
    assert (load["writeDisposition"], load["sourceFormat"], load["useAvroLogicalTypes"]) == \
        ("WRITE_TRUNCATE", "AVRO", True)
    assert set(load["schemaUpdateOptions"]) == {"ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"}
    assert "schema" not in load  # one schema id: BigQuery derives the schema from the files
    table = fake.table_state(PROJECT, dataset, "orders")
    assert table["resource"]["timePartitioning"] == {"type": "DAY"}
    assert sorted(r["_kafka_offset"] for r in rows_of(fake, dataset, H1)) == [1000, 1001, 1002, 2000, 2001]
    assert {f["name"]: f["type"] for f in fake.schema(PROJECT, dataset, "orders")}["_kafka_timestamp"] == "TIMESTAMP"
    assert warehouse.partition_rows(dataset, "orders", H1) == 5
    assert warehouse.loaded_sha(dataset, "orders", H1) == result.done_sha256
    assert warehouse.loaded(dataset, "orders", H1)["job_id"] == result.job_id
    assert warehouse.loaded_partitions(dataset, "orders") == {H1}


def test_reloading_the_same_content_waits_for_the_existing_job(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(4))])
    first = load_done_file(warehouse, store, done_rel, NO_SPARK)
    again = load_done_file(warehouse, store, done_rel, NO_SPARK)
    assert again.job_id == first.job_id and again.rows == 4
    assert fake.calls_of("jobs.insert") == 2 and len(fake.jobs) == 1  # the second insert answered 409
    assert len(rows_of(fake, dataset, H1)) == 4


def test_a_job_left_running_by_a_dead_load_is_awaited_not_repeated(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(3))])
    jid = day_job(dataset, H1, store.read_bytes(done_rel))
    warehouse.check_writable()
    fake.running_polls = 3  # the job a crashed loader started is still running
    config = bigquery.LoadJobConfig(source_format="AVRO", use_avro_logical_types=True,
                                    write_disposition="WRITE_TRUNCATE",
                                    time_partitioning=bigquery.TimePartitioning(type_="DAY"))
    uris = [store.location(f["path"]) for f in json.loads(store.read_bytes(done_rel))["files"]]
    fake.client(PROJECT).load_table_from_uri(uris, f"{PROJECT}.{dataset}.orders$20260131", job_id=jid,
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
    assert (warehouse.partition_rows(dataset, "orders", H1), warehouse.partition_rows(dataset, "orders", H2)) == (2, 3)


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
    first = threading.Thread(target=warehouse.load_partition, args=(store, older_done, NO_SPARK, older))
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
    warehouse = bigquery_warehouse(fake, store, PROJECT)
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

    with pytest.raises(IncompatibleSchemaError) as failed:
        load_done_file(warehouse, store, bad_rel, NO_SPARK)

    message = str(failed.value)
    assert f"{PROJECT}.{dataset}.orders day 2026-02-01 (loading hour {H2}): field amount: the table's column is " \
        "INTEGER and schema id 3" \
        in message and "has STRING" in message and "Nothing was loaded" in message
    assert len(fake.jobs) == 1  # refused before any job: a load job that would fail still counts against quotas
    assert fake.schema(PROJECT, dataset, "orders") == schema_before and len(rows_of(fake, dataset, H1)) == 2
    assert rows_of(fake, dataset, H2) == [] and warehouse.loaded(dataset, "orders", H2) is None
    assert store.exists(bad_rel)  # the landing files stay for a fixed reload


def test_a_failed_job_is_run_again_under_the_next_id(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(2))])
    [listed] = json.loads(store.read_bytes(done_rel))["files"]
    jid = day_job(dataset, H1, store.read_bytes(done_rel))
    read = fake.read_object
    fake.read_object = lambda uri: (_ for _ in ()).throw(FileNotFoundError(uri)) \
        if uri == store.location(listed["path"]) else read(uri)  # BigQuery cannot read it (a moment)

    with pytest.raises(LoadError, match=f"{jid} failed: Not found: URI") as failed:
        load_done_file(warehouse, store, done_rel, NO_SPARK)
    # A source file BigQuery cannot find was replaced meanwhile (a re-land): the next attempt reads the
    # done files as they are then, so it is transient, and it refuses nothing.
    assert failed.value.transient is True and rows_of(fake, dataset, H1) == []

    fake.read_object = read
    result = load_done_file(warehouse, store, done_rel, NO_SPARK)  # a retry really runs, under the next id
    assert result.job_id == f"{jid}_r1" and len(rows_of(fake, dataset, H1)) == 2
    assert warehouse.loaded(dataset, "orders", H1)["earlier_jobs"][0]["job_id"] == jid


def test_output_rows_other_than_the_done_files_are_caught(warehouse, store, fake, dataset):
    done_rel = land(store, dataset, H1, [(0, 1, V1, orders(4))])
    [listed] = json.loads(store.read_bytes(done_rel))["files"]
    shorter = avro_bytes(V1, [{**r, "_kafka_topic": "orders", "_kafka_partition": 0, "_kafka_offset": 1,
                               "_kafka_timestamp": 0} for r in orders(3)])
    read = fake.read_object
    # The object changes between the row check and the load (rewritten by someone else).
    fake.read_object = lambda uri: shorter if uri == store.location(listed["path"]) else read(uri)

    with pytest.raises(LoadError, match=r"load job kafka_landing_\S+ wrote 3 rows, the done files list 4"):
        load_done_file(warehouse, store, done_rel, NO_SPARK)
    assert warehouse.loaded(dataset, "orders", H1) is None


def test_conservation_reads_the_partition_back_from_bigquery(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(6))]), NO_SPARK)
    assert warehouse.partition_rows(dataset, "orders", H1) == 6
    assert warehouse.partition_rows(dataset, "orders", H2) is None
    assert warehouse.partition_rows(dataset, "other", H1) is None
    assert warehouse.partition_rows("no_such", "orders", H1) is None
    fake.tables[(PROJECT, dataset, "orders")]["partitions"][partition_id(H1, DAY)].pop()  # BigQuery now holds 5
    assert warehouse.partition_rows(dataset, "orders", H1) == 5
    assert fake.calls_of("jobs.query") == 5


def test_an_empty_hour_empties_its_partition(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(3))]), NO_SPARK)
    load_done_file(warehouse, store, land(store, dataset, H2, [(0, 1, V1, orders(2))]), NO_SPARK)

    result = load_done_file(warehouse, store, land(store, dataset, H1, []), NO_SPARK)

    assert (result.rows, result.job_id) == (0, None)
    assert rows_of(fake, dataset, H1) == [] and len(rows_of(fake, dataset, H2)) == 2
    assert warehouse.partition_rows(dataset, "orders", H1) is None
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
    table.time_partitioning = bigquery.TimePartitioning(type_="MONTH")
    client.create_table(table)
    with pytest.raises(LoadError, match=f"table {PROJECT}.{dataset}.orders exists but is partitioned by MONTH"):
        load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(1))]), NO_SPARK)
    assert fake.jobs == {}


def test_check_writable_creates_the_dataset_and_names_a_missing_role(warehouse, fake, store, dataset):
    warehouse.check_writable()
    assert fake.datasets[(PROJECT, dataset)]["location"] == "US"
    BigQueryWarehouse(fake.client(PROJECT), store, PROJECT).check_writable()  # no datasets: the project answers
    other = bigquery_warehouse(fake, store, PROJECT, datasets=[dataset + "_x"])
    fake.deny("bigquery.datasets.create")
    with pytest.raises(LoadError, match=r"BigQuery Data Editor \(roles/bigquery.dataEditor\)"):
        other.check_writable()
    fake.denied.clear()
    fake.deny("bigquery.jobs.create")
    with pytest.raises(LoadError, match=r"grant the identity running kafka_landing BigQuery Job User"):
        load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(1))]), NO_SPARK)


def test_a_dataset_in_another_location_is_refused(fake, store, dataset):
    fake.client(PROJECT, location="EU").create_dataset(bigquery.Dataset(f"{PROJECT}.{dataset}"))
    warehouse = bigquery_warehouse(fake, store, PROJECT, datasets=[dataset])
    with pytest.raises(LoadError, match=f"dataset {PROJECT}.{dataset} is in EU"):
        warehouse.check_writable()


# --- every registry-compatible change, in any order of hours --------------------------------------

def _addr(*extra):
    return {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}, *extra]}


def _status(*symbols):
    return {"type": "enum", "name": "Status", "symbols": list(symbols)}


def _dec(precision):
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 2}


ZIP = {"name": "zip", "type": ["null", "string"], "default": None}
COUNTRY = {"name": "country", "type": "string", "default": "DE"}  # non-null, with a default
SHIPPING = {"name": "shipping", "type": ["null", {"type": "record", "name": "Shipping", "fields": [
    {"name": "carrier", "type": "string"}]}], "default": None}
EV1 = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"}, {"name": "qty", "type": "int"},
       {"name": "ratio", "type": "float"}, {"name": "price", "type": _dec(10)},
       {"name": "status", "type": _status("NEW", "PAID")}, {"name": "addr", "type": _addr()},
       {"name": "tags", "type": {"type": "array", "items": "int"}},
       {"name": "attrs", "type": {"type": "map", "values": "int"}},
       {"name": "legacy", "type": "long", "default": 0}]
# v2: long -> double, int -> long, float -> double, decimal(10,2) -> decimal(40,2) (NUMERIC -> BIGNUMERIC), an
# enum symbol, an optional field inside a record, array items and map values int -> long, `legacy` removed, a
# non-null field with a default added, a new optional record
EV2 = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"}, {"name": "qty", "type": "long"},
       {"name": "ratio", "type": "double"}, {"name": "price", "type": _dec(40)},
       {"name": "status", "type": _status("NEW", "PAID", "REFUNDED")}, {"name": "addr", "type": _addr(ZIP)},
       {"name": "tags", "type": {"type": "array", "items": "long"}},
       {"name": "attrs", "type": {"type": "map", "values": "long"}},
       {"name": "currency", "type": "string", "default": "EUR"}, SHIPPING]
# v3: `currency` removed again, qty becomes a union with null, a non-null field with a default inside addr
EV3 = [f for f in EV2 if f["name"] not in ("currency", "qty", "addr")] + [
    {"name": "qty", "type": ["null", "long"], "default": None}, {"name": "addr", "type": _addr(ZIP, COUNTRY)}]
BIG = Decimal("12345678901234567890123456789012345.50")


def ev1(i):
    return {"order_id": f"v1-{i}", "amount": 10 + i, "qty": 1, "ratio": 0.5, "price": Decimal("1.25"),
            "status": "PAID", "addr": {"city": "Oslo"}, "tags": [1, 2], "attrs": {"k": 1}, "legacy": 7}


def ev2(i):
    return {"order_id": f"v2-{i}", "amount": 2.5, "qty": 2 ** 40, "ratio": 0.1, "price": BIG, "status": "REFUNDED",
            "addr": {"city": "Rome", "zip": "00100"}, "tags": [2 ** 40], "attrs": {"k": 2 ** 40}, "currency": "EUR",
            "shipping": {"carrier": "DHL"}}


def ev3(i):
    return {"order_id": f"v3-{i}", "amount": 3.75, "qty": None, "ratio": 0.25, "price": Decimal("2.50"),
            "status": "NEW", "addr": {"city": "Lyon", "zip": None, "country": "FR"}, "tags": [], "attrs": {},
            "shipping": None}


def read_back(record: dict) -> dict:
    """A produced record as BigQuery gives it back from the evolved table: every column, integers
    of a widened column as floats, maps as key/value records, absent fields null."""
    addr = {"zip": None, "country": None, **record["addr"]}
    return {"order_id": record["order_id"], "amount": float(record["amount"]), "qty": record["qty"],
            "ratio": record["ratio"], "price": record["price"], "status": record["status"], "addr": addr,
            "tags": record["tags"], "attrs": [{"key": k, "value": v} for k, v in record["attrs"].items()],
            "legacy": record.get("legacy"), "currency": record.get("currency"), "shipping": record.get("shipping")}


def exactly(a, b) -> bool:
    """Equal and of the same types (1 and 1.0 differ), recursively."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(exactly(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(exactly(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def shape(fields: list[dict]) -> dict:
    return {f["name"]: (f["type"], f.get("mode", "NULLABLE"), shape(f.get("fields", []))) for f in fields}


def test_every_registry_compatible_change_loads_oldest_or_newest_hour_first(store, fake):
    H3, H4 = "2026-02-02T15", "2026-02-03T16"  # a day each: each partition holds one hour's rows
    hours = {H1: [(0, 1, EV1, [ev1(0), ev1(1)])], H2: [(0, 2, EV2, [ev2(0)])], H3: [(0, 3, EV3, [ev3(0)])],
             H4: [(0, 3, EV3, [ev3(1)]), (1, 1, EV1, [ev1(2)])]}  # mixed: the v1 file sorts last
    produced = {H1: [ev1(0), ev1(1)], H2: [ev2(0)], H3: [ev3(0)], H4: [ev3(1), ev1(2)]}
    shapes = {}
    for order in ((H1, H2, H3, H4), (H4, H3, H2, H1)):
        dataset = f"evo_{uuid.uuid4().hex[:8]}"
        warehouse = bigquery_warehouse(fake, store, PROJECT)
        ddl_before = len(fake.ddl)
        for hour in order:
            result = load_done_file(warehouse, store, land(store, dataset, hour, hours[hour]), NO_SPARK)
            assert result.rows == len(produced[hour])
        for hour, records in produced.items():
            got = sorted(({k: v for k, v in r.items() if not k.startswith("_kafka")}
                          for r in rows_of(fake, dataset, hour)), key=lambda r: r["order_id"])
            want = sorted((read_back(r) for r in records), key=lambda r: r["order_id"])
            assert exactly(got, want), (order, hour, got, want)
        schema = shape(fake.schema(PROJECT, dataset, "orders"))
        assert {k: schema[k][:2] for k in ("amount", "qty", "ratio", "price", "legacy", "currency", "shipping")} == {
            "amount": ("FLOAT", "REQUIRED"), "qty": ("INTEGER", "NULLABLE"), "ratio": ("FLOAT", "REQUIRED"),
            "price": ("BIGNUMERIC", "REQUIRED"), "legacy": ("INTEGER", "NULLABLE"),
            "currency": ("STRING", "NULLABLE"), "shipping": ("RECORD", "NULLABLE")}
        assert schema["addr"][2]["country"] == ("STRING", "NULLABLE", {})
        shapes[order[0]] = schema
        ddl = fake.ddl[ddl_before:]
        if order[0] == H1:  # the widenings, once each, before v2's load
            table_id = f"{PROJECT}.{dataset}.orders"
            assert sorted(ddl) == [f"ALTER TABLE `{table_id}` ALTER COLUMN `amount` SET DATA TYPE FLOAT64",
                                   f"ALTER TABLE `{table_id}` ALTER COLUMN `price` SET DATA TYPE BIGNUMERIC"]
        else:  # the newest hour created the table as wide as it gets
            assert ddl == []
    assert shapes[H1] == shapes[H4]


def test_a_change_bigquery_cannot_make_fails_once_naming_the_field(warehouse, store, fake, dataset):
    load_done_file(warehouse, store, land(store, dataset, H1, [(0, 1, V1, orders(2))]), NO_SPARK)
    as_bytes = [{"name": "order_id", "type": "bytes"}, {"name": "amount", "type": "long"}]
    bad_rel = land(store, dataset, H2, [(0, 4, as_bytes, [{"order_id": b"x", "amount": 1}])])
    content = store.read_bytes(bad_rel)
    mark_pending(store, bad_rel, content)
    jobs_before, schema_before = len(fake.jobs), fake.schema(PROJECT, dataset, "orders")

    with pytest.raises(IncompatibleSchemaError) as failed:
        load_done_file(warehouse, store, bad_rel, NO_SPARK)

    message = str(failed.value)
    assert failed.value.transient is False
    assert f"{PROJECT}.{dataset}.orders day 2026-02-01 (loading hour {H2})" in message and "order_id" in message \
        and "schema id 4" in message
    assert "STRING" in message and "BYTES" in message and "Nothing was loaded" in message
    assert len(fake.jobs) == jobs_before and fake.ddl == []  # no load job spent on what cannot load
    assert fake.schema(PROJECT, dataset, "orders") == schema_before and rows_of(fake, dataset, H2) == []
    th = parse_done_path(bad_rel)  # the refusal is its own record beside the marker now
    assert refusal(store, th, Marks({th.hour: content_sha(content)})).why == message
