"""The hours of a run loaded together into Iceberg (`IcebergWarehouse.stage`): one Spark job and
one commit for the run, while each hour's own load still records exactly its content. An hour
whose schema or content differs from what was staged loads alone; nothing is lost or doubled
whichever way an hour went. Real Spark writes, pyiceberg commits and reads back."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.handoff.manifests import read_done_file
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import HOUR_COLUMN, IcebergWarehouse
from kafka_landing.warehouse.load import load_done_file, stage_done_files
from kafka_landing_tests.helpers import drop_dataset, write_hour
from kafka_landing_tests.integration.test_iceberg_warehouse import V1, V2, V_PRECISION, _hour, orders


@pytest.fixture
def iceberg(tmp_path):
    return LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))


def _by_hour(wh: IcebergWarehouse) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in wh.table("shop", "orders").scan().to_arrow().to_pylist():
        out.setdefault(r[HOUR_COLUMN], []).append(r["order_id"])
    return {h: sorted(ids) for h, ids in sorted(out.items())}


def _ids(n: int, start: int) -> list[str]:
    return sorted(f"o{start + i}" for i in range(n))


def test_a_days_hours_load_in_one_commit_and_each_hours_load_records_its_own_content(iceberg, spark):
    store, wh = iceberg
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2, 10 * i)), (1, 1, V1, orders(1, 10 * i + 5))])
             for i in range(24)]

    staged = stage_done_files(wh, store, dones, lambda: spark)
    assert len(staged.committed) == 24
    results = [load_done_file(wh, store, d, lambda: spark, staged) for d in dones]

    t = wh.table("shop", "orders")
    assert len(t.metadata.snapshots) == 1  # hour by hour it would be 24
    assert _by_hour(wh) == {_hour(i): sorted(_ids(2, 10 * i) + _ids(1, 10 * i + 5)) for i in range(24)}
    assert [(r.rows, r.files) for r in results] == [(3, 2)] * 24
    for d in dones:
        manifest, sha = read_done_file(store, d)
        assert wh.loaded_sha("shop", "orders", manifest.partition) == sha
        assert wh.committed(t, manifest.partition)["sha256"] == sha
    # The same run again: nothing to stage, no new snapshot, each hour already loaded.
    assert stage_done_files(wh, store, dones, lambda: spark).committed == {}
    for d in dones:
        load_done_file(wh, store, d, lambda: spark)
    assert len(wh.table("shop", "orders").metadata.snapshots) == 1


def test_hours_whose_schema_differs_from_the_runs_load_alone_and_keep_their_values(iceberg, spark):
    """Hours 0-1 carry V1, hours 2-4 V2 (a new field): the V2 hours go together, the V1 hours on
    their own, under the widened table; every value reads back."""
    store, wh = iceberg
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2, 10 * i))]) for i in range(2)]
    dones += [write_hour(store, "shop", "orders", _hour(i), [(0, 2, V2, orders(2, 10 * i, coupon=f"c{i}"))])
              for i in range(2, 5)]

    load_done_file(wh, store, dones[0], lambda: spark)  # the table holds V1

    staged = stage_done_files(wh, store, dones[1:], lambda: spark)
    assert len(staged.committed) == 3
    results = [load_done_file(wh, store, d, lambda: spark, staged) for d in dones[1:]]

    assert [r.rows for r in results] == [2] * 4
    assert [r.added_columns for r in results] == [(), ("coupon",), (), ()]  # the batch's first hour added it
    rows = wh.table("shop", "orders").scan().to_arrow().to_pylist()
    assert sorted((r[HOUR_COLUMN], r["order_id"], r["coupon"]) for r in rows) == sorted(
        [(_hour(i), f"o{10 * i + k}", None) for i in range(2) for k in range(2)]
        + [(_hour(i), f"o{10 * i + k}", f"c{i}") for i in range(2, 5) for k in range(2)])


def test_a_run_that_widens_a_decimals_precision_loads_together_in_metadata(iceberg, spark):
    from decimal import Decimal

    store, wh = iceberg
    load_done_file(wh, store, write_hour(store, "shop", "orders", _hour(0), [(0, 1, V1, orders(1))]), lambda: spark)
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 3, V_PRECISION, orders(1, 10 ** 10 + i))])
             for i in range(1, 4)]
    first_file = {task.file.file_path for task in wh.table("shop", "orders").scan().plan_files()}

    staged = stage_done_files(wh, store, dones, lambda: spark)
    assert len(staged.committed) == 3
    for d in dones:
        load_done_file(wh, store, d, lambda: spark, staged)

    t = wh.table("shop", "orders")
    assert str(t.schema().find_field("price").field_type) == "decimal(14, 2)"
    assert first_file <= {task.file.file_path for task in t.scan().plan_files()}  # written once, never again
    rows = {r["order_id"]: r["price"] for r in t.scan().to_arrow().to_pylist()}
    assert rows == {"o0": Decimal("0.25"), **{f"o{10 ** 10 + i}": Decimal(f"{10 ** 10 + i}.25") for i in range(1, 4)}}


def test_an_hour_landed_again_after_its_run_was_staged_loads_its_new_content(iceberg, spark):
    store, wh = iceberg
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2, 10 * i))]) for i in range(3)]
    staged = stage_done_files(wh, store, dones, lambda: spark)
    assert len(staged.committed) == 3
    write_hour(store, "shop", "orders", _hour(1), [(0, 1, V1, orders(4, 100))])  # re-landed meanwhile

    again = load_done_file(wh, store, dones[1], lambda: spark, staged)

    assert again.rows == 4
    assert _by_hour(wh) == {_hour(0): _ids(2, 0), _hour(1): _ids(4, 100), _hour(2): _ids(2, 20)}
    assert wh.loaded_sha("shop", "orders", _hour(1)) == read_done_file(store, dones[1])[1]


def test_an_hour_whose_files_are_not_whole_loads_alone_and_the_others_together(iceberg, spark):
    from kafka_landing.warehouse.backend import LoadError
    from kafka_landing_tests.helpers import avro_file

    store, wh = iceberg
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2, 10 * i))]) for i in range(4)]
    short = read_done_file(store, dones[2])[0].files[0].path
    store.write_atomic(short, avro_file(V1, orders(1, 20)))  # a copy still under way: one row of two

    staged = stage_done_files(wh, store, dones, lambda: spark)
    assert len(staged.committed) == 3
    for i, d in enumerate(dones):
        if i == 2:
            with pytest.raises(LoadError, match="holds 1 rows, the done file says 2") as err:
                load_done_file(wh, store, d, lambda: spark, staged)
            assert err.value.transient
        else:
            load_done_file(wh, store, d, lambda: spark, staged)
    assert len(wh.table("shop", "orders").metadata.snapshots) == 1
    assert _by_hour(wh) == {_hour(i): _ids(2, 10 * i) for i in (0, 1, 3)}


def test_a_run_killed_after_its_commit_is_recorded_by_the_next_run_without_a_new_snapshot(iceberg, spark,
                                                                                         monkeypatch):
    store, wh = iceberg
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(1, i))]) for i in range(3)]
    from kafka_landing.warehouse.iceberg import stage as module  # the run's own crash points

    def killed(step):
        if step == "warehouse:swapped":
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(module, "crash_point", killed)
    with pytest.raises(KeyboardInterrupt):
        stage_done_files(wh, store, dones, lambda: spark)
    monkeypatch.undo()
    assert wh.loaded_partitions("shop", "orders") == set()  # no record yet: the table holds them

    fresh = IcebergWarehouse(wh.root)  # the next run
    assert stage_done_files(fresh, store, dones, lambda: spark).committed == {}
    for d in dones:
        load_done_file(fresh, store, d, lambda: spark)
    assert len(fresh.table("shop", "orders").metadata.snapshots) == 1
    assert _by_hour(fresh) == {_hour(i): [f"o{i}"] for i in range(3)}
    assert fresh.loaded_partitions("shop", "orders") == {_hour(i) for i in range(3)}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=4), st.booleans()),
                min_size=1, max_size=3))
def test_any_sequence_of_runs_leaves_each_hour_exactly_as_its_last_done_file(spark, tmp_path_factory, runs):
    """Runs of hours (staged together or loaded one by one), hours landed again between runs with
    other rows: after each run every hour the runs loaded holds exactly its done file's rows."""
    root = tmp_path_factory.mktemp("runs")
    store, wh = LocalStore(root / "landing"), IcebergWarehouse(str(root / "warehouse"))
    want: dict[str, list[str]] = {}
    for n, (hours, together) in enumerate(runs):
        dones = []
        for h in sorted(set(hours)):
            ids = orders(1 + (h + n) % 3, 100 * n + 10 * h)
            dones.append(write_hour(store, "shop", "orders", _hour(h), [(0, 1, V1, ids)]))
            want[_hour(h)] = sorted(r["order_id"] for r in ids)
        run = IcebergWarehouse(wh.root)
        staged = stage_done_files(run, store, dones, lambda: spark) if together else None
        for d in dones:
            load_done_file(run, store, d, lambda: spark, staged)
        assert _by_hour(run) == want


@pytest.mark.parametrize("catalog", ["sql", "rest"])
def test_a_range_materialised_from_dagster_loads_together_and_reports_each_hour(tmp_path, pyspark_resource, catalog,
                                                                                request):
    """Through the SQL and the REST catalog alike; each hour's materialisation names the snapshot
    that made it visible and when (commit visibility)."""
    from dagster import DagsterInstance, materialize

    from kafka_landing.config import TopicConfig
    from kafka_landing.resources import LandingResource
    from kafka_landing.warehouse.assets import build_warehouse_asset
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    cfg = TopicConfig("orders", "shop", table="orders", first_hour=datetime(2026, 1, 1, tzinfo=timezone.utc))
    store = LocalStore(tmp_path / "landing")
    for i in range(4):
        write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(i + 1, 10 * i))], topic="orders")
    uri = request.getfixturevalue("iceberg_rest_url") if catalog == "rest" else None
    resource = IcebergWarehouseResource(root=str(tmp_path / "warehouse"), catalog_uri=uri)
    drop_dataset(resource.backend(store), "shop")  # the session's REST catalog holds the tests' before
    asset = build_warehouse_asset(cfg, "orders", resource.backend_kind)
    with DagsterInstance.ephemeral() as instance:
        result = materialize([asset], instance=instance, tags={
            "dagster/asset_partition_range_start": "2026-01-01-00:00",
            "dagster/asset_partition_range_end": "2026-01-01-03:00"}, resources={
            "landing": LandingResource(landing_root=str(tmp_path / "landing")), "warehouse": resource,
            "pyspark": pyspark_resource})
        assert result.success
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
    mats = {m.partition: m for m in result.asset_materializations_for_node(asset.op.name)}
    assert {p: m.metadata["dagster/row_count"].value for p, m in mats.items()} == {
        f"2026-01-01-0{i}:00": i + 1 for i in range(4)}
    assert {m.metadata["files_loaded"].value for m in mats.values()} == {1}
    assert any("4 of 4 hours loaded together" in m for m in logs)
    wh = resource.backend(store)
    t = wh.table("shop", "orders")
    assert len(t.metadata.snapshots) == 1
    snap = t.current_snapshot()
    assert {m.metadata["snapshot_id"].value for m in mats.values()} == {str(snap.snapshot_id)}
    committed = {datetime.fromisoformat(m.metadata["committed_at"].value) for m in mats.values()}
    assert committed == {datetime.fromtimestamp(snap.timestamp_ms / 1000, timezone.utc)}
    assert _by_hour(wh) == {_hour(i): _ids(i + 1, 10 * i) for i in range(4)}
