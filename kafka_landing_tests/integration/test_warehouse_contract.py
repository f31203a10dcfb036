"""What every warehouse backend promises, one test body run against each: the embedded Iceberg
tables (a local landing root, real Spark) in the SQL catalog and in the stack's REST catalog, and BigQuery (a gs:// landing root on the GCS emulator,
the strict BigQuery fake at the client's HTTP transport, no Spark). A new backend gets these tests
by adding a parameter. What only one backend has (job ids, ledgers, Iceberg rewrites and
snapshots) is tested in that backend's own file."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Callable

import pytest
from pyiceberg.expressions import EqualTo

from kafka_landing.errors import is_transient
from kafka_landing.handoff.markers import content_sha
from kafka_landing.store.base import LandingStore
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.bigquery import DAY, partition_id
from kafka_landing.warehouse.load import LoadError, Warehouse, load_done_file
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.helpers import avro_file, write_hour

PROJECT = "kl-contract"
TABLE = "orders"
H1, H2 = "2026-01-31T13", "2026-02-01T14"  # two days: BigQuery's partitions are days
V1 = {"type": "record", "name": "Order", "namespace": "shop",
      "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "coupon", "type": ["null", "string"], "default": None}]}
V_BAD = {**V1, "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "string"}]}


@dataclass
class Backend:
    warehouse: Warehouse
    store: LandingStore
    spark: Callable[[], object]
    dataset: str
    rows: Callable[[str], list[dict]]  # hour -> the rows the warehouse holds for it, read from the warehouse

    def land(self, hour: str, *parts: tuple[int, int, dict, list[dict]]) -> str:
        return write_hour(self.store, self.dataset, TABLE, hour, list(parts))

    def load(self, done_rel: str):
        return load_done_file(self.warehouse, self.store, done_rel, self.spark)

    def ids(self, hour: str) -> list[str]:
        return sorted(r["order_id"] for r in self.rows(hour))


@pytest.fixture(params=["iceberg", "iceberg_rest", "bigquery"])
def backend(request, tmp_path) -> Backend:
    dataset = f"shop_{uuid.uuid4().hex[:8]}"
    if request.param.startswith("iceberg"):
        spark = request.getfixturevalue("spark")
        catalog = request.getfixturevalue("iceberg_rest_url") if request.param == "iceberg_rest" else None
        iceberg = IcebergWarehouse(str(tmp_path / "warehouse"), catalog)

        def iceberg_rows(hour: str) -> list[dict]:
            t = iceberg.table(dataset, TABLE)
            if t is None:
                return []
            rows = t.scan(row_filter=EqualTo("hour", hour)).to_arrow().to_pylist()
            return [{k: v for k, v in r.items() if k != "hour"} for r in rows]

        return Backend(iceberg, LocalStore(tmp_path / "landing"), lambda: spark, dataset, iceberg_rows)
    store = request.getfixturevalue("gcs_store_factory")(prefix="landing", lease_seconds=5)
    fake = request.getfixturevalue("bigquery_on_gcs")
    wh = bigquery_warehouse(fake, store, PROJECT, datasets=[dataset])
    return Backend(wh, store, NO_SPARK, dataset,
                  lambda hour: fake.partition_rows(PROJECT, dataset, TABLE, partition_id(hour, DAY)))


def orders(n: int, start: int = 0, **extra) -> list[dict]:
    return [{"order_id": f"o{start + i}", "amount": start + i, **extra} for i in range(n)]


def test_an_hour_holds_exactly_the_rows_its_done_file_lists(backend):
    done_rel = backend.land(H1, (0, 1, V1, orders(3)), (1, 1, V1, orders(2, 10)))
    stray = done_rel.rsplit("/", 1)[0] + "/orders+9+x.orders+1+0+0.avro"
    backend.store.write_atomic(stray, avro_file(V1, orders(4, 90)))  # an attempt's leftover, in no done file

    result = backend.load(done_rel)

    assert (result.rows, result.files, result.partition) == (5, 2, H1)
    assert result.done_sha256 == content_sha(backend.store.read_bytes(done_rel))
    assert backend.ids(H1) == ["o0", "o1", "o10", "o11", "o2"]
    assert backend.warehouse.partition_rows(backend.dataset, TABLE, H1) == 5
    assert backend.warehouse.loaded_sha(backend.dataset, TABLE, H1) == result.done_sha256
    assert backend.warehouse.loaded_partitions(backend.dataset, TABLE) == {H1}
    assert result.location == backend.warehouse.partition_location(backend.dataset, TABLE, H1)


def test_reloading_the_same_content_changes_nothing(backend):
    done_rel = backend.land(H1, (0, 1, V1, orders(4)))
    first = backend.load(done_rel)
    again = backend.load(done_rel)
    assert (again.rows, again.done_sha256) == (first.rows, first.done_sha256)
    assert backend.ids(H1) == ["o0", "o1", "o2", "o3"]


def test_new_content_replaces_only_its_hour(backend):
    backend.load(backend.land(H1, (0, 1, V1, orders(5))))
    backend.load(backend.land(H2, (0, 1, V1, orders(3, 100))))

    relanded = backend.load(backend.land(H1, (0, 1, V1, orders(2, 50))))

    assert backend.ids(H1) == ["o50", "o51"] and backend.ids(H2) == ["o100", "o101", "o102"]
    partition_rows = backend.warehouse.partition_rows
    assert (partition_rows(backend.dataset, TABLE, H1), partition_rows(backend.dataset, TABLE, H2)) == (2, 3)
    assert backend.warehouse.loaded_sha(backend.dataset, TABLE, H1) == relanded.done_sha256
    assert backend.warehouse.loaded_partitions(backend.dataset, TABLE) == {H1, H2}


def test_an_empty_hour_empties_it_and_is_recorded(backend):
    backend.load(backend.land(H1, (0, 1, V1, orders(3))))
    backend.load(backend.land(H2, (0, 1, V1, orders(2))))

    result = backend.load(backend.land(H1))

    assert result.rows == 0 and backend.rows(H1) == [] and len(backend.rows(H2)) == 2
    assert backend.warehouse.partition_rows(backend.dataset, TABLE, H1) is None
    assert backend.warehouse.loaded(backend.dataset, TABLE, H1)["rows"] == 0
    assert backend.warehouse.loaded_sha(backend.dataset, TABLE, H1) == result.done_sha256


def test_a_field_added_in_a_later_hour_keeps_every_hours_rows(backend):
    backend.load(backend.land(H1, (0, 1, V1, orders(2))))
    backend.load(backend.land(H2, (0, 2, V2, orders(1, 10, coupon="c"))))

    assert backend.ids(H1) == ["o0", "o1"]
    assert [r["coupon"] for r in backend.rows(H2)] == ["c"]


def test_a_listed_file_that_is_missing_loads_nothing_and_may_be_retried(backend):
    backend.load(backend.land(H1, (0, 1, V1, orders(2))))
    done_rel = backend.land(H1, (0, 1, V1, orders(3, 20)))
    [listed] = backend.store.read_json(done_rel)["files"]
    gone = listed["path"]
    backend.store.delete(gone)

    with pytest.raises(LoadError, match=re.escape(f"{backend.store.location(gone)} does not exist")) as err:
        backend.load(done_rel)

    assert is_transient(err.value)  # a copy of the data may still be under way
    assert backend.ids(H1) == ["o0", "o1"]


def test_an_incompatible_schema_fails_terminally_and_changes_nothing(backend):
    first = backend.load(backend.land(H1, (0, 1, V1, orders(2))))
    bad = backend.land(H1, (0, 3, V_BAD, [{"order_id": "x", "amount": "lots"}]))

    with pytest.raises(IncompatibleSchemaError, match="amount") as err:
        backend.load(bad)

    assert not is_transient(err.value)
    assert backend.ids(H1) == ["o0", "o1"]
    assert backend.warehouse.loaded_sha(backend.dataset, TABLE, H1) == first.done_sha256
