"""Changing a topic's first hour on a real broker, registry, Spark and Dagster
instance: moved earlier, the new hours land and tile with the frozen ones, which
are neither re-planned nor re-landed; moved later, no frozen hour disappears from
the partitions. Every offset lands once throughout."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import fastavro
import pytest
import yaml
from dagster import AssetKey, DagsterInstance
from dagster._core.storage.partition_status_cache import (
    get_and_update_asset_status_cache_value,
)

from kafka_landing.avro_landing.framing import frame
from kafka_landing.definitions import (
    build_definitions,
    build_resources,
    landing_job_name,
)
from kafka_landing_tools.demo.generate import encode, register
from kafka_landing.naming import ONE_HOUR, asset_safe, floor_hour, hour_key, to_millis
from kafka_landing_tests.conftest import utcnow

ROW = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]}


@pytest.fixture
def configure(code_location, monkeypatch):
    def _configure(topic: str, first_hour: str | None) -> None:
        code_location({topic: {"dataset": "fh", "table": "rows", **({"first_hour": first_hour} if first_hour else {})}})
        monkeypatch.delenv("KAFKA_LANDING_FIRST_HOUR", raising=False)

    return _configure


def land(instance, topic, first, last):
    defs = build_definitions()
    result = defs.resolve_job_def(landing_job_name(topic)).execute_in_process(
        instance=instance, resources=build_resources(), raise_on_error=False,
        tags={"dagster/asset_partition_range_start": hour_key(first), "dagster/asset_partition_range_end": hour_key(last)})
    assert result.success
    return defs


def fingerprints(root) -> dict[str, str]:
    """Every slice manifest, landing file and done file, by path: a re-plan or re-land changes them."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for sub in ("slices", "tables") for p in (root / sub).rglob("*") if p.is_file() and not p.name.startswith(".")}


def materialised(instance, defs, key) -> list[str]:
    hours = defs.get_assets_def(key).partitions_def
    status = get_and_update_asset_status_cache_value(instance, key, hours)
    return sorted(status.deserialize_materialized_partition_subsets(hours).get_partition_keys())


def test_moving_the_first_hour_neither_loses_nor_re_lands_frozen_hours(configure, make_topic, send, registry, spark, tmp_path):
    topic = make_topic(partitions=2)
    sid = register(registry.client(), f"{topic}-value", ROW)
    hours = [floor_hour(utcnow()) - ONE_HOUR * (8 - i) for i in range(4)]
    sent = [(topic, n % 2, to_millis(h + timedelta(minutes=3 + n)), None, frame(sid, encode(ROW, {"id": 100 * i + n})))
            for i, h in enumerate(hours) for n in range(5 + i)]
    send(sent)
    slices, landing = AssetKey(["kafka_slices", asset_safe(topic)]), AssetKey(["avro_landing", asset_safe(topic)])
    keys = [hour_key(h) for h in hours]
    root = tmp_path / "landing"

    with DagsterInstance.ephemeral() as instance:
        # 1. The topic starts at its third hour: earlier hours are no partitions.
        configure(topic, keys[2])
        defs = land(instance, topic, hours[2], hours[3])
        assert defs.get_assets_def(slices).partitions_def.get_first_partition_key() == keys[2]
        assert not defs.get_assets_def(landing).partitions_def.has_partition_key(keys[1])
        before = fingerprints(root)

        # 2. Moved earlier: two more hours, landed in one run with the frozen two, which are reused as they are.
        configure(topic, keys[0])
        defs = land(instance, topic, hours[0], hours[3])
        for key in (slices, landing):
            assert defs.get_assets_def(key).partitions_def.get_first_partition_key() == keys[0]
            assert materialised(instance, defs, key) == keys
        after = fingerprints(root)
        assert {p: after[p] for p in before} == before, "the frozen hours were neither re-planned nor re-landed"
        assert len(after) > len(before)
        reused = {r.partition_key: r.asset_materialization.metadata["reused"].value
                  for r in instance.fetch_materializations(landing, limit=10).records[:4]}
        assert reused == {keys[0]: False, keys[1]: False, keys[2]: True, keys[3]: True}

        # The new hours tile with the frozen ones, and every offset landed exactly once.
        plans = [yaml.safe_load((root / "slices" / topic / f"hour={h:%Y-%m-%dT%H}.json").read_text()) for h in hours]
        for older, newer in zip(plans, plans[1:]):
            assert {p["partition"]: p["end"] for p in older["partitions"]} == \
                {p["partition"]: p["start"] for p in newer["partitions"]}
        landed = sorted((r["_kafka_partition"], r["_kafka_offset"]) for p in (root / "tables" / "fh" / "rows").rglob("*.avro")
                        for r in fastavro.reader(p.open("rb")))
        per_partition = {p: sum(1 for s in sent if s[1] == p) for p in (0, 1)}
        assert landed == [(p, o) for p in (0, 1) for o in range(per_partition[p])]

        # 3. Moved later than frozen hours: they stay partitions, and the asset says why.
        configure(topic, keys[3])
        defs = build_definitions()
        assert defs.get_assets_def(slices).partitions_def.get_first_partition_key() == keys[0]
        assert materialised(instance, defs, landing) == keys
        assert f"earlier than the first hour {keys[3]} from first_hour of the topic" in defs.get_assets_def(slices).descriptions_by_key[slices]
        assert fingerprints(root) == after

        # 4. No first hour configured at all: the history starts at the earliest frozen slice.
        configure(topic, None)
        defs = build_definitions()
        assert defs.get_assets_def(landing).partitions_def.get_first_partition_key() == keys[0]
        assert "the earliest frozen slice, no first_hour configured" in defs.get_assets_def(landing).descriptions_by_key[landing]
