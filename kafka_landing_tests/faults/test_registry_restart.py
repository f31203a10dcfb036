"""The local stack's schema registry killed and started again keeps every schema under the id it
had: the broker keeps its records across a restart, and each record names its schema by id. A
registry that forgot them would hand the old ids to the next schemas registered, and the records
already on the broker would then name schemas they were not written with.

A registry of its own (its own ports and folder), so the shared one is never restarted."""

from __future__ import annotations

import json
import signal

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kafka_landing_tools import devstack
from kafka_landing_tests.faults.harness import closed_port


def _schema(name: str, field: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": [{"name": field, "type": "long"}]}), "AVRO")


def test_a_killed_registry_comes_back_with_every_schema_under_its_id(tmp_path):
    port, management = closed_port(), closed_port()
    rdir = tmp_path / "registry"
    try:
        url = devstack.start_registry(port, management, rdir)
        before = SchemaRegistryClient({"url": url})
        ids = {f"t{i}-value": before.register_schema(f"t{i}-value", _schema(f"R{i}", f"f{i}")) for i in range(3)}
        assert len(set(ids.values())) == 3, ids

        assert devstack._stop(rdir / "pid", signal.SIGKILL)  # a crash: nothing flushed on the way out
        url = devstack.start_registry(port, management, rdir)

        after = SchemaRegistryClient({"url": url})  # a new client: nothing cached
        assert {s: after.get_latest_version(s).schema_id for s in ids} == ids
        for i, (subject, sid) in enumerate(sorted(ids.items())):
            assert json.loads(after.get_schema(sid).schema_str)["name"] == f"R{i}", subject
        new = after.register_schema("t9-value", _schema("R9", "f9"))
        assert new not in ids.values(), f"the restarted registry gave id {new} again: {ids}"
    finally:
        devstack._stop(rdir / "pid")
