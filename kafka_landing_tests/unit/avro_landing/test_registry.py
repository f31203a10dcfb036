"""The schema ids a run's records most likely carry are only a guess (the registry's latest, then
those of the hour before): the previous hour's done file is read through the one reader
(`handoff.manifests.read_done_file`), and one that cannot be trusted gives no guess instead of
failing the run that lands the next hour."""

from __future__ import annotations

import json

import pytest

from kafka_landing.avro_landing.registry import likely_schema_ids
from kafka_landing.config import TopicConfig
from kafka_landing.naming import Hour
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.helpers import write_hour

CFG = TopicConfig("orders", "shop", table="orders")
BEFORE, FIRST = "2026-11-20T13", Hour("2026-11-20T14")
SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}


class NoRegistry:
    """A registry that does not answer: no guess from it."""

    def client(self):
        raise ConnectionError("registry away")


@pytest.fixture
def landed(tmp_path):
    """The hour before the run landed with schema ids 3 and 5: (store, its done file, as a dict)."""
    store = LocalStore(str(tmp_path))
    rel = write_hour(store, "shop", "orders", BEFORE, [(0, 3, SCHEMA, [{"a": 1}]), (1, 5, SCHEMA, [{"a": 2}])],
                     topic="orders")
    return store, rel, json.loads(store.read_bytes(rel))


def test_the_hour_befores_schema_ids_newest_first(landed):
    store, _, _ = landed
    assert likely_schema_ids(store, NoRegistry(), CFG, FIRST) == (5, 3)


def test_no_hour_before_no_guess(tmp_path):
    assert likely_schema_ids(LocalStore(str(tmp_path)), NoRegistry(), CFG, FIRST) == ()


@pytest.mark.parametrize("body", [b"{not json", b"[1]", b'{"schema_ids": 7}'], ids=["not JSON", "a list", "no done file"])
def test_a_done_file_before_that_cannot_be_trusted_gives_no_guess(landed, body):
    store, rel, _ = landed
    store.write_atomic(rel, body)
    assert likely_schema_ids(store, NoRegistry(), CFG, FIRST) == ()
