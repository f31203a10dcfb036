"""`python -m kafka_landing reload`: every landed hour loaded into an Iceberg warehouse in one
command, from the landing files alone (the source of truth): what moves the Parquet folders of
earlier releases, or a lost warehouse, into Iceberg. Run again it loads nothing; an hour that cannot
load fails alone, named, and the command says so by its exit code. Real Spark, real pyiceberg; the
event-time tables through the SQL and the REST catalog."""

from __future__ import annotations

import pytest

from kafka_landing.__main__ import main
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import HOUR_COLUMN, IcebergWarehouse
from kafka_landing_tests.helpers import drop_dataset, write_hour
from kafka_landing_tests.integration.test_iceberg_warehouse import V1, V2, _hour, orders

TOPICS = {"orders": {"dataset": "shop", "table": "orders", "first_hour": "2026-01-01T00"}}


def _iceberg_hours(root) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in IcebergWarehouse(str(root)).table("shop", "orders").scan().to_arrow().to_pylist():
        out.setdefault(r[HOUR_COLUMN], []).append(r["order_id"])
    return {h: sorted(ids) for h, ids in sorted(out.items())}


def test_a_landing_root_alone_fills_an_iceberg_warehouse_in_one_command_and_again_loads_nothing(
        code_location, monkeypatch, spark, capsys, tmp_path):
    landing, _ = code_location(TOPICS)
    store = LocalStore(landing)
    landed = {_hour(i): sorted(r["order_id"] for r in orders(2, 10 * i)) for i in range(30)}
    for i in range(30):
        write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2, 10 * i))], topic="orders")
    write_hour(store, "shop", "orders", _hour(30), [(0, 2, V2, orders(1, 300, coupon="c"))], topic="orders")
    landed[_hour(30)] = ["o300"]

    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(tmp_path / "iceberg"))  # a warehouse that holds nothing
    assert main(["reload"]) == 0
    out = capsys.readouterr().out

    assert len(landed) == 31 and _iceberg_hours(tmp_path / "iceberg") == landed
    assert "shop.orders: 24/31 hours" in out and "shop.orders: 31 hour(s) loaded into the iceberg warehouse" in out
    coupons = [r["coupon"] for r in IcebergWarehouse(str(tmp_path / "iceberg")).table("shop", "orders").scan()
               .to_arrow().to_pylist() if r[HOUR_COLUMN] == _hour(30)]
    assert coupons == ["c"]
    snapshots = len(IcebergWarehouse(str(tmp_path / "iceberg")).table("shop", "orders").metadata.snapshots)

    assert main(["reload"]) == 0  # again: every hour is held as its content
    assert "shop.orders: 0 hour(s) loaded" in capsys.readouterr().out
    assert len(IcebergWarehouse(str(tmp_path / "iceberg")).table("shop", "orders").metadata.snapshots) == snapshots


def test_the_parquet_warehouse_of_before_is_refused_naming_the_command_that_moves_it(code_location, monkeypatch,
                                                                                     capsys):
    code_location(TOPICS)
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "parquet")
    assert main(["reload"]) == 1
    err = capsys.readouterr().err
    assert "the Parquet warehouse is gone" in err and "python -m kafka_landing reload" in err


def test_an_hour_that_cannot_load_fails_alone_and_the_command_says_so(code_location, monkeypatch, spark, capsys):
    landing, _ = code_location(TOPICS)
    store = LocalStore(landing)
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(1, i))], topic="orders")
             for i in range(3)]
    broken = store.read_json(dones[1])
    broken["files"][0]["rows"] += 1  # the done file promises a row its file does not hold
    store.write_json_atomic(dones[1], broken)

    assert main(["reload", "--topic", "orders"]) == 1
    captured = capsys.readouterr()
    assert "shop.orders: 2 hour(s) loaded into the iceberg warehouse, 1 failed" in captured.out
    assert f"shop.orders: hour 2/3 failed: {dones[1]}: done file" in captured.err and "re-land the hour" in captured.err
    got = IcebergWarehouse(str(landing.parent / "warehouse")).table("shop", "orders").scan().to_arrow()
    assert sorted(got.column(HOUR_COLUMN).to_pylist()) == [_hour(0), _hour(2)]


@pytest.mark.parametrize("catalog", ["sql", "rest"])
def test_the_event_time_tables_are_reloaded_from_their_newest_versions(code_location, spark, capsys, catalog,
                                                                       monkeypatch, request):
    """In the SQL catalog and in a REST catalog (KAFKA_LANDING_ICEBERG_CATALOG_URI, the stack's)."""
    from pyiceberg.expressions import EqualTo

    from kafka_landing_tests.landed_hours import land_event_orders

    topics = {"orders": {**TOPICS["orders"], "event_time_field": "created_at"}}
    landing, warehouse = code_location(topics)
    uri = request.getfixturevalue("iceberg_rest_url") if catalog == "rest" else None
    if uri:
        monkeypatch.setenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", uri)
        drop_dataset(IcebergWarehouse(str(warehouse), uri), "shop")  # the session's catalog holds the tests' before
    store = LocalStore(landing)
    land_event_orders(store, "2026-01-31T10", {"2026-01-31T10": ["a", "b"], "2026-01-30T23": ["late"]})
    land_event_orders(store, "2026-01-31T11", {"2026-01-31T11": ["c"]}, first=2000)

    assert main(["reload"]) == 0
    assert "shop.orders__by_event: 2 event partition(s) loaded, 0 held already" in capsys.readouterr().out
    t = IcebergWarehouse(str(warehouse), uri).by_event("day", "created_at").table("shop", "orders__by_event")
    days = {d: sorted(r["order_id"] for r in t.scan(row_filter=EqualTo("event_day", d)).to_arrow().to_pylist())
            for d in ("2026-01-30", "2026-01-31")}
    assert days == {"2026-01-30": ["late"], "2026-01-31": ["a", "b", "c"]}

    assert main(["reload"]) == 0
    assert "shop.orders__by_event: 0 event partition(s) loaded, 2 held already" in capsys.readouterr().out
