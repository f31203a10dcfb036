"""Spark reads the Iceberg warehouse's tables (`IcebergWarehouse.spark_table`) as pyiceberg reads
them: every snapshot of a table that took a new column and a wider decimal in metadata, a reloaded
hour and a widening that rewrote it, each under its own schema. Real loads, on the stack's Spark
Connect server, where Iceberg's own Spark catalog cannot load (jvm/pom.xml)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kafka_landing.errors import KafkaLandingError
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing_tests.integration.test_iceberg_warehouse import V1, V2, V_PRECISION, _hour, _land_orders, orders

# long -> double: a change Iceberg cannot hold in metadata, so its commit rewrites the table
V_DOUBLE = {**V_PRECISION, "fields": [V_PRECISION["fields"][0], {"name": "amount", "type": "double"},
                                      V_PRECISION["fields"][2]]}


def _sorted(rows) -> list[dict]:
    return sorted(rows, key=lambda r: (r["hour"], r["order_id"]))


def _spark_rows(df) -> list[dict]:
    return _sorted(r.asDict(recursive=True) for r in df.collect())


def test_spark_reads_every_snapshot_of_a_widened_and_reloaded_table_as_pyiceberg_does(tmp_path, spark):
    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))

    def load(hour: str, schema: dict, records: list[dict]) -> None:
        assert wh.load_partition(store, _land_orders(store, hour, schema, records), lambda: spark).rows == len(records)

    load(_hour(0), V1, orders(2))
    load(_hour(1), V2, orders(2, 10, coupon="c"))  # a new column, which hour 0's file lacks
    load(_hour(2), V_PRECISION, orders(1, 20))  # decimal(9, 2) to (14, 2) in metadata: earlier files keep (9, 2)
    before_rewrite = wh.table("shop", "orders").current_snapshot().snapshot_id
    load(_hour(0), V1, orders(1, 30))  # hour 0 again: its rows replaced
    load(_hour(3), V_DOUBLE, [{"order_id": "d", "amount": 0.5, "price": Decimal("7.50")}])

    current = wh.spark_table(spark, "shop", "orders")
    assert {f.name: f.dataType.simpleString() for f in current.schema.fields} == {
        "order_id": "string", "amount": "double", "price": "decimal(14,2)", "hour": "string", "coupon": "string"}
    assert _spark_rows(current) == [
        {"order_id": "o30", "amount": 30.0, "price": Decimal("30.25"), "hour": _hour(0), "coupon": None},
        {"order_id": "o10", "amount": 10.0, "price": Decimal("10.25"), "hour": _hour(1), "coupon": "c"},
        {"order_id": "o11", "amount": 11.0, "price": Decimal("11.25"), "hour": _hour(1), "coupon": "c"},
        {"order_id": "o20", "amount": 20.0, "price": Decimal("20.25"), "hour": _hour(2), "coupon": None},
        {"order_id": "d", "amount": 0.5, "price": Decimal("7.50"), "hour": _hour(3), "coupon": None},
    ]

    # Time travel: every snapshot reads as pyiceberg reads it, under that snapshot's schema.
    t = wh.table("shop", "orders")
    snapshots = [s.snapshot_id for s in t.metadata.snapshots]
    assert len(snapshots) >= 5 and before_rewrite in snapshots
    for snapshot_id in snapshots:
        want = _sorted(t.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())
        assert _spark_rows(wh.spark_table(spark, "shop", "orders", snapshot_id)) == want, snapshot_id
    old = wh.spark_table(spark, "shop", "orders", before_rewrite)
    assert old.schema["amount"].dataType.simpleString() == "bigint"
    assert [(r["order_id"], r["amount"], r["price"]) for r in _spark_rows(old)] == [
        ("o0", 0, Decimal("0.25")), ("o1", 1, Decimal("1.25")), ("o10", 10, Decimal("10.25")),
        ("o11", 11, Decimal("11.25")), ("o20", 20, Decimal("20.25"))]


def test_a_table_before_its_first_load_is_no_table(tmp_path, spark):
    with pytest.raises(KafkaLandingError, match="shop.none"):
        IcebergWarehouse(str(tmp_path / "warehouse")).spark_table(spark, "shop", "none")
