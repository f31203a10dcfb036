"""The hour conservation check reads the hour's done file through the one reader
(`handoff.manifests.read_done_file`): a done file that is missing, not JSON, not a done file or
contradicting its path fails the check with one line naming the table and hour, the file and
what to do, never with an exception; a sound one is counted against the warehouse."""

from __future__ import annotations

import json

import pytest

from kafka_landing.handoff.markers import content_sha
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.checks import hour_conservation
from kafka_landing_tests.helpers import write_hour

DS, T, H = "shop", "orders", "2026-11-20T13"
WHERE = f"{DS}.{T} hour {H}"
SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}


class Warehouse:
    """What the check asks of a warehouse: the hour as loaded (`rows`, and the content it recorded)."""

    def __init__(self, rows: int | None = None, sha: str | None = None):
        self.rows, self.sha = rows, sha

    def loaded(self, dataset, table, partition):
        return None if self.sha is None else {"sha256": self.sha, "rows": self.rows}

    def partition_rows(self, dataset, table, partition):
        return self.rows

    def partition_location(self, dataset, table, partition):
        return f"wh/{dataset}/{table}/{partition}"


@pytest.fixture
def landed(tmp_path):
    """A landed hour of two rows: (store, its done file's path, the done file as a dict)."""
    store = LocalStore(str(tmp_path))
    rel = write_hour(store, DS, T, H, [(0, 1, SCHEMA, [{"a": 1}, {"a": 2}])])
    return store, rel, json.loads(store.read_bytes(rel))


def conservation(store, warehouse=None):
    return hour_conservation(store, warehouse or Warehouse(), DS, T, H)


def test_a_sound_hour_loaded_as_landed_passes_and_names_the_content_it_read(landed):
    store, rel, _ = landed
    ok, why, metadata = conservation(store, Warehouse(2, content_sha(store.read_bytes(rel))))
    assert ok, why
    assert why == f"{WHERE}: 2 rows, as landed"
    assert (metadata["landed_rows"], metadata["done_file_rows"], metadata["reload_pending"]) == (2, 2, False)


def test_a_loaded_hour_whose_done_file_changed_since_waits_for_its_reload(landed):
    store, _, _ = landed
    ok, _, metadata = conservation(store, Warehouse(2, "an older content"))
    assert ok and metadata["reload_pending"] is True


def test_an_hour_with_no_done_file_says_nothing_landed(tmp_path):
    ok, why, metadata = conservation(LocalStore(str(tmp_path)))
    assert not ok and metadata == {}
    assert why == f"{WHERE}: no done file (tables/{DS}/{T}/hour={H}/_DONE.json): nothing landed for this hour"


BROKEN = {
    "not JSON": (lambda raw: b"{not json", "is not JSON"),
    "not an object": (lambda raw: b"[]", "is not a JSON object"),
    "another table's": (lambda raw: json.dumps({**raw, "table": "payments"}).encode(),
                        "field 'table' is 'payments', its path says 'orders'"),
    "not a done file": (lambda raw: json.dumps({k: v for k, v in raw.items() if k != "dead_letters"}).encode(),
                        "is not a done file this version reads"),
    "rows its files do not hold": (lambda raw: json.dumps({**raw, "rows": 3}).encode(),
                                   "field 'rows' is 3, its files list 2 rows"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_done_file_that_cannot_be_trusted_fails_the_check_naming_the_hour_the_file_and_what_to_do(landed, broken):
    store, rel, raw = landed
    body, problem = BROKEN[broken]
    store.write_atomic(rel, body(raw))
    ok, why, metadata = conservation(store)
    assert not ok and metadata == {}
    assert why.startswith(f"{WHERE}: done file ") and rel in why and problem in why, why
    assert "re-land the hour" in why, why
