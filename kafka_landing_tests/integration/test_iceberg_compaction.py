"""Days compacted once they are over, event days and landing days: one data file each, the same
rows, through upkeep with real Spark and pyiceberg, in the SQL and the REST catalog; an amendment
(or an hour landed again) after it is exact and compacted again; a table made with a former spec
is given today's; a load that commits meanwhile wins; each landing hour still counts exactly."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kafka_landing.config import TopicConfig
from kafka_landing.handoff.units import event_unit
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.iceberg import IcebergWarehouse, upkeep
from kafka_landing.warehouse.load import load_unit
from kafka_landing_tests.helpers import drop_dataset, write_event_hour

DS = "shop"
EVENT_SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "created_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}]}
CFG = TopicConfig(topic="orders", dataset=DS, table="orders", event_time_field="created_at")
DAY1, DAY2, UNKNOWN1 = "2026-01-31", "2026-02-01", "__unknown__2026-01-31"


def _order(order_id: str, tag: str) -> dict:
    return {"order_id": order_id, "created_at": datetime.strptime(tag, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)}


@pytest.fixture(params=["sql", "rest"])
def landed(request, tmp_path, spark):
    """Day 1's records from three landing hours (one of them the next day's, late), day 2's from one;
    in the SQL catalog and in the stack's REST catalog (event versions and upkeep through it)."""
    catalog = request.getfixturevalue("iceberg_rest_url") if request.param == "rest" else None
    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"), catalog)
    if catalog:
        drop_dataset(wh, DS)  # the session's REST catalog holds the tests' before
    write_event_hour(store, DS, "orders", "2026-01-31T13", {"2026-01-31T13": [_order("a", "2026-01-31T13"),
                                                                            _order("b", "2026-01-31T13")],
                                                           None: [{"order_id": "u1", "created_at": None}]},
                     EVENT_SCHEMA, topic="orders", first=0)
    write_event_hour(store, DS, "orders", "2026-01-31T14", {"2026-01-31T14": [_order("c", "2026-01-31T14")],
                                                           None: [{"order_id": "u2", "created_at": None}]},
                     EVENT_SCHEMA, topic="orders", first=10)
    write_event_hour(store, DS, "orders", "2026-02-01T02", {"2026-01-31T20": [_order("late", "2026-01-31T20")],
                                                            "2026-02-01T02": [_order("d", "2026-02-01T02")]},
                     EVENT_SCHEMA, topic="orders", first=20)
    for day in (DAY1, DAY2, UNKNOWN1):
        load_unit(wh, store, event_unit(DS, "orders", day), lambda: spark, CFG)
    return store, wh


def _table(wh: IcebergWarehouse):
    return wh.by_event("day", "created_at").table(DS, "orders__by_event")


def _files(wh: IcebergWarehouse) -> dict[str, int]:
    out: dict[str, int] = {}
    for task in _table(wh).scan().plan_files():
        out[task.file.partition[0]] = out.get(task.file.partition[0], 0) + 1
    return out


def _rows(wh: IcebergWarehouse) -> list[tuple]:
    return sorted((r["event_day"], r["hour"], r["order_id"])
                  for r in _table(wh).scan().to_arrow().to_pylist())


def _upkeep(wh, spark, now):
    [u] = upkeep(wh, timedelta(days=7), now=now, spark=lambda: spark, tables=[(DS, "orders__by_event")])
    return u


def test_an_event_day_over_for_a_day_becomes_one_file_with_the_same_rows(landed, spark):
    store, wh = landed
    rows = _rows(wh)
    assert _files(wh) == {DAY1: 3, DAY2: 1, UNKNOWN1: 2}

    u = _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc))  # day 1 ended 25 h before, day 2 1 h

    assert (u.partitions_compacted, u.files_compacted) == (2, 5)
    assert _files(wh) == {DAY1: 1, DAY2: 1, UNKNOWN1: 1}
    assert _rows(wh) == rows
    event = wh.by_event("day", "created_at")
    assert event.partition_rows(DS, "orders__by_event", DAY1) == 4
    assert _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc)).partitions_compacted == 0  # done


def test_an_amendment_of_a_compacted_day_is_exact_and_is_compacted_again(landed, spark):
    store, wh = landed
    _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc))
    # The late hour landed again: its record of day 1 is now another one, and one more came.
    write_event_hour(store, DS, "orders", "2026-02-01T02", {"2026-01-31T20": [_order("late2", "2026-01-31T20")],
                                                            "2026-01-31T21": [_order("later", "2026-01-31T21")],
                                                            "2026-02-01T02": [_order("d", "2026-02-01T02")]},
                     EVENT_SCHEMA, topic="orders", first=30)
    load_unit(wh, store, event_unit(DS, "orders", DAY1), lambda: spark, CFG)

    # And the second hour of day 1 again, its record without an event time now another one.
    write_event_hour(store, DS, "orders", "2026-01-31T14", {"2026-01-31T14": [_order("c", "2026-01-31T14")],
                                                           None: [{"order_id": "u2b", "created_at": None}]},
                     EVENT_SCHEMA, topic="orders", first=50)
    for day in (DAY1, UNKNOWN1):
        load_unit(wh, store, event_unit(DS, "orders", day), lambda: spark, CFG)

    day1 = sorted(r[2] for r in _rows(wh) if r[0] == DAY1)
    assert day1 == ["a", "b", "c", "late2", "later"]
    assert sorted(r[2] for r in _rows(wh) if r[0] == UNKNOWN1) == ["u1", "u2b"]
    assert _files(wh)[DAY1] > 1  # the compacted file, less the re-landed hours (rewritten), and the new rows
    assert _upkeep(wh, spark, datetime(2026, 2, 3, 1, tzinfo=timezone.utc)).partitions_compacted == 2
    assert _files(wh) == {DAY1: 1, DAY2: 1, UNKNOWN1: 1}
    assert sorted(r[2] for r in _rows(wh) if r[0] == DAY1) == day1


def test_a_widening_rewrite_after_compaction_leaves_out_the_replaced_hours_rows(tmp_path, spark):
    """A load whose schema change rewrites the table (long to double) reads a compacted day's file,
    which holds the hour it replaces beside others: that hour's old rows are left out, not kept
    beside its new ones."""
    def schema(qty: str) -> dict:
        return {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"},
                                                             {"name": "qty", "type": qty}, EVENT_SCHEMA["fields"][1]]}

    def order(order_id: str, qty: float, tag: str) -> dict:
        return {**_order(order_id, tag), "qty": qty}

    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))
    for first, hour, oid in ((0, "2026-01-31T13", "a"), (10, "2026-01-31T14", "c")):
        write_event_hour(store, DS, "orders", hour, {hour: [order(oid, 1, hour)]}, schema("long"), topic="orders",
                         first=first)
    load_unit(wh, store, event_unit(DS, "orders", DAY1), lambda: spark, CFG)
    assert _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc)).partitions_compacted == 1

    write_event_hour(store, DS, "orders", "2026-01-31T14", {"2026-01-31T14": [order("c2", 2.5, "2026-01-31T14")]},
                     schema("double"), topic="orders", first=20)
    load_unit(wh, store, event_unit(DS, "orders", DAY1), lambda: spark, CFG)

    assert sorted((r["hour"], r["order_id"], r["qty"]) for r in _table(wh).scan().to_arrow().to_pylist()) == [
        ("2026-01-31T13", "a", 1.0), ("2026-01-31T14", "c2", 2.5)]


def test_a_table_of_the_former_spec_is_given_the_event_day_alone_and_compacts(tmp_path, spark):
    """Tables made before were partitioned by (event day, landing hour); their files stay under that
    spec, the new ones go under the event day alone, and a day of both compacts to one file."""
    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))
    write_event_hour(store, DS, "orders", "2026-01-31T13", {"2026-01-31T13": [_order("o0", "2026-01-31T13")]},
                     EVENT_SCHEMA, topic="orders", first=0)
    load_unit(wh, store, event_unit(DS, "orders", DAY1), lambda: spark, CFG)
    with _table(wh).update_spec() as spec:  # the former spec, as tables made before have it
        spec.add_identity("hour")
    write_event_hour(store, DS, "orders", "2026-01-31T14", {"2026-01-31T14": [_order("o10", "2026-01-31T14")]},
                     EVENT_SCHEMA, topic="orders", first=10)
    load_unit(wh, store, event_unit(DS, "orders", DAY1), lambda: spark, CFG)
    assert [f.name for f in _table(wh).spec().fields] == ["event_day", "hour"]

    u = _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc))

    assert [f.name for f in _table(wh).spec().fields] == ["event_day"]
    assert (u.partitions_compacted, u.files_compacted) == (1, 2)
    assert sorted(r[2] for r in _rows(wh)) == ["o0", "o10"]


def test_a_load_that_commits_while_a_day_is_compacted_wins_and_the_compaction_gives_way(landed, spark, monkeypatch):
    from kafka_landing.warehouse.iceberg import compact as compaction

    store, wh = landed
    real = compaction.Tables.rows_in

    def a_load_meanwhile(self, files):
        monkeypatch.setattr(compaction.Tables, "rows_in", real)
        write_event_hour(store, DS, "orders", "2026-02-01T05", {"2026-01-31T22": [_order("e", "2026-01-31T22")]},
                         EVENT_SCHEMA, topic="orders", first=40)
        load_unit(wh, store, event_unit(DS, "orders", DAY1), lambda: spark, CFG)
        return real(self, files)

    monkeypatch.setattr(compaction.Tables, "rows_in", a_load_meanwhile)
    u = _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc))

    assert u.partitions_compacted == 0
    assert _files(wh) == {DAY1: 4, DAY2: 1, UNKNOWN1: 2}
    assert sorted(r[2] for r in _rows(wh) if r[0] == DAY1) == ["a", "b", "c", "e", "late"]
    assert not list((wh.table_dir(DS, "orders__by_event") / "data").glob("_compact-*"))


VISIT = {"type": "record", "name": "Visit", "fields": [{"name": "page", "type": "string"},
                                                       {"name": "event_day", "type": "string"}]}
LANDING_HOURS = ("2026-01-31T13", "2026-01-31T14", "2026-02-01T02")


def _land_visits(store, wh, spark, hours=LANDING_HOURS, tag="v1"):
    """Hour i of `hours` lands i + 1 visits; their `event_day` field names no partition of ours."""
    from kafka_landing.handoff.manifests import read_done_file
    from kafka_landing_tests.helpers import write_hour

    for i, hour in enumerate(hours):
        records = [{"page": f"{tag}-{hour}-{n}", "event_day": "1999-01-01"} for n in range(i + 1)]
        done = write_hour(store, DS, "visits", hour, [(0, 1, VISIT, records)])
        manifest, sha = read_done_file(store, done)
        wh.load_partition(store, manifest, lambda: spark, done, sha)


def _visits(wh) -> list[tuple]:
    return sorted((r["hour"], r["page"]) for r in wh.table(DS, "visits").scan().to_arrow().to_pylist())


def _days(wh) -> dict[str, int]:
    out: dict[str, int] = {}
    for task in wh.table(DS, "visits").scan().plan_files():
        out[task.file.partition[0][:10]] = out.get(task.file.partition[0][:10], 0) + 1
    return out


def _conserved(store, wh, hour: str) -> bool:
    from kafka_landing.naming import Hour
    from kafka_landing.warehouse.checks import hour_conservation

    ok, _, metadata = hour_conservation(store, wh, DS, "visits", Hour(hour))
    return ok and metadata["warehouse_rows"] == metadata["landed_rows"]


@pytest.fixture(params=["sql", "rest"])
def visits(request, tmp_path, spark):
    catalog = request.getfixturevalue("iceberg_rest_url") if request.param == "rest" else None
    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"), catalog)
    if catalog:
        drop_dataset(wh, DS)
    _land_visits(store, wh, spark)
    return store, wh


def test_a_landing_day_over_for_a_day_becomes_one_file_and_each_hour_still_counts_exactly(visits, spark):
    """A landing-hour table is partitioned by its hours' day, so a day's 24 hourly files become one;
    the hour checks still match the landed rows, counted from the compacted file's row groups."""
    from kafka_landing.warehouse.iceberg.compact import COMPACTION

    store, wh = visits
    before = _visits(wh)
    assert [f.name for f in wh.table(DS, "visits").spec().fields] == ["landing_day"]
    assert _days(wh) == {DAY1: 2, DAY2: 1}

    [u] = upkeep(wh, timedelta(days=7), now=datetime(2026, 2, 2, 12, tzinfo=timezone.utc), spark=lambda: spark,
                 tables=[(DS, "visits")])

    assert (u.partitions_compacted, u.files_compacted) == (1, 2)  # day 2 ended 12 hours ago: not yet
    assert _days(wh) == {DAY1: 1, DAY2: 1}
    assert _visits(wh) == before
    assert [wh.partition_rows(DS, "visits", h) for h in LANDING_HOURS] == [1, 2, 3]
    assert [h for h in LANDING_HOURS if not _conserved(store, wh, h)] == []  # LANDING_HOURS: three
    t = wh.table(DS, "visits")
    assert [m.deleted_files_count for m in t.current_snapshot().manifests(t.io)].count(0) == len(
        t.current_snapshot().manifests(t.io)), "a manifest of removed files alone left for every plan to read"
    swap = t.snapshot_by_id(t.current_snapshot().parent_snapshot_id)  # then an append of nothing (`_swap`)
    assert COMPACTION in swap.summary.additional_properties  # one snapshot: the files swapped at once
    assert swap.summary["deleted-data-files"] == "2" and swap.summary["added-data-files"] == "1"
    assert swap.summary["deleted-records"] == swap.summary["added-records"] == "3"


def test_an_hour_landed_again_into_a_compacted_day_replaces_only_its_rows_and_compacts_again(visits, spark):
    store, wh = visits
    upkeep(wh, timedelta(days=7), now=datetime(2026, 2, 2, 12, tzinfo=timezone.utc), spark=lambda: spark,
           tables=[(DS, "visits")])
    others = [r for r in _visits(wh) if r[0] != "2026-01-31T13"]

    _land_visits(store, wh, spark, hours=("2026-01-31T14", "2026-01-31T13"), tag="v2")  # 13 now lands 2 visits

    assert _visits(wh) == sorted([r for r in others if r[0] != "2026-01-31T14"]
                                 + [("2026-01-31T14", "v2-2026-01-31T14-0"),
                                    ("2026-01-31T13", "v2-2026-01-31T13-0"), ("2026-01-31T13", "v2-2026-01-31T13-1")])
    assert [wh.partition_rows(DS, "visits", h) for h in LANDING_HOURS] == [2, 1, 3]
    assert [h for h in LANDING_HOURS if not _conserved(store, wh, h)] == []  # LANDING_HOURS: three
    [u] = upkeep(wh, timedelta(days=7), now=datetime(2026, 2, 3, 12, tzinfo=timezone.utc), spark=lambda: spark,
                 tables=[(DS, "visits")])
    assert (u.partitions_compacted, u.files_compacted) == (1, 2) and _days(wh) == {DAY1: 1, DAY2: 1}
    assert [wh.partition_rows(DS, "visits", h) for h in LANDING_HOURS] == [2, 1, 3]


def test_a_runs_staged_hours_of_a_compacted_day_load_alone_and_exactly(tmp_path, spark):
    """A run's hours staged into one commit give way where they replace hours of a compacted day:
    each hour's own load rewrites the day's file without it, by Spark."""
    from kafka_landing.handoff.manifests import read_done_file
    from kafka_landing_tests.helpers import write_hour

    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))
    _land_visits(store, wh, spark)
    upkeep(wh, timedelta(days=7), now=datetime(2026, 2, 2, 12, tzinfo=timezone.utc), spark=lambda: spark,
           tables=[(DS, "visits")])
    loads = []
    again = (LANDING_HOURS[0], LANDING_HOURS[2])  # one hour of the compacted day, one of the day after
    for hour in again:
        done = write_hour(store, DS, "visits", hour, [(0, 1, VISIT, [{"page": f"v4-{hour}", "event_day": "x"}])])
        manifest, sha = read_done_file(store, done)
        loads.append((manifest, done, sha))

    staged = wh.stage(store, loads, lambda: spark)
    for manifest, done, sha in loads:
        wh.load_partition(store, manifest, lambda: spark, done, sha, staged=staged)

    assert staged.committed == {}
    assert _visits(wh) == sorted([(h, f"v4-{h}") for h in again]
                                 + [("2026-01-31T14", f"v1-2026-01-31T14-{n}") for n in range(2)])
    assert [h for h in LANDING_HOURS if not _conserved(store, wh, h)] == []  # LANDING_HOURS: three


def test_a_landing_table_of_the_former_spec_is_given_the_day_and_compacts(tmp_path, spark, monkeypatch):
    from kafka_landing.warehouse.iceberg.tables import HOUR_COLUMN, Tables

    store, wh = LocalStore(tmp_path / "landing"), IcebergWarehouse(str(tmp_path / "warehouse"))
    with monkeypatch.context() as m:  # the spec every landing table had before: the hour itself
        m.setattr(Tables, "partition_by", lambda self, spec: spec.add_identity(HOUR_COLUMN))
        _land_visits(store, wh, spark)
    assert [f.name for f in wh.table(DS, "visits").spec().fields] == ["hour"]
    before = _visits(wh)

    [u] = upkeep(wh, timedelta(days=7), now=datetime(2026, 3, 1, tzinfo=timezone.utc), spark=lambda: spark,
                 tables=[(DS, "visits")])

    assert [f.name for f in wh.table(DS, "visits").spec().fields] == ["landing_day"]
    assert (u.partitions_compacted, u.files_compacted) == (1, 2)  # day 2 holds one file: nothing to do
    assert _days(wh) == {DAY1: 1, DAY2: 1} and _visits(wh) == before
    assert [wh.partition_rows(DS, "visits", h) for h in LANDING_HOURS] == [1, 2, 3]
    _land_visits(store, wh, spark, hours=("2026-02-01T05",), tag="v3")  # a load after: under the new spec
    assert wh.partition_rows(DS, "visits", "2026-02-01T05") == 1


def test_a_backlog_is_swapped_a_batch_per_commit_so_its_manifests_stay_small(landed, spark, monkeypatch):
    from kafka_landing.warehouse.iceberg import compact as compaction

    monkeypatch.setattr(compaction, "BATCH", 1)
    store, wh = landed
    before = len(_table(wh).metadata.snapshots)

    u = _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc))

    t = _table(wh)
    swaps = {s.summary.additional_properties.get(compaction.COMPACTION) for s in t.metadata.snapshots[before:]}
    assert (u.partitions_compacted, len(swaps - {None})) == (2, 2)  # two commits (each a delete and an append)
    assert _files(wh) == {DAY1: 1, DAY2: 1, UNKNOWN1: 1}


def test_a_load_between_two_batches_stops_the_compaction_there_and_keeps_its_rows(landed, spark, monkeypatch):
    """The first batch is swapped and its lock let go; a load then changes a partition of the second
    before the compaction reads the table again. The second batch must go on only from the
    compaction's own commit, so it gives way, and the load's rows stay."""
    import contextlib

    from kafka_landing.warehouse.iceberg import compact as compaction

    monkeypatch.setattr(compaction, "BATCH", 1)  # day 1, then the unknown partition
    store, wh = landed
    real_lock = compaction.Tables.lock
    locks = []

    @contextlib.contextmanager
    def then_a_load(self, *ident):
        locks.append(ident)
        with real_lock(self, *ident) as held:
            yield held
        if len(locks) == 1:  # the first swap's lock, just let go
            write_event_hour(store, DS, "orders", "2026-01-31T14", {"2026-01-31T14": [_order("c", "2026-01-31T14")],
                                                                   None: [{"order_id": "u2c", "created_at": None}]},
                             EVENT_SCHEMA, topic="orders", first=60)
            load_unit(wh, store, event_unit(DS, "orders", UNKNOWN1), lambda: spark, CFG)

    monkeypatch.setattr(compaction.Tables, "lock", then_a_load)
    u = _upkeep(wh, spark, datetime(2026, 2, 2, 1, tzinfo=timezone.utc))

    assert (u.partitions_compacted, u.files_compacted) == (1, 3)
    assert sorted(r[2] for r in _rows(wh) if r[0] == UNKNOWN1) == ["u1", "u2c"]
    assert _files(wh)[DAY1] == 1
