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
from pyiceberg.catalog.sql import SqlCatalog

from kafka_landing.errors import is_transient
from kafka_landing.handoff.manifests import read_done_file
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.integration.test_iceberg_warehouse import V1, _hour, orders


@pytest.fixture
def iceberg(tmp_path):
    return LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))


def _landed(store, hour: str, records: list[dict], schema: dict = V1) -> dict:
    """A landed hour of shop.orders, as `load_partition`'s keyword arguments after the store."""
    done = write_hour(store, "shop", "orders", hour, [(0, 1, schema, records)])
    manifest, sha = read_done_file(store, done)
    return {"manifest": manifest, "done_file": done, "done_sha256": sha}


def _dropped_connection() -> sqlalchemy.exc.OperationalError:
    return sqlalchemy.exc.OperationalError("COMMIT", {}, Exception(
        "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally"))


def _answer_lost(monkeypatch, committed: bool = True, then_unreadable: bool = False) -> None:
    """The catalog's next commit goes through in the database (or, `committed=False`, does not) and
    its answer is lost. `then_unreadable`: the table cannot be read either, until `monkeypatch.undo()`."""
    real = SqlCatalog.commit_table

    def commit_then_lose_the_answer(self, *args, **kwargs):
        monkeypatch.setattr(SqlCatalog, "commit_table", real)
        if committed:
            real(self, *args, **kwargs)
        if then_unreadable:
            def unreadable(*_a, **_kw):
                raise _dropped_connection()

            monkeypatch.setattr(SqlCatalog, "load_table", unreadable)
        raise _dropped_connection()

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_then_lose_the_answer)


def _missing_files(wh: IcebergWarehouse) -> list[str]:
    """The data files the table's current snapshot lists that are not on disk."""
    t = IcebergWarehouse(wh.root).table("shop", "orders")
    return [task.file.file_path for task in t.scan().plan_files() if not os.path.exists(task.file.file_path)]


def _order_ids(wh: IcebergWarehouse) -> list[str]:
    """A full read of the table (it fails if a file its snapshot lists is gone)."""
    return sorted(r["order_id"] for r in IcebergWarehouse(wh.root).table("shop", "orders").scan().to_arrow()
                  .to_pylist())


def test_a_commit_that_went_through_but_whose_answer_was_lost_is_loaded_and_keeps_its_files(iceberg, spark,
                                                                                            monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    snapshots = len(wh.table("shop", "orders").metadata.snapshots)
    hour1 = _landed(store, _hour(1), orders(3, 10))
    _answer_lost(monkeypatch)

    result = wh.load_partition(store, spark=lambda: spark, **hour1)

    assert result.rows == 3
    assert _missing_files(wh) == []
    assert _order_ids(wh) == ["o0", "o1", "o10", "o11", "o12"]
    assert IcebergWarehouse(wh.root).loaded_sha("shop", "orders", _hour(1)) == hour1["done_sha256"]
    assert len(wh.table("shop", "orders").metadata.snapshots) == snapshots + 1, "committed twice"


def test_a_commit_that_did_not_happen_and_whose_answer_was_lost_removes_its_files_and_is_transient(iceberg, spark,
                                                                                                  monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    before = wh.table("shop", "orders").current_snapshot().snapshot_id
    hour1 = _landed(store, _hour(1), orders(3, 10))
    _answer_lost(monkeypatch, committed=False)

    with pytest.raises(sqlalchemy.exc.OperationalError) as err:
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
    _answer_lost(monkeypatch, then_unreadable=True)

    with pytest.raises(Exception) as err:
        wh.load_partition(store, spark=lambda: spark, **hour1)

    assert is_transient(err.value), err.value
    assert _hour(1) in str(err.value) and "kept" in str(err.value), err.value
    monkeypatch.undo()
    assert _missing_files(wh) == []
    again = IcebergWarehouse(wh.root).load_partition(store, spark=lambda: spark, **hour1)  # the step's retry
    assert again.rows == 3
    assert IcebergWarehouse(wh.root).loaded_sha("shop", "orders", _hour(1)) == hour1["done_sha256"]
    assert _order_ids(wh) == ["o0", "o1", "o10", "o11", "o12"]


def test_hours_staged_together_whose_commit_answer_was_lost_are_loaded_and_keep_their_files(iceberg, spark,
                                                                                           monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, spark=lambda: spark, **_landed(store, _hour(0), orders(2)))
    hours = [_landed(store, _hour(h), orders(2, 10 * h)) for h in (1, 2)]
    _answer_lost(monkeypatch)

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
            IcebergWarehouse(wh.root).load_partition(store, spark=lambda: spark, **other)
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
    t = IcebergWarehouse(wh.root).table("shop", "orders")
    assert {pq.read_schema(task.file.file_path).field("amount").type for task in t.scan().plan_files()} \
        == {pa.float64()}
