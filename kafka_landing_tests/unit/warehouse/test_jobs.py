"""`retire_hours` reads each done file it is given through the one reader
(`handoff.manifests.read_done_file`) before anything is loaded: a done file that is missing, not
JSON, not a done file or contradicting its path fails the run naming the job, the file and what
to do (terminal: the same bytes fail the same way), and one that is not retired is refused."""

from __future__ import annotations

import json

import pytest
from dagster import Failure, build_op_context

from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.jobs import RETIRE_JOB, RetireConfig, retire_hours_op
from kafka_landing.warehouse.resources import ParquetWarehouseResource
from kafka_landing_tests.helpers import write_hour

DS, T, H = "shop", "orders", "2026-11-20T13"
SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}


@pytest.fixture
def landed(tmp_path):
    """(store, the done file of a landed hour of two rows, that done file as a dict)."""
    store = LocalStore(str(tmp_path / "landing"))
    rel = write_hour(store, DS, T, H, [(0, 1, SCHEMA, [{"a": 1}, {"a": 2}])])
    return store, rel, json.loads(store.read_bytes(rel))


def retire(store: LocalStore, tmp_path, rel: str) -> Failure:
    """The Failure of `retire_hours_op` asked to retire `rel` (Dagster retries it only if `allow_retries`)."""
    resources = {"landing": LandingResource(landing_root=store.root),
                 "warehouse": ParquetWarehouseResource(root=str(tmp_path / "warehouse")),
                 "pyspark": SparkResource(remote="sc://127.0.0.1:1")}  # never opened: nothing gets that far
    with build_op_context(resources=resources) as context:
        with pytest.raises(Failure) as failed:
            retire_hours_op(context, RetireConfig(done_files=[rel]))
    return failed.value


def test_a_done_file_that_is_not_retired_is_refused_naming_its_rows(landed, tmp_path):
    store, rel, _ = landed
    failed = retire(store, tmp_path, rel)
    assert f"{RETIRE_JOB}: done file {store.location(rel)} is not retired (it lists 2 rows)" in failed.description
    assert "load it through its table's asset" in failed.description and not failed.allow_retries


def test_a_missing_done_file_says_nothing_to_retire(landed, tmp_path):
    store, _, _ = landed
    rel = f"tables/{DS}/{T}/hour=2026-11-20T14/_DONE.json"
    failed = retire(store, tmp_path, rel)
    assert f"{RETIRE_JOB}: done file {store.location(rel)} does not exist: nothing to retire" in failed.description
    assert "check the path in the run config" in failed.description and not failed.allow_retries


BROKEN = {
    "not JSON": (lambda raw: b"{not json", "is not JSON"),
    "not an object": (lambda raw: b"[1]", "is not a JSON object"),
    "not a done file": (lambda raw: json.dumps({"rows": 2}).encode(), "field 'dataset' is None"),
    "another table's, retired": (lambda raw: json.dumps({**raw, "table": "payments", "retired": "routing changed"})
                                 .encode(), "field 'table' is 'payments', its path says 'orders'"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_done_file_that_cannot_be_trusted_fails_the_run_naming_the_job_and_the_file(landed, tmp_path, broken):
    store, rel, raw = landed
    change, problem = BROKEN[broken]
    store.write_atomic(rel, change(raw))
    failed = retire(store, tmp_path, rel)
    message = failed.description
    assert message.startswith(f"{RETIRE_JOB}: done file ") and rel in message and problem in message, message
    assert "re-land the hour" in message and "is not retired" not in message, message
    assert not failed.allow_retries
