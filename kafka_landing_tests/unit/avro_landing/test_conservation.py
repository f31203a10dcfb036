"""The landing conservation check reads each done file of the hour through the one reader
(`handoff.manifests.read_done_file`), those of the tables a routing change retired included: a
done file that is not JSON, not a done file, or contradicting its path is a problem of the hour,
named with its file and what to do, not an exception (which would only say the check could not
count) nor rows counted as if it were sound."""

from __future__ import annotations

import json

import pytest

from kafka_landing.avro_landing.conservation import check_landed_hour
from kafka_landing.config import Route, TopicConfig
from kafka_landing.naming import done_file_path
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.unit.avro_landing.test_publish import HOUR, PLAN, land

CFG = TopicConfig("web", "w", table="clicks")
REL = done_file_path("w", "clicks", HOUR)


@pytest.fixture
def store(tmp_path):
    store = LocalStore(str(tmp_path))
    land(store, CFG, "clicks", "a1")
    assert check_landed_hour(store, CFG, PLAN).passed
    return store


def rewrite(store, rel: str, change) -> None:
    store.write_atomic(rel, change(json.loads(store.read_bytes(rel))))


BROKEN = {
    "not JSON": (lambda raw: b"{not json", "is not JSON"),
    "not an object": (lambda raw: b"[1]", "is not a JSON object"),
    "not a done file": (lambda raw: json.dumps({k: v for k, v in raw.items() if k != "dead_letters"}).encode(),
                        "is not a done file this version reads"),
    "another dataset's": (lambda raw: json.dumps({**raw, "dataset": "w2"}).encode(),
                          "field 'dataset' is 'w2', its path says 'w'"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_done_file_that_cannot_be_trusted_is_a_problem_naming_it(store, broken):
    change, problem = BROKEN[broken]
    rewrite(store, REL, change)
    verdict = check_landed_hour(store, CFG, PLAN)
    assert not verdict.passed
    named = [p for p in verdict.problems if REL in p]
    assert len(named) == 1 and problem in named[0] and "re-land the hour" in named[0], verdict.problems


def test_a_missing_done_file_is_a_problem_naming_it(store):
    store.delete(REL)
    verdict = check_landed_hour(store, CFG, PLAN)
    assert not verdict.passed and verdict.problems == [f"no done file {REL}"]


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_retired_tables_done_file_that_cannot_be_trusted_is_a_problem_naming_it(tmp_path, broken):
    store = LocalStore(str(tmp_path))
    v1 = TopicConfig("web", "w", route=Route("type", {"click": "clicks"}, "other"))
    v2 = TopicConfig("web", "w", route=Route("type", {"click": "web_clicks"}, "other"))
    land(store, v1, "clicks", "a1")
    land(store, v2, "web_clicks", "a2")  # retires w.clicks: an empty done file
    assert check_landed_hour(store, v2, PLAN).passed
    change, problem = BROKEN[broken]
    rewrite(store, REL, change)
    verdict = check_landed_hour(store, v2, PLAN)
    assert not verdict.passed
    named = [p for p in verdict.problems if REL in p]
    assert len(named) == 1 and problem in named[0] and "a table the hour no longer feeds" in named[0], verdict.problems
