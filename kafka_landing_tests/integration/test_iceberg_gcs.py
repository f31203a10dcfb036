"""The Iceberg warehouse with its root in a bucket (gs://, on the GCS emulator), as in production
with the catalog elsewhere: a local SQLite file (PostgreSQL in production), and the stack's REST
catalog, whose server writes the tables' metadata to the bucket itself (BigLake's way). Spark
writes the Parquet files through the GCS connector, pyiceberg the metadata through its FileIO, the
store the load records; a fresh warehouse object reads everything back from the bucket alone.
The landing root is in the same bucket, so nothing of a load touches the local disk but the SQLite
catalog."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from kafka_landing.handoff.manifests import read_done_file
from kafka_landing.store import open_store
from kafka_landing.warehouse.backend import LoadError
from kafka_landing.warehouse.iceberg import HOUR_COLUMN, IcebergWarehouse, upkeep
from kafka_landing.warehouse.load import load_done_file, stage_done_files
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.integration.test_iceberg_warehouse import V1, _hour, orders


@pytest.fixture(params=["sql", "rest"])
def on_gcs(request, gcs_emulator, gcs_bucket, tmp_path):
    """(landing store, warehouse, bucket, catalog URI): both roots in a fresh bucket, the catalog a
    local SQLite file or the stack's REST catalog (which writes the tables' metadata to the bucket
    itself, as BigLake does)."""
    if request.param == "rest":
        from kafka_landing_tests.helpers import drop_dataset

        uri = request.getfixturevalue("iceberg_rest_url")
        drop_dataset(IcebergWarehouse(f"gs://{gcs_bucket}/warehouse", uri), "shop")
    else:
        uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    store = open_store(f"gs://{gcs_bucket}/landing")
    return store, IcebergWarehouse(f"gs://{gcs_bucket}/warehouse", uri), gcs_bucket, uri


def _by_hour(wh: IcebergWarehouse, table: str = "orders") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in wh.table("shop", table).scan().to_arrow().to_pylist():
        out.setdefault(r[HOUR_COLUMN], []).append(r["order_id"])
    return {h: sorted(ids) for h, ids in sorted(out.items())}


def _objects(gcs_client, bucket: str, prefix: str) -> dict[str, int]:
    """Object name -> size under `prefix`, as the bucket lists them (folder placeholders left out)."""
    return {b.name: b.size for b in gcs_client.list_blobs(bucket, prefix=prefix) if not b.name.endswith("/")}


def _data_files(wh: IcebergWarehouse, table: str = "orders") -> set[str]:
    return {task.file.file_path for task in wh.table("shop", table).scan().plan_files()}


def test_an_hour_and_a_run_of_hours_load_into_a_bucket_and_read_back_from_it_alone(on_gcs, gcs_client, spark,
                                                                                  tmp_path):
    store, wh, bucket, uri = on_gcs
    dones = [write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2 + i, 10 * i))]) for i in range(4)]
    first = load_done_file(wh, store, dones[0], lambda: spark)
    staged = stage_done_files(wh, store, dones[1:], lambda: spark)
    assert len(staged.committed) == 3  # one Spark job, one commit
    results = [load_done_file(wh, store, d, lambda: spark, staged) for d in dones[1:]]

    assert [first.rows] + [r.rows for r in results] == [2, 3, 4, 5]
    fresh = IcebergWarehouse(f"gs://{bucket}/warehouse", uri)  # another process: the bucket and the catalog
    want = {_hour(i): sorted(f"o{10 * i + k}" for k in range(2 + i)) for i in range(4)}
    assert _by_hour(fresh) == want
    t = fresh.table("shop", "orders")
    assert len(t.metadata.snapshots) == 2  # the first hour's, and the run's
    table_uri = f"gs://{bucket}/warehouse/shop/orders"
    assert t.metadata.location == table_uri and t.metadata_location.startswith(f"{table_uri}/metadata/")
    files = _data_files(fresh)
    assert len(files) == 4 and all(f.startswith(f"{table_uri}/data/") for f in files), files
    objects = _objects(gcs_client, bucket, "warehouse/shop/orders/data/")
    assert {f"gs://{bucket}/{n}" for n in objects if n.endswith(".parquet")} == files
    # The load records are objects in the bucket, and say what was loaded.
    assert fresh.loaded_partitions("shop", "orders") == {_hour(i) for i in range(4)}
    for d in dones:
        manifest, sha = read_done_file(store, d)
        assert fresh.loaded_sha("shop", "orders", manifest.partition) == sha
    ledger = _objects(gcs_client, bucket, "warehouse/shop/orders/_loads/")
    assert sorted(ledger) == sorted(f"warehouse/shop/orders/_loads/hour={_hour(i)}.json" for i in range(4))
    assert fresh.partition_rows("shop", "orders", _hour(3)) == 5
    assert fresh.spark_table(spark, "shop", "orders").count() == 14
    # Nothing on the local disk but the catalog.
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if uri.startswith("http") else ["catalog.db"])

    # The same hours again: nothing staged, no new snapshot.
    assert stage_done_files(fresh, store, dones, lambda: spark).committed == {}
    for d in dones:
        load_done_file(fresh, store, d, lambda: spark)
    assert len(fresh.table("shop", "orders").metadata.snapshots) == 2


def test_a_widening_iceberg_cannot_hold_in_metadata_rewrites_the_tables_files_in_the_bucket(on_gcs, gcs_client,
                                                                                          spark):
    """long -> double and a decimal's scale: the other hours' files are read from the bucket and
    written again under the wider types in the commit that widens the schema; the snapshot before
    still reads the old types."""
    store, wh, bucket, _ = on_gcs
    for i in range(2):
        load_done_file(wh, store, write_hour(store, "shop", "orders", _hour(i), [(0, 1, V1, orders(2, 10 * i))]),
                       lambda: spark)
    before = wh.table("shop", "orders").current_snapshot().snapshot_id
    wider = {**V1, "fields": [V1["fields"][0], {"name": "amount", "type": "double"},
                              {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                                         "precision": 10, "scale": 3}}]}
    load_done_file(wh, store, write_hour(store, "shop", "orders", _hour(2), [(0, 2, wider, [
        {"order_id": "w", "amount": 0.5, "price": Decimal("1.125")}])]), lambda: spark)

    t = wh.table("shop", "orders")
    assert (str(t.schema().find_field("amount").field_type), str(t.schema().find_field("price").field_type)) == (
        "double", "decimal(10, 3)")
    got = {r["order_id"]: (r["amount"], r["price"]) for r in t.scan().to_arrow().to_pylist()}
    assert got == {"o0": (0.0, Decimal("0.250")), "o1": (1.0, Decimal("1.250")), "o10": (10.0, Decimal("10.250")),
                   "o11": (11.0, Decimal("11.250")), "w": (0.5, Decimal("1.125"))}
    files = _data_files(wh)
    assert len(files) == 3 and sum("/_rewrite-" in f for f in files) == 2, files
    for f in files:  # every file holds the table's types, read from the bucket
        schema = pq.read_schema(t.io.new_input(f).open())
        assert (str(schema.field("amount").type), str(schema.field("price").type)) == ("double", "decimal128(10, 3)")
    old = t.scan(snapshot_id=before).to_arrow()
    assert sorted(old.column("amount").to_pylist()) == [0, 1, 10, 11] and str(old.schema.field("amount").type) == "int64"


def test_an_event_day_and_its_amendment_by_a_late_hour_load_into_the_bucket(on_gcs, spark):
    from kafka_landing.warehouse.by_event.load import load_event_partition
    from kafka_landing.warehouse.by_event.measures import event_conservation
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import land_event_orders

    store, wh, bucket, _ = on_gcs
    day = "2026-01-31"
    land_event_orders(store, f"{day}T10", {f"{day}T10": ["a", "b"]})
    load_event_partition(wh, store, CFG, "orders", day, lambda: spark)
    etable = wh.by_event("day", "created_at")
    before = {f.file_path for f in etable.partition_files("shop", "orders__by_event", day)}
    land_event_orders(store, f"{day}T20", {f"{day}T10": ["late"]}, first=3000)

    amended = load_event_partition(wh, store, CFG, "orders", day, lambda: spark)

    assert amended.new_version and amended.manifest.amended
    rows = etable.table("shop", "orders__by_event").scan().to_arrow().to_pylist()
    assert sorted((r["event_day"], r[HOUR_COLUMN], r["order_id"]) for r in rows) == [
        (day, f"{day}T10", "a"), (day, f"{day}T10", "b"), (day, f"{day}T20", "late")]
    after = {f.file_path for f in etable.partition_files("shop", "orders__by_event", day)}
    assert after > before and len(after - before) == 1  # the late hour's file only
    assert len(after) == 2 and all(f.startswith(f"gs://{bucket}/warehouse/shop/orders__by_event/data/") for f in after), after
    assert etable.loaded_partitions("shop", "orders__by_event") == {day}
    checked = event_conservation(store, wh, CFG, "orders", day)
    assert checked.ok, checked.why


def test_upkeep_removes_from_the_bucket_only_old_files_no_kept_snapshot_lists(on_gcs, gcs_client, spark):
    store, wh, bucket, _ = on_gcs
    for n in range(3):  # the same hour loaded three times: two replaced versions of its file
        load_done_file(wh, store, write_hour(store, "shop", "orders", _hour(0), [(0, 1, V1, orders(2, 10 * n))]),
                       lambda: spark)
    load_done_file(wh, store, write_hour(store, "shop", "orders", _hour(1), [(0, 1, V1, orders(1, 99))]),
                   lambda: spark)
    current = _data_files(wh)
    prefix = "warehouse/shop/orders/"
    objects = _objects(gcs_client, bucket, prefix)
    data = {f"gs://{bucket}/{n}" for n in objects if n.endswith(".parquet")}
    assert len(current) == 2 and len(data) == 4
    snapshots = len(wh.table("shop", "orders").metadata.snapshots)
    assert snapshots == 6  # the first load's, a delete and an append for each reload, the second hour's

    # Every snapshot but the current one expires at once; their files are younger than a day and stay.
    [young] = upkeep(wh, timedelta(0))
    assert (young.snapshots_expired, young.snapshots_kept, young.files_removed) == (snapshots - 1, 1, 0)
    assert {f"gs://{bucket}/{n}" for n in _objects(gcs_client, bucket, prefix + "data/") if n.endswith(".parquet")} \
        == data

    [done] = upkeep(wh, timedelta(hours=1), now=datetime.now(timezone.utc) + timedelta(days=2))

    left = _objects(gcs_client, bucket, prefix)
    assert {f"gs://{bucket}/{n}" for n in left if n.endswith(".parquet")} == current
    gone = {n: size for n, size in objects.items() if n not in left and (n.endswith(".parquet")
                                                                         or n.endswith(".avro"))}
    assert done.files_removed == len(gone) >= 2 and done.bytes_removed == sum(gone.values())
    assert set(objects) - set(left) == set(gone)  # nothing else: the load records and metadata files stay
    assert _by_hour(wh) == {_hour(0): ["o20", "o21"], _hour(1): ["o99"]}
    assert upkeep(wh, timedelta(hours=1), now=datetime.now(timezone.utc) + timedelta(days=2))[0].files_removed == 0


def test_a_bucket_root_without_a_catalog_database_is_refused_before_anything_is_written(gcs_emulator, gcs_bucket,
                                                                                    gcs_client, tmp_path):
    root = f"gs://{gcs_bucket}/warehouse"
    wh = IcebergWarehouse(root)
    with pytest.raises(LoadError, match="KAFKA_LANDING_ICEBERG_CATALOG_URI") as err:
        wh.check_writable()
    assert not err.value.transient and root in str(err.value) and "PostgreSQL" in str(err.value)
    with pytest.raises(LoadError, match="KAFKA_LANDING_ICEBERG_CATALOG_URI"):
        wh.table("shop", "orders")
    assert _objects(gcs_client, gcs_bucket, "") == {}

    IcebergWarehouse(root, f"sqlite:///{tmp_path / 'catalog.db'}").check_writable()  # with one: writable
    missing = IcebergWarehouse(f"gs://{gcs_bucket}-absent/warehouse", f"sqlite:///{tmp_path / 'catalog.db'}")
    with pytest.raises(LoadError, match=f"{gcs_bucket}-absent.*does not exist") as err:
        missing.check_writable()
    assert not err.value.transient


def test_an_hour_materialised_from_dagster_lands_in_an_iceberg_table_in_the_bucket(on_gcs, pyspark_resource):
    """The resource path a deployment takes: the landing root and the warehouse root both gs://."""
    from dagster import DagsterInstance, materialize

    from kafka_landing.config import TopicConfig
    from kafka_landing.resources import LandingResource
    from kafka_landing.warehouse.assets import build_warehouse_asset
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    store, wh, bucket, uri = on_gcs
    cfg = TopicConfig("orders", "shop", table="orders", first_hour=datetime(2026, 1, 1, tzinfo=timezone.utc))
    write_hour(store, "shop", "orders", _hour(5), [(0, 1, V1, orders(4))], topic="orders")
    resource = IcebergWarehouseResource(root=wh.root, catalog_uri=uri)
    asset = build_warehouse_asset(cfg, "orders", resource.backend_kind)
    with DagsterInstance.ephemeral() as instance:
        result = materialize([asset], partition_key="2026-01-01-05:00", instance=instance, resources={
            "landing": LandingResource(landing_root=store.root), "warehouse": resource, "pyspark": pyspark_resource})
    assert result.success
    [mat] = result.asset_materializations_for_node(asset.op.name)
    assert mat.metadata["dagster/row_count"].value == 4
    assert _by_hour(IcebergWarehouse(wh.root, uri)) == {_hour(5): ["o0", "o1", "o2", "o3"]}
