"""The Iceberg warehouse beyond the backend contract: every registry-compatible change loads,
in metadata where Iceberg can and by one rewriting commit where it cannot; a widening on a long
table writes no file but the new hour's; each load is one snapshot carrying what it loaded;
concurrent and killed loads lose and double nothing. Real Spark writes, pyiceberg commits and
reads back; landing files come from `evolving_schemas`' schemas and edge values."""

from __future__ import annotations

import threading
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo

from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import HOUR_COLUMN, IcebergWarehouse
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.evolving_schemas import HOURS, check_rows, land_evolving

V1 = {"type": "record", "name": "Order", "namespace": "shop",
      "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"},
                 {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "coupon", "type": ["null", "string"], "default": None}]}
V_PRECISION = {**V1, "fields": V1["fields"][:2] + [
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 2}}]}


@pytest.fixture(params=["sql", "rest"])
def iceberg(request, tmp_path):
    """A landing root and a warehouse, its catalog SQLite under the root or the stack's REST catalog."""
    from kafka_landing_tests.helpers import drop_dataset

    catalog = request.getfixturevalue("iceberg_rest_url") if request.param == "rest" else None
    wh = IcebergWarehouse(str(tmp_path / "warehouse"), catalog)
    if catalog:
        for dataset in ("shop", "web", "evo"):  # the session's REST catalog holds the tests' before
            drop_dataset(wh, dataset)
    return LocalStore(tmp_path / "landing"), wh


def orders(n: int, start: int = 0, **extra) -> list[dict]:
    return [{"order_id": f"o{start + i}", "amount": start + i, "price": Decimal(f"{start + i}.25"), **extra}
            for i in range(n)]


def _hour(i: int) -> str:
    return f"2026-{1 + i // 672:02d}-{1 + (i // 24) % 28:02d}T{i % 24:02d}"


def _rows(wh: IcebergWarehouse, table: str, dataset: str = "shop", hour: str | None = None) -> list[dict]:
    t = wh.table(dataset, table)
    scan = t.scan(row_filter=EqualTo(HOUR_COLUMN, hour)) if hour else t.scan()
    return scan.to_arrow().to_pylist()


def test_every_registry_compatible_change_loads_and_reads_back_widened_in_any_order(iceberg, spark):
    store, wh = iceberg
    for order in (sorted(HOURS), sorted(HOURS, reverse=True)):
        table = "oldest" if order[0] < order[-1] else "newest"
        for h in order:
            assert wh.load_partition(store, land_evolving(store, table, h), lambda: spark).rows == len(HOURS[h])
        t = wh.table("evo", table)
        assert str(t.schema().find_field("amount").field_type) == "double"
        assert str(t.schema().find_field("price").field_type) == "decimal(12, 3)"
        check_rows(_rows(wh, table, "evo"))
        got = spark.read.parquet(*[f.file.file_path for f in t.scan().plan_files()])
        assert got.count() == 5


def test_a_new_field_or_a_wider_precision_on_a_long_table_writes_no_file_but_the_new_hours(iceberg, spark, tmp_path):
    """2,000 hours in the table, then an hour whose schema adds a field and one that widens a
    decimal's precision: each commit keeps every earlier data file as it was and adds one."""
    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(1)), lambda: spark)
    t = wh.table("shop", "orders")
    # 1,999 more hours as one commit of small files the table's own schema wrote (what loads leave)
    first = t.scan().plan_files().__iter__().__next__().file.file_path
    template = pq.read_table(first)
    paths = []
    for i in range(1, 2000):
        p = tmp_path / "history" / f"{i}.parquet"
        p.parent.mkdir(exist_ok=True)
        pq.write_table(template.set_column(template.schema.get_field_index(HOUR_COLUMN), HOUR_COLUMN,
                                           pa.array([_hour(i)], pa.string())), p)
        paths.append(str(p))
    with t.transaction() as tx:
        tx.add_files(paths)
    before = {f.file.file_path for f in wh.table("shop", "orders").scan().plan_files()}
    assert len(before) == 2000

    added = wh.load_partition(store, _land_orders(store, _hour(2000), V2, orders(2, 50, coupon="c")), lambda: spark)
    widened = wh.load_partition(store, _land_orders(store, _hour(2001), V_PRECISION, orders(1, 70)), lambda: spark)

    after = {f.file.file_path for f in wh.table("shop", "orders").scan().plan_files()}
    assert added.added_columns == ("coupon",) and after >= before and len(after - before) == 2
    assert str(wh.table("shop", "orders").schema().find_field("price").field_type) == "decimal(14, 2)"
    assert [r["coupon"] for r in _rows(wh, "orders", hour=_hour(2000))] == ["c", "c"]
    assert [r["price"] for r in _rows(wh, "orders", hour=_hour(1))] == [Decimal("0.25")]
    assert widened.rows == 1 and wh.partition_rows("shop", "orders", _hour(1999)) == 1


def test_a_change_iceberg_cannot_hold_in_metadata_rewrites_the_table_in_the_commit_that_widens_it(iceberg, spark):
    """long -> double and a decimal scale change (which pyiceberg 0.12 would wrongly take in
    metadata): one commit rewrites the other hours under the wider types; the snapshot before it
    still reads the old types, exactly."""
    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(2)), lambda: spark)
    wh.load_partition(store, _land_orders(store, _hour(1), V1, orders(1, 10)), lambda: spark)
    old_snapshot = wh.table("shop", "orders").current_snapshot().snapshot_id
    wider = {**V1, "fields": [V1["fields"][0], {"name": "amount", "type": "double"},
                              {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                                         "precision": 10, "scale": 3}}]}
    wh.load_partition(store, _land_orders(store, _hour(2), wider, [{"order_id": "w", "amount": 0.5,
                                                                     "price": Decimal("1.125")}]), lambda: spark)

    t = wh.table("shop", "orders")
    assert str(t.schema().find_field("amount").field_type) == "double"
    assert str(t.schema().find_field("price").field_type) == "decimal(10, 3)"
    got = {r["order_id"]: (r["amount"], r["price"]) for r in _rows(wh, "orders")}
    assert got == {"o0": (0.0, Decimal("0.250")), "o1": (1.0, Decimal("1.250")), "o10": (10.0, Decimal("10.250")),
                   "w": (0.5, Decimal("1.125"))}
    # Every file holds the table's types: a reader that trusts the metadata (Spark's, Trino's)
    # would read a decimal written at scale 2 as if it were at scale 3.
    files = [f.file.file_path for f in t.scan().plan_files()]
    assert len(files) == 3
    assert {(str(pq.read_schema(f).field("amount").type), str(pq.read_schema(f).field("price").type))
            for f in files} == {("double", "decimal128(10, 3)")}
    before = t.scan(snapshot_id=old_snapshot).to_arrow()
    assert sorted(before.column("price").to_pylist()) == [Decimal("0.25"), Decimal("1.25"), Decimal("10.25")]
    assert before.schema.field("amount").type == pa.int64()


def test_a_rewrite_keeps_the_values_of_a_column_that_older_files_lack(iceberg, spark):
    """A widening Iceberg cannot make in metadata rewrites every file: one written before a field
    was added and one after. Spark, left to take one file's schema for all, read the added column
    as null in every file (the coupon of o10 was lost); the rewrite reads under the table's schema."""
    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(1)), lambda: spark)
    wh.load_partition(store, _land_orders(store, _hour(1), V2, orders(1, 10, coupon="c")), lambda: spark)
    wider = {**V2, "fields": [V2["fields"][0], {"name": "amount", "type": "double"}, *V2["fields"][2:]]}
    wh.load_partition(store, _land_orders(store, _hour(2), wider, [
        {"order_id": "w", "amount": 0.5, "price": Decimal("1.25"), "coupon": "d"}]), lambda: spark)

    assert str(wh.table("shop", "orders").schema().find_field("amount").field_type) == "double"
    got = {r["order_id"]: (r["amount"], r["coupon"]) for r in _rows(wh, "orders")}
    assert got == {"o0": (0.0, None), "o10": (10.0, "c"), "w": (0.5, "d")}


def test_a_change_no_column_can_hold_is_refused_and_commits_nothing(iceberg, spark):
    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(2)), lambda: spark)
    snapshots = len(wh.table("shop", "orders").metadata.snapshots)
    bad = {**V1, "fields": [V1["fields"][0], {"name": "amount", "type": "string"}, V1["fields"][2]]}
    with pytest.raises(IncompatibleSchemaError, match="amount") as err:
        wh.load_partition(store, _land_orders(store, _hour(1), bad, [{"order_id": "x", "amount": "lots",
                                                                      "price": Decimal("1.00")}]), lambda: spark)
    assert not err.value.transient
    assert len(wh.table("shop", "orders").metadata.snapshots) == snapshots


def test_each_load_is_a_snapshot_that_says_what_it_loaded_and_a_lost_ledger_makes_no_new_one(iceberg, spark):
    store, wh = iceberg
    done = write_hour(store, "shop", "orders", _hour(0), [(0, 1, V1, orders(3))])
    from kafka_landing.handoff.manifests import read_done_file

    manifest, sha = read_done_file(store, done)
    wh.load_partition(store, manifest, lambda: spark, done_file=done, done_sha256=sha)
    t = wh.table("shop", "orders")
    summary = t.current_snapshot().summary.additional_properties
    assert (summary["kafka-landing.partition"], summary["kafka-landing.sha256"], summary["kafka-landing.rows"],
            summary["kafka-landing.done-file"]) == (_hour(0), sha, "3", done)

    wh.store.delete(wh.tables.records.path("shop", "orders", _hour(0)))  # killed after the commit, before the record
    again = wh.load_partition(store, manifest, lambda: spark, done_file=done, done_sha256=sha)

    assert again.rows == 3 and len(wh.table("shop", "orders").metadata.snapshots) == len(t.metadata.snapshots)
    assert wh.loaded_sha("shop", "orders", _hour(0)) == sha


def _load_at_once(store, manifests, warehouse, spark) -> list[BaseException]:
    """Each manifest loaded by a thread of its own, each through its own backend (`warehouse()`), all
    at once, as concurrent runs would; what they raised."""
    errors: list[BaseException] = []

    def load(manifest):
        try:
            warehouse().load_partition(store, manifest, lambda: spark)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(m,)) for m in manifests]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def test_concurrent_loads_of_two_hours_and_of_one_hour_lose_and_double_nothing(iceberg, spark):
    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(1)), lambda: spark)
    dones = [_land_orders(store, _hour(1), V1, orders(3, 10)), _land_orders(store, _hour(2), V2, orders(2, 20)),
             _land_orders(store, _hour(2), V2, orders(2, 20))]
    assert _load_at_once(store, dones, lambda: IcebergWarehouse(wh.root, wh.tables.config), spark) == []
    by_hour: dict[str, list[str]] = {}
    for r in _rows(wh, "orders"):
        by_hour.setdefault(r[HOUR_COLUMN], []).append(r["order_id"])
    assert {h: sorted(ids) for h, ids in by_hour.items()} == {
        _hour(0): ["o0"], _hour(1): ["o10", "o11", "o12"], _hour(2): ["o20", "o21"]}


def test_a_load_killed_before_its_commit_leaves_the_table_as_it_was(iceberg, spark, monkeypatch):
    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(2)), lambda: spark)
    done = _land_orders(store, _hour(0), V1, orders(3, 30))

    from kafka_landing.warehouse.iceberg import warehouse as module  # the load's own crash points

    def killed(step):
        if step == "warehouse:staged":
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(module, "crash_point", killed)
    with pytest.raises(KeyboardInterrupt):
        wh.load_partition(store, done, lambda: spark)
    assert sorted(r["order_id"] for r in _rows(wh, "orders")) == ["o0", "o1"]

    monkeypatch.undo()
    wh.load_partition(store, done, lambda: spark)
    assert sorted(r["order_id"] for r in _rows(wh, "orders")) == ["o30", "o31", "o32"]


def _land_orders(store, hour: str, schema: dict, records: list[dict]):
    from kafka_landing.handoff.manifests import read_done_file

    manifest, _ = read_done_file(store, write_hour(store, "shop", "orders", hour, [(0, 1, schema, records)]))
    return manifest


def test_an_hour_materialised_from_dagster_lands_in_its_iceberg_table(tmp_path, pyspark_resource):
    from datetime import datetime, timezone

    from dagster import DagsterInstance, materialize

    from kafka_landing.config import TopicConfig
    from kafka_landing.resources import LandingResource
    from kafka_landing.warehouse.assets import build_warehouse_asset, warehouse_key
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    cfg = TopicConfig("orders", "shop", table="orders", first_hour=datetime(2026, 1, 1, tzinfo=timezone.utc))
    store = LocalStore(tmp_path / "landing")
    write_hour(store, "shop", "orders", _hour(5), [(0, 1, V1, orders(4))], topic="orders")
    resource = IcebergWarehouseResource(root=str(tmp_path / "warehouse"))
    asset = build_warehouse_asset(cfg, "orders", resource.backend_kind)
    with DagsterInstance.ephemeral() as instance:
        result = materialize([asset], partition_key="2026-01-01-05:00", instance=instance, resources={
            "landing": LandingResource(landing_root=str(tmp_path / "landing")), "warehouse": resource,
            "pyspark": pyspark_resource})
    assert result.success
    [mat] = result.asset_materializations_for_node(asset.op.name)
    assert mat.metadata["dagster/row_count"].value == 4
    assert set(asset.specs_by_key[warehouse_key("shop", "orders")].kinds) == {"iceberg", "spark"}
    wh = resource.backend(store)
    assert sorted(r["order_id"] for r in _rows(wh, "orders", hour=_hour(5))) == ["o0", "o1", "o2", "o3"]


# --- event-time tables --------------------------------------------------------------------------

DAY = "2026-01-31"


def _event_rows(wh: IcebergWarehouse, partition: str, snapshot_id: int | None = None) -> dict[str, list[str]]:
    """{landing hour: order ids} of one event partition, read from the table."""
    t = wh.table("shop", "orders__by_event")
    rows = t.scan(row_filter=EqualTo("event_day", partition), snapshot_id=snapshot_id).to_arrow().to_pylist()
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r[HOUR_COLUMN], []).append(r["order_id"])
    return {h: sorted(ids) for h, ids in sorted(out.items())}


def test_an_event_day_amended_by_a_late_hour_commits_only_that_hours_files(iceberg, spark):
    from kafka_landing.naming import unknown_partition
    from kafka_landing.warehouse.by_event.load import load_event_partition
    from kafka_landing.warehouse.by_event.measures import event_conservation
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import land_event_orders

    store, wh = iceberg
    land_event_orders(store, f"{DAY}T10", {f"{DAY}T10": ["a", "b"], None: ["n"]})
    land_event_orders(store, f"{DAY}T11", {f"{DAY}T10": ["c"], f"{DAY}T11": ["e"]}, first=2000)
    first = load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)
    unknown = load_event_partition(wh, store, CFG, "orders", unknown_partition(f"{DAY}T10"), lambda: spark)
    etable = wh.by_event("day", "created_at")
    assert _event_rows(etable, DAY) == {f"{DAY}T10": ["a", "b"], f"{DAY}T11": ["c", "e"]}
    assert _event_rows(etable, unknown_partition(f"{DAY}T10")) == {f"{DAY}T10": ["n"]}
    assert first.result.rows == 4 and unknown.result.rows == 1
    before = {f.file_path for f in etable.partition_files("shop", "orders__by_event", DAY)}
    version_1 = etable.table("shop", "orders__by_event").current_snapshot().snapshot_id

    land_event_orders(store, f"{DAY}T20", {f"{DAY}T10": ["late"]}, first=3000)  # a late record
    amended = load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)

    assert amended.new_version and amended.manifest.amended and amended.manifest.version == 2
    assert _event_rows(etable, DAY) == {f"{DAY}T10": ["a", "b"], f"{DAY}T11": ["c", "e"], f"{DAY}T20": ["late"]}
    after = {f.file_path for f in etable.partition_files("shop", "orders__by_event", DAY)}
    assert after >= before and len(after - before) == 1  # the late hour's file; the day's others untouched
    summary = etable.table("shop", "orders__by_event").current_snapshot().summary.additional_properties
    assert (summary["kafka-landing.landing-hours"], summary["kafka-landing.attempt"]) == (f"{DAY}T20", "v2")
    assert _event_rows(etable, DAY, version_1) == {f"{DAY}T10": ["a", "b"], f"{DAY}T11": ["c", "e"]}
    checked = event_conservation(store, wh, CFG, "orders", DAY)
    assert checked.ok, checked.why
    assert checked.metadata["warehouse_rows"] == 5

    # A landing hour re-landed with other records: its part of the day replaced, the rest untouched.
    land_event_orders(store, f"{DAY}T11", {f"{DAY}T11": ["e"]}, first=2000)
    load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)
    assert _event_rows(etable, DAY) == {f"{DAY}T10": ["a", "b"], f"{DAY}T11": ["e"], f"{DAY}T20": ["late"]}
    now = {f.file_path for f in etable.partition_files("shop", "orders__by_event", DAY)}
    assert len(now - after) == 1 and len(after - now) == 1
    assert event_conservation(store, wh, CFG, "orders", DAY).ok


def test_a_load_record_that_lags_the_table_is_not_trusted_the_tables_snapshot_is(iceberg, spark):
    """A load killed after its commit, before its record: the record names the version before. The
    next version equals that one, so by the record nothing changed, but the table holds the killed
    load's landing hour: the table's own snapshot says so, and that hour is removed."""
    from kafka_landing.warehouse.by_event.load import load_event_partition
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import land_event_orders

    store, wh = iceberg
    land_event_orders(store, f"{DAY}T10", {f"{DAY}T10": ["a", "b"]})
    load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)
    etable = wh.by_event("day", "created_at")
    record = etable.tables.records.path("shop", "orders__by_event", DAY)
    as_of_v1 = etable.store.read_bytes(record)
    land_event_orders(store, f"{DAY}T12", {f"{DAY}T10": ["c"]}, first=2000)
    load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)
    etable.store.write_atomic(record, as_of_v1)  # as if killed between the commit and the record
    land_event_orders(store, f"{DAY}T12", {})  # the late hour re-landed without its record

    load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)

    assert _event_rows(etable, DAY) == {f"{DAY}T10": ["a", "b"]}
    assert etable.partition_rows("shop", "orders__by_event", DAY) == 2


def test_an_event_partition_known_neither_by_snapshot_nor_by_record_is_replaced_whole_never_doubled(iceberg, spark):
    from kafka_landing.warehouse.by_event.load import load_event_partition
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import land_event_orders

    store, wh = iceberg
    land_event_orders(store, f"{DAY}T10", {f"{DAY}T10": ["a", "b"]})
    load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)
    land_event_orders(store, f"{DAY}T11", {"2026-02-01T10": ["x"]})
    load_event_partition(wh, store, CFG, "orders", "2026-02-01", lambda: spark)
    etable = wh.by_event("day", "created_at")
    t = etable.table("shop", "orders__by_event")
    ours = [s.snapshot_id for s in t.metadata.snapshots
            if s.summary.additional_properties.get("kafka-landing.partition") == DAY]
    assert ours
    t.maintenance.expire_snapshots().by_ids(ours).commit()  # expired, as upkeep does after a while
    etable.store.write_atomic(etable.tables.records.path("shop", "orders__by_event", DAY), b"not json")
    land_event_orders(store, f"{DAY}T12", {f"{DAY}T10": ["c"]}, first=2000)

    load_event_partition(wh, store, CFG, "orders", DAY, lambda: spark)

    assert _event_rows(etable, DAY) == {f"{DAY}T10": ["a", "b"], f"{DAY}T12": ["c"]}
    assert _event_rows(etable, "2026-02-01") == {f"{DAY}T11": ["x"]}
    assert etable.partition_rows("shop", "orders__by_event", DAY) == 3


def test_the_unknown_partition_of_before_is_dropped_when_it_is_handed_over(iceberg, spark):
    """Releases before cut every record with no event time into one __unknown__ partition; the
    hand-over moves its landing hours to the unknown partitions of their landing days and loads it
    empty: the table holds none of its rows any more, each record is in one partition."""
    from kafka_landing.handoff import markers
    from kafka_landing.handoff.units import EVENT
    from kafka_landing.naming import UNKNOWN_EVENT, event_handover_path
    from kafka_landing.warehouse.by_event.load import hand_over
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import events_cut_as_before, land_event_orders, load_event_partition_as_before

    store, wh = iceberg
    with events_cut_as_before():
        land_event_orders(store, f"{DAY}T13", {None: ["n1"], f"{DAY}T13": ["a"]})
        land_event_orders(store, "2026-02-01T09", {None: ["n2"]}, first=2000)
        legacy = load_event_partition_as_before(wh.by_event("day", CFG.event_time_field), store, UNKNOWN_EVENT,
                                                spark=lambda: spark)
    etable = wh.by_event("day", CFG.event_time_field)
    assert legacy.rows == 2 and _event_rows(etable, UNKNOWN_EVENT) == {f"{DAY}T13": ["n1"], "2026-02-01T09": ["n2"]}

    assert hand_over(wh, store, CFG, "orders", lambda: spark) == ()

    assert _event_rows(etable, UNKNOWN_EVENT) == {}
    assert etable.partition_rows("shop", "orders__by_event", UNKNOWN_EVENT) is None
    assert etable.loaded("shop", "orders__by_event", UNKNOWN_EVENT)["rows"] == 0
    assert store.read_json(event_handover_path("shop", "orders"))["handed_over"][UNKNOWN_EVENT]["to"] == [
        f"__unknown__{DAY}", "__unknown__2026-02-01"]
    assert {f"__unknown__{DAY}", "__unknown__2026-02-01"} <= {
        u.partition for u in markers.list_units(store, EVENT, [("shop", "orders")])}


def test_an_event_day_materialised_from_dagster_lands_in_its_iceberg_table_and_its_checks_say_so(tmp_path,
                                                                                            pyspark_resource):
    from dagster import AssetCheckSeverity, DagsterInstance, materialize

    from kafka_landing.resources import LandingResource
    from kafka_landing.warehouse.assets import build_event_asset
    from kafka_landing.warehouse.checks import build_event_checks
    from kafka_landing.warehouse.resources import IcebergWarehouseResource
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import land_event_orders

    store = LocalStore(tmp_path / "landing")
    land_event_orders(store, f"{DAY}T10", {f"{DAY}T10": ["a", "b"], f"{DAY}T09": ["c"]})
    resource = IcebergWarehouseResource(root=str(tmp_path / "warehouse"))
    asset = build_event_asset(CFG, "orders", resource.backend_kind)
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("shop__orders__by_event", [DAY])
        result = materialize([asset, *build_event_checks(CFG, "orders")], partition_key=DAY, instance=instance,
                             resources={"landing": LandingResource(landing_root=str(tmp_path / "landing")),
                                        "warehouse": resource, "pyspark": pyspark_resource})
    assert result.success
    [mat] = result.asset_materializations_for_node(asset.op.name)
    assert mat.metadata["dagster/row_count"].value == 3
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    # Conservation holds; the day, just versioned, is not final yet: a warning saying until when.
    assert set(checks) == {"conservation_by_event", "settled"} and checks["conservation_by_event"].passed
    assert not checks["settled"].passed and checks["settled"].severity == AssetCheckSeverity.WARN
    assert _event_rows(resource.backend(store).by_event("day", "created_at"), DAY) == {f"{DAY}T10": ["a", "b", "c"]}


def test_upkeep_expires_old_snapshots_and_removes_only_the_files_no_kept_snapshot_lists(iceberg, spark):
    import os
    from datetime import datetime, timedelta, timezone

    from kafka_landing.warehouse.iceberg import upkeep

    store, wh = iceberg
    for n in range(3):  # the same hour loaded three times: two replaced versions of its file
        wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(2, 10 * n)), lambda: spark)
    wh.load_partition(store, _land_orders(store, _hour(1), V1, orders(1, 99)), lambda: spark)
    t = wh.table("shop", "orders")
    current = {f.file.file_path for f in t.scan().plan_files()}
    data = {str(p) for p in wh.table_dir("shop", "orders").glob("data/**/*.parquet")}
    assert len(data) == 4 and len(current) == 2
    later = datetime.now(timezone.utc) + timedelta(days=2)
    staged = wh.table_dir("shop", "orders") / "data" / "hour=x" / "in-flight" / "_kl_hour=x" / "part-0.parquet"
    staged.parent.mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), staged)
    os.utime(staged, (later.timestamp() - 3600,) * 2)  # written an hour before the upkeep: a load under way

    kept_a_week = upkeep(wh, timedelta(days=7), now=later)
    assert [(u.snapshots_expired, u.files_removed) for u in kept_a_week] == [(0, 0)]

    [done] = upkeep(wh, timedelta(hours=1), now=later)

    t = wh.table("shop", "orders")
    assert done.snapshots_expired > 0 and done.snapshots_kept == 1 and len(t.metadata.snapshots) == 1
    left = {str(p) for p in wh.table_dir("shop", "orders").glob("data/**/*.parquet")}
    assert left == {f.removeprefix("file://") for f in current} | {str(staged)}
    assert done.files_removed >= 2 and done.bytes_removed > 0
    assert sorted(r["order_id"] for r in _rows(wh, "orders")) == ["o20", "o21", "o99"]


def test_the_upkeep_job_reports_each_table_on_its_asset_and_refuses_another_warehouse(tmp_path, pyspark_resource,
                                                                                       monkeypatch):
    from dagster import DagsterInstance

    from kafka_landing.resources import LandingResource
    from kafka_landing.warehouse.assets import warehouse_key
    from kafka_landing.warehouse.jobs import iceberg_upkeep
    from kafka_landing.warehouse.resources import BigQueryWarehouseResource, IcebergWarehouseResource

    store = LocalStore(tmp_path / "landing")
    resource = IcebergWarehouseResource(root=str(tmp_path / "warehouse"))
    wh = resource.backend(store)
    for n in range(2):
        wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(1, n)), lambda: pyspark_resource.spark_session)
    landing = LandingResource(landing_root=str(tmp_path / "landing"))
    with DagsterInstance.ephemeral() as instance:
        result = iceberg_upkeep.execute_in_process(instance=instance, resources={
            "landing": landing, "warehouse": resource, "pyspark": pyspark_resource},
            run_config={"ops": {"iceberg_upkeep_op": {"config": {"keep_hours": 1}}}})
        assert result.success
        [obs] = [e.event_specific_data.asset_observation for e in result.all_events
                 if e.event_type_value == "ASSET_OBSERVATION"]
        assert obs.asset_key == warehouse_key("shop", "orders")
        assert obs.metadata["snapshots_kept"].value == len(wh.table("shop", "orders").metadata.snapshots)
        monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", "http://127.0.0.1:1")  # a client, never called
        refused = iceberg_upkeep.execute_in_process(instance=instance, raise_on_error=False, resources={
            "landing": landing, "warehouse": BigQueryWarehouseResource(project="kl-upkeep", location="US"),
            "pyspark": pyspark_resource})
        assert not refused.success
        [failed] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
        assert "the warehouse is bigquery, not Iceberg" in failed.event_specific_data.error.message


def test_the_code_location_of_an_iceberg_warehouse_has_the_upkeep_job_and_its_schedule(monkeypatch, tmp_path):
    from kafka_landing.definitions import build_definitions, build_resources
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT
    from kafka_landing.config import LandingConfig

    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(tmp_path / "wh"))
    monkeypatch.setenv("KAFKA_LANDING_ROOT", str(tmp_path / "landing"))
    config = LandingConfig({ORDERS_BY_EVENT.topic: ORDERS_BY_EVENT})
    monkeypatch.setenv("KAFKA_LANDING_BIGQUERY_PROJECT", "kl-upkeep")
    for kind, has in (("iceberg", True), ("bigquery", False)):
        monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", kind)
        names = {s.name for s in build_definitions(config, build_resources()).schedules}
        assert ("iceberg_upkeep_daily" in names) is has and any(n.startswith("land_topics_from_") for n in names), names


def test_a_catalog_on_postgresql_takes_concurrent_loads_as_sqlite_does(tmp_path, spark, stack):
    """Production's catalog: a PostgreSQL database (KAFKA_LANDING_ICEBERG_CATALOG_URI). Loads of three
    hours of one table at once from three backends commit each, none lost, none doubled, and the
    catalog's rows are in PostgreSQL."""
    import uuid

    import psycopg2

    from kafka_landing_tools import devstack

    pg = devstack.start_postgres()
    db = f"iceberg_{uuid.uuid4().hex[:8]}"
    devstack.create_database(db)
    uri = (f"postgresql+psycopg2://{pg['DAGSTER_PG_USERNAME']}:{pg['DAGSTER_PG_PASSWORD']}@{pg['DAGSTER_PG_HOST']}:"
           f"{pg['DAGSTER_PG_PORT']}/{db}")
    store = LocalStore(tmp_path / "landing")
    IcebergWarehouse(str(tmp_path / "warehouse"), uri).load_partition(
        store, _land_orders(store, _hour(0), V1, orders(1)), lambda: spark)
    dones = [_land_orders(store, _hour(h), V1, orders(2, 10 * h)) for h in (1, 2, 3)]
    assert _load_at_once(store, dones, lambda: IcebergWarehouse(str(tmp_path / "warehouse"), uri), spark) == []
    wh = IcebergWarehouse(str(tmp_path / "warehouse"), uri)
    assert sorted(r["order_id"] for r in _rows(wh, "orders")) == ["o0", "o10", "o11", "o20", "o21", "o30", "o31"]
    conn = psycopg2.connect(host=pg["DAGSTER_PG_HOST"], port=int(pg["DAGSTER_PG_PORT"]), dbname=db,
                            user=pg["DAGSTER_PG_USERNAME"], password=pg["DAGSTER_PG_PASSWORD"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_namespace, table_name FROM iceberg_tables")
            assert cur.fetchall() == [("shop", "orders")]
    finally:
        conn.close()
    assert not (tmp_path / "warehouse" / "_catalog.db").exists()


def test_hourly_commits_merge_into_a_few_manifests_and_upkeep_gives_an_older_table_the_setting(iceberg, spark,
                                                                                             tmp_path):
    """150 hourly commits: a full scan plans a few manifests, not one per commit (pyiceberg appends
    a manifest per commit unless told to merge); a table made before that setting gets it from upkeep."""
    from datetime import timedelta

    from kafka_landing.warehouse.iceberg import upkeep

    store, wh = iceberg
    wh.load_partition(store, _land_orders(store, _hour(0), V1, orders(1)), lambda: spark)
    t = wh.table("shop", "orders")
    template = pq.read_table(next(iter(t.scan().plan_files())).file.file_path)
    at = template.schema.get_field_index(HOUR_COLUMN)
    for i in range(1, 151):  # what 150 hourly loads append
        p = tmp_path / "hours" / f"{i}.parquet"
        p.parent.mkdir(exist_ok=True)
        pq.write_table(template.set_column(at, HOUR_COLUMN, pa.array([_hour(i)], pa.string())), p)
        wh.table("shop", "orders").add_files([str(p)], check_duplicate_files=False)
    t = wh.table("shop", "orders")
    assert len(list(t.scan().plan_files())) == 151
    assert len(t.current_snapshot().manifests(t.io)) <= 101

    with t.transaction() as tx:  # as a table of an earlier release has it
        tx.remove_properties("commit.manifest-merge.enabled")
    assert "commit.manifest-merge.enabled" not in wh.table("shop", "orders").properties
    upkeep(wh, timedelta(days=7))
    assert wh.table("shop", "orders").properties["commit.manifest-merge.enabled"] == "true"


def test_a_reader_filtering_on_the_event_time_itself_reads_only_that_days_files(iceberg, spark):
    """The event tables are partitioned by the event_day string, not by a hidden day(created_at):
    a reader who filters on created_at still skips the other days' files, by each file's bounds
    (every file holds one event day of one landing hour)."""
    from pyiceberg.expressions import GreaterThanOrEqual, LessThan

    from kafka_landing.warehouse.by_event.load import load_event_partition
    from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG
    from kafka_landing_tests.landed_hours import land_event_orders

    store, wh = iceberg
    land_event_orders(store, f"{DAY}T10", {f"{DAY}T10": ["a", "b"], "2026-02-01T03": ["c"]})
    land_event_orders(store, f"{DAY}T11", {"2026-02-01T05": ["d"]}, first=2000)
    for day in (DAY, "2026-02-01"):
        load_event_partition(wh, store, CFG, "orders", day, lambda: spark)
    t = wh.by_event("day", "created_at").table("shop", "orders__by_event")
    assert len(list(t.scan().plan_files())) == 3

    feb = GreaterThanOrEqual("created_at", "2026-02-01T00:00:00+00:00")
    planned = list(t.scan(row_filter=feb).plan_files())
    assert {task.file.partition[0] for task in planned} == {"2026-02-01"} and len(planned) == 2
    jan = t.scan(row_filter=LessThan("created_at", "2026-02-01T00:00:00+00:00"))
    assert [task.file.partition[0] for task in jan.plan_files()] == [DAY]
    assert sorted(r["order_id"] for r in t.scan(row_filter=feb).to_arrow().to_pylist()) == ["c", "d"]
