"""What the Iceberg tables' snapshots say was loaded (`commits.Lineage`), read as Iceberg's Kafka
Connect coordinator reads its offsets: from the current snapshot back along its parents, never by
sorting the table's history; and what a widening is to Iceberg, in metadata or a rewrite
(`needs_rewrite`, `type_changes`). Snapshots are stand-ins with what pyiceberg's have (id, parent,
summary); no catalog, no Spark."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kafka_landing.warehouse.iceberg.commits import Lineage, needs_rewrite, prop, type_changes


class Snapshot:
    """A snapshot whose summary counts its reads."""

    reads = 0

    def __init__(self, snapshot_id: int, parent: int | None, **props: str):
        self.snapshot_id, self.parent_snapshot_id = snapshot_id, parent
        self.timestamp_ms = 1_767_225_600_000 + snapshot_id * 1000  # 2026-01-01T00:00:00Z + id seconds
        self._props = {prop(k.replace("_", "-")): v for k, v in props.items()}

    @property
    def summary(self):
        Snapshot.reads += 1
        return SimpleNamespace(additional_properties=self._props)


def table(snapshots: list[Snapshot], current: int | None = None):
    """A table holding `snapshots` in commit order, its current one the last unless told."""
    by_id = {s.snapshot_id: s for s in snapshots}
    now = by_id[current] if current is not None else snapshots[-1]
    return SimpleNamespace(metadata=SimpleNamespace(snapshots=snapshots), current_snapshot=lambda: now)


def load(snapshot_id: int, parent: int | None, hour: str, sha: str, column: str = "hour") -> Snapshot:
    return Snapshot(snapshot_id, parent, partition=hour, sha256=sha, rows="1", column=column)


def test_the_newest_load_of_an_hour_is_found_walking_back_and_each_snapshot_is_read_once():
    chain = [load(1, None, "H0", "a"), load(2, 1, "H1", "b"), load(3, 2, "H0", "c"), load(4, 3, "H2", "d")]
    lineage = Lineage(table(chain), "hour")
    Snapshot.reads = 0

    assert lineage.newest("H2")["sha256"] == "d" and Snapshot.reads == 1  # the top of the chain
    got = lineage.newest("H0")
    assert (got["sha256"], got["snapshot_id"], got["committed_at"]) == ("c", 3, "2026-01-01T00:00:03.000+00:00")
    assert lineage.newest("H1")["snapshot_id"] == 2 and lineage.newest("H9") is None
    assert Snapshot.reads == 4, "a snapshot was read twice"


def test_a_snapshot_off_the_current_lineage_is_no_load_of_the_table():
    """A table rolled back to snapshot 2: snapshot 3, newer and still listed, is not its history."""
    chain = [load(1, None, "H0", "a"), load(2, 1, "H1", "b"), load(3, 2, "H0", "abandoned")]
    lineage = Lineage(table(chain, current=2), "hour")

    assert lineage.newest("H0")["sha256"] == "a"
    assert [s.snapshot_id for s in lineage.walk()] == [2, 1]


def test_hours_committed_together_are_found_and_another_columns_loads_are_not():
    together = Snapshot(2, 1, column="hour", loads=json.dumps({"H1": {"sha256": "b", "rows": "1"},
                                                                "H2": {"sha256": "c", "rows": "2"}}))
    chain = [load(1, None, "H1", "old"), together, load(3, 2, "2026-01-31", "e", column="event_day")]
    lineage = Lineage(table(chain), "hour")

    assert (lineage.newest("H1")["sha256"], lineage.newest("H2")["rows"]) == ("b", "2")
    assert lineage.newest("H2")["snapshot_id"] == 2 and lineage.newest("2026-01-31") is None
    assert Lineage(table(chain), "event_day").newest("2026-01-31")["sha256"] == "e"


def test_an_expired_parent_ends_the_walk_and_no_table_has_no_loads():
    kept = [load(5, 4, "H0", "x"), load(6, 5, "H1", "y")]  # 4 and before expired by upkeep
    lineage = Lineage(table(kept), "hour")

    assert [s.snapshot_id for s in lineage.walk()] == [6, 5]
    assert lineage.newest("H0")["sha256"] == "x" and lineage.newest("H-1") is None
    assert Lineage(None, "hour").newest("H0") is None and list(Lineage(None, "hour").walk()) == []


STRUCT_A = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}]}
STRUCT_AB = {"type": "struct", "fields": [*STRUCT_A["fields"], {"name": "b", "type": "string", "nullable": True,
                                                                 "metadata": {}}]}


@pytest.mark.parametrize(("old", "new", "rewrite"), [
    ("long", "long", False),
    ("decimal(9,2)", "decimal(14,2)", False),
    ("decimal(9,2)", "decimal(10,3)", True),
    ("long", "double", True),
    ("string", "binary", True),
    (STRUCT_A, STRUCT_AB, False),
    ({"type": "array", "elementType": "long"}, {"type": "array", "elementType": "double"}, True),
    ({"type": "map", "keyType": "string", "valueType": "decimal(9,2)"},
     {"type": "map", "keyType": "string", "valueType": "decimal(12,2)"}, False),
    ("long", STRUCT_A, True),
])
def test_what_iceberg_holds_in_metadata_and_what_it_rewrites(old, new, rewrite):
    assert needs_rewrite(old, new) is rewrite


def test_each_changed_type_is_named_by_its_iceberg_path_and_a_new_field_is_no_change():
    old = {"type": "struct", "fields": [
        {"name": "n", "type": "long", "nullable": True, "metadata": {}},
        {"name": "xs", "type": {"type": "array", "elementType": STRUCT_A}, "nullable": True, "metadata": {}},
        {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": "decimal(9,2)"}, "nullable": True,
         "metadata": {}}]}
    new = {**old, "fields": [
        {**old["fields"][0], "type": "double"},
        {**old["fields"][1], "type": {"type": "array", "elementType": STRUCT_AB}},
        {**old["fields"][2], "type": {"type": "map", "keyType": "string", "valueType": "decimal(12,2)"}},
        {"name": "added", "type": "binary", "nullable": True, "metadata": {}}]}

    assert type_changes(old, new) == [(("n",), "double"), (("m", "value"), "decimal(12,2)")]
    assert type_changes(STRUCT_A, STRUCT_A) == []


def test_a_namespace_another_load_made_first_is_used_and_a_missing_one_still_fails(tmp_path):
    """Two first loads of a dataset race: the SQL catalog's loser gets its unique key's error, not
    NamespaceAlreadyExistsError."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import IntegrityError

    from kafka_landing.warehouse.iceberg.commits import ensure_namespace

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    real = catalog.create_namespace

    def lost_the_race(namespace, properties=None):
        real(namespace)  # the other load's, between this one's check and its insert
        raise IntegrityError("INSERT INTO iceberg_namespace_properties", {}, Exception("UNIQUE constraint failed"))

    catalog.create_namespace = lost_the_race
    ensure_namespace(catalog, "shop")
    assert catalog.namespace_exists("shop")

    def refused(namespace, properties=None):
        raise PermissionError("the catalog refuses")

    catalog.create_namespace = refused
    with pytest.raises(PermissionError):
        ensure_namespace(catalog, "web")
