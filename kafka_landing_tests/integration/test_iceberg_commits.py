"""Iceberg commits whose answer the load does not get, and loads that rewrite the table while
others commit. A commit's files are removed only when the commit is known not to have happened;
after an unknown outcome the load looks for its own snapshot (review 2026-11-28, S5, ported from
`repro/s_iceberg_commit_unknown.py`). A load that rewrites the table does it once, under the
table's lock, however many hours commit meanwhile (S8). Real Spark writes, pyiceberg commits on
a SQLite catalog; the lost answer is the OperationalError psycopg2 gives when the connection
drops around COMMIT."""

from __future__ import annotations

import os
import threading

import pytest
import sqlalchemy.exc
from pyiceberg.exceptions import CommitStateUnknownException

from kafka_landing.errors import is_transient
from kafka_landing.handoff.manifests import read_done_file
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing_tests.helpers import drop_dataset, write_hour
from kafka_landing_tests.integration.test_iceberg_warehouse import V1, _hour, orders


@pytest.fixture(params=["sql", "rest"])
def iceberg(request, tmp_path):
    """The SQL catalog (SQLite under the root) and the stack's REST catalog: the same promises."""
    catalog = request.getfixturevalue("iceberg_rest_url") if request.param == "rest" else None
    wh = IcebergWarehouse(str(tmp_path / "warehouse"), catalog)
    if catalog:
        drop_dataset(wh, "shop")  # the session's catalog holds the shop.orders of the tests before
    return LocalStore(tmp_path / "landing"), wh


def _again(wh: IcebergWarehouse) -> IcebergWarehouse:
    """The same warehouse as another process opens it."""
    return IcebergWarehouse(wh.root, wh.tables.config)


def _landed(store, hour: str, records: list[dict], schema: dict = V1) -> dict:
    """A landed hour of shop.orders, as `load_partition`'s keyword arguments after the store."""
    done = write_hour(store, "shop", "orders", hour, [(0, 1, schema, records)])
    manifest, sha = read_done_file(store, done)
    return {"manifest": manifest, "done_file": done, "done_sha256": sha}


def _dropped_connection(wh: IcebergWarehouse) -> Exception:
    """How each catalog says a commit's answer was lost: the SQL database's connection dropped after
    its COMMIT; a REST server's 5xx for a commit it may have applied (the spec's CommitStateUnknown)."""
    if wh.tables.config.rest:
        return CommitStateUnknownException("ServiceFailureException: the connection to the backend closed")
    return sqlalchemy.exc.OperationalError("COMMIT", {}, Exception(
        "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally"))


def _answer_lost(monkeypatch, wh: IcebergWarehouse, committed: bool = True, then_unreadable: bool = False) -> None:
    """The catalog's next commit goes through (or, `committed=False`, does not) and its answer is
    lost. `then_unreadable`: the table cannot be read either, until `monkeypatch.undo()`."""
    catalog = type(wh.tables.catalog)
    real = catalog.commit_table

    def commit_then_lose_the_answer(self, *args, **kwargs):
        monkeypatch.setattr(catalog, "commit_table", real)
        if committed:
            real(self, *args, **kwargs)
        if then_unreadable:
            def unreadable(*_a, **_kw):
                raise _dropped_connection(wh)

            monkeypatch.setattr(catalog, "load_table", unreadable)
        raise _dropped_connection(wh)

    monkeypatch.setattr(catalog, "commit_table", commit_then_lose_the_answer)


def _missing_files(wh: IcebergWarehouse) -> list[str]:
    """The data files the table's current snapshot lists that are not on disk."""
    t = _again(wh).table("shop", "orders")
    return [task.file.file_path for task in t.scan().plan_files() if not os.path.exists(task.file.file_path)]


def _order_ids(wh: IcebergWarehouse) -> list[str]:
    """A full read of the table (it fails if a file its snapshot lists is gone)."""
    return sorted(r["order_id"] for r in _again(wh).table("shop", "orders").scan().to_arrow()
                  .to_pylist())


def test_a_commit_that_went_through_but_whose_answer_was_lost_is_loaded_and_keeps_its_files(iceberg, spark,
                                                                                            monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    snapshots = len(wh.table("shop", "orders").metadata.snapshots)
    hour1 = _landed(store, _hour(1), orders(3, 10))
    _answer_lost(monkeypatch, wh)

    result = wh.load_partition(store, spark=lambda: spark, **hour1)

    assert result.rows == 3
    assert _missing_files(wh) == []
    assert _order_ids(wh) == ["o0", "o1", "o10", "o11", "o12"]
    assert _again(wh).loaded_sha("shop", "orders", _hour(1)) == hour1["done_sha256"]
    assert len(wh.table("shop", "orders").metadata.snapshots) == snapshots + 1, "committed twice"


def test_a_commit_that_did_not_happen_and_whose_answer_was_lost_removes_its_files_and_is_transient(iceberg, spark,
                                                                                                  monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    before = wh.table("shop", "orders").current_snapshot().snapshot_id
    hour1 = _landed(store, _hour(1), orders(3, 10))
    _answer_lost(monkeypatch, wh, committed=False)

    with pytest.raises(type(_dropped_connection(wh))) as err:
        wh.load_partition(store, spark=lambda: spark, **hour1)

    assert is_transient(err.value)
    assert wh.table("shop", "orders").current_snapshot().snapshot_id == before
    assert list((wh.table_dir("shop", "orders") / "data" / f"hour={_hour(1)}").rglob("*.parquet")) == []
    assert wh.loaded("shop", "orders", _hour(1)) is None
    wh.load_partition(store, spark=lambda: spark, **hour1)  # the step's retry
    assert _order_ids(wh) == ["o0", "o1", "o10", "o11", "o12"]


def test_a_commit_whose_outcome_cannot_be_looked_up_keeps_its_files_and_the_retry_finds_it(iceberg, spark,
                                                                                          monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    hour1 = _landed(store, _hour(1), orders(3, 10))
    _answer_lost(monkeypatch, wh, then_unreadable=True)

    with pytest.raises(Exception) as err:
        wh.load_partition(store, spark=lambda: spark, **hour1)

    assert is_transient(err.value), err.value
    assert _hour(1) in str(err.value) and "kept" in str(err.value), err.value
    monkeypatch.undo()
    assert _missing_files(wh) == []
    again = _again(wh).load_partition(store, spark=lambda: spark, **hour1)  # the step's retry
    assert again.rows == 3
    assert _again(wh).loaded_sha("shop", "orders", _hour(1)) == hour1["done_sha256"]
    assert _order_ids(wh) == ["o0", "o1", "o10", "o11", "o12"]


def test_hours_staged_together_whose_commit_answer_was_lost_are_loaded_and_keep_their_files(iceberg, spark,
                                                                                           monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    hours = [_landed(store, _hour(h), orders(2, 10 * h)) for h in (1, 2)]
    _answer_lost(monkeypatch, wh)

    staged = wh.stage(store, [(h["manifest"], h["done_file"], h["done_sha256"]) for h in hours], lambda: spark)

    assert len(staged.committed) == 2
    assert _missing_files(wh) == []
    snapshots = len(wh.table("shop", "orders").metadata.snapshots)
    for h in hours:
        assert wh.load_partition(store, spark=lambda: spark, staged=staged, **h).rows == 2
    assert len(wh.table("shop", "orders").metadata.snapshots) == snapshots, "the hours' own loads committed again"
    assert _order_ids(wh) == ["o0", "o1", "o10", "o11", "o20", "o21"]


def test_a_load_that_rewrites_the_table_does_it_once_while_another_hours_load_waits_to_commit(iceberg, spark,
                                                                                             monkeypatch):
    """long -> double rewrites the table's other hours. Another hour's load that comes to its
    commit during the rewrite waits for the table's lock: the rewrite is not started over, and
    every row of both loads is in the table, every file under the table's types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafka_landing.warehouse.iceberg import commits, warehouse

    store, wh = iceberg
    for h in (0, 1):
        wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(h), orders(1, 10 * h)))
    wider = {**V1, "fields": [V1["fields"][0], {"name": "amount", "type": "double"}, V1["fields"][2]]}
    rewriting = _landed(store, _hour(2), [{"order_id": "w", "amount": 0.5, "price": orders(1)[0]["price"]}], wider)
    other = _landed(store, _hour(3), orders(2, 30))
    rewrites, errors = [], []
    other_staged, other_done = threading.Event(), threading.Event()

    def load_other():
        try:
            _again(wh).load_partition(store, spark=lambda: spark, **other)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            other_done.set()

    real_rewrite = commits.rewrite_table

    def rewrite(*args, **kwargs):
        rewrites.append(args)
        if len(rewrites) == 1:  # the other hour's load starts now and comes to its commit meanwhile
            threading.Thread(target=load_other).start()
            assert other_staged.wait(300), "the other hour's load never came to its commit"
            other_done.wait(5)  # without a lock it commits now
        return real_rewrite(*args, **kwargs)

    monkeypatch.setattr(commits, "rewrite_table", rewrite)
    monkeypatch.setattr(warehouse, "crash_point", lambda step: other_staged.set()
                        if step == "warehouse:staged" and rewrites else None)

    wh.load_partition(store, spark=lambda: spark, **rewriting)
    assert other_done.wait(300)

    assert errors == []
    assert len(rewrites) == 1, "the rewrite started over"
    assert _order_ids(wh) == ["o0", "o10", "o30", "o31", "w"]
    assert _missing_files(wh) == []
    t = _again(wh).table("shop", "orders")
    assert {pq.read_schema(task.file.file_path).field("amount").type for task in t.scan().plan_files()} \
        == {pa.float64()}


def test_a_table_of_another_root_in_a_shared_catalog_is_refused_and_left_alone_by_upkeep(iceberg_rest_url, spark,
                                                                                          tmp_path):
    """Two deployments (two roots) on one REST catalog, the same dataset.table: the second's load is
    refused before it writes into the first's table, and its upkeep leaves that table alone."""
    from datetime import datetime, timedelta, timezone

    from kafka_landing.warehouse.backend import LoadError
    from kafka_landing.warehouse.iceberg import upkeep

    first, second = (IcebergWarehouse(str(tmp_path / name / "warehouse"), iceberg_rest_url) for name in ("a", "b"))
    drop_dataset(first, "shop")
    store_a, store_b = LocalStore(tmp_path / "a" / "landing"), LocalStore(tmp_path / "b" / "landing")
    first.load_partition(store_a, spark=lambda: spark, **_landed(store_a, _hour(0), orders(2)))
    first.load_partition(store_a, spark=lambda: spark, **_landed(store_a, _hour(1), orders(2, 10)))
    snapshots = [s.snapshot_id for s in first.table("shop", "orders").metadata.snapshots]

    with pytest.raises(LoadError) as err:
        second.load_partition(store_b, spark=lambda: spark, **_landed(store_b, _hour(0), orders(3, 20)))

    assert not err.value.transient and not is_transient(err.value)
    assert str(tmp_path / "a" / "warehouse" / "shop" / "orders") in str(err.value)
    assert str(tmp_path / "b" / "warehouse" / "shop" / "orders") in str(err.value)
    assert upkeep(second, timedelta(0), now=datetime.now(timezone.utc) + timedelta(days=2)) == []
    assert [s.snapshot_id for s in first.table("shop", "orders").metadata.snapshots] == snapshots
    assert _order_ids(first) == ["o0", "o1", "o10", "o11"]
    assert [u.table for u in upkeep(first, timedelta(0), now=datetime.now(timezone.utc) + timedelta(days=2))] == [
        "shop.orders"]
