"""A range of hours landed in one pass gives exactly what landing its hours one by one gives:
the same files (names, rows, bytes), the same dead letters and the same done files, on the
demo topics (routing, event-hour split, a schema change, dead letters) with small frozen tasks."""

from __future__ import annotations

import uuid
from pathlib import Path

import fastavro
import pytest

from kafka_landing.avro_landing.assets import schema_fetcher
from kafka_landing.avro_landing.job import land_hour, land_hours
from kafka_landing.config import Route, TopicConfig
from kafka_landing.demo.generate import ORDERS, WEB, demo_hours, generate
from kafka_landing.errors import LandingError
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.naming import dead_letter_manifest_path, done_file_path, hour_from_tag
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.conftest import utcnow

HOURS = 3
VOLATILE = ("attempt", "landed_at")  # who landed it and when; everything else must match


@pytest.fixture(scope="module")
def landed(bootstrap, registry_url, kafka, registry, spark, tmp_path_factory):
    suffix = uuid.uuid4().hex[:6]
    topics = {ORDERS: f"orders_{suffix}", WEB: f"web_{suffix}"}
    now = utcnow()
    generate(bootstrap, registry_url, hours=HOURS, per_hour=120, now=now, topics=topics)
    cfgs = [
        TopicConfig(topic=topics[ORDERS], dataset="shop", table="orders", event_time_field="created_at",
                    grace_minutes=5, rows_per_task=9, dead_letter_limit=0.5),
        TopicConfig(topic=topics[WEB], dataset="web", grace_minutes=5, rows_per_task=13, dead_letter_limit=0.5,
                    route=Route(field="type", tables={"page_view": "page_views", "click": "clicks"},
                                default="other_events")),
    ]
    hours = demo_hours(now, HOURS)
    one_by_one, ranged = LocalStore(tmp_path_factory.mktemp("by_hour")), LocalStore(tmp_path_factory.mktemp("range"))
    fetch = schema_fetcher(registry)
    plans = {}
    for cfg in cfgs:
        with kafka.log_view() as log:
            plans[cfg.topic] = [freeze_slice(one_by_one, log, cfg, h, utcnow())[0] for h in hours]
        for plan in plans[cfg.topic]:
            land_hour(lambda: spark, one_by_one, fetch, kafka.spark_options(), cfg, plan, uuid.uuid4().hex[:8])
        got = land_hours(lambda: spark, ranged, fetch, kafka.spark_options(), cfg, plans[cfg.topic],
                         uuid.uuid4().hex[:8])
        assert not [r for r in got.values() if isinstance(r, LandingError)]
    return {"cfgs": cfgs, "plans": plans, "by_hour": one_by_one, "range": ranged}


def _files(store: LocalStore) -> dict[str, tuple[int, list[dict]]]:
    """{landing or dead-letter file: (bytes, records)} under the store."""
    out = {}
    for path in sorted(Path(store.root).rglob("*.avro")):
        rel = str(path.relative_to(store.root))
        if rel.startswith(("tables/", "dead_letters/")):
            with open(path, "rb") as f:
                out[rel] = (path.stat().st_size, list(fastavro.reader(f)))
    return out


def _without_volatile(d):
    if isinstance(d, dict):
        return {k: _without_volatile(v) for k, v in d.items() if k not in VOLATILE}
    if isinstance(d, list):
        return [_without_volatile(v) for v in d]
    return d


def test_a_range_lands_the_same_files_as_its_hours_one_by_one(landed):
    by_hour, ranged = _files(landed["by_hour"]), _files(landed["range"])
    assert by_hour, "the hours landed something"
    assert any("dead_letters" in k for k in by_hour), "the data holds dead letters, so they are compared too"
    assert any(len({r["_kafka_partition"] for r in recs}) == 1 and len(recs) > 1
               for _, recs in by_hour.values() if recs and "_kafka_partition" in recs[0])
    assert sorted(ranged) == sorted(by_hour), "the same file names"
    for name in by_hour:
        assert ranged[name][1] == by_hour[name][1], f"{name}: the same records in the same order"
        assert ranged[name][0] == by_hour[name][0], f"{name}: the same size"


def test_a_range_writes_the_same_done_files_and_dead_letter_manifests(landed):
    for cfg in landed["cfgs"]:
        for plan in landed["plans"][cfg.topic]:
            hour = hour_from_tag(plan.hour)
            rels = [done_file_path(cfg.dataset, t, hour) for t in cfg.tables]
            rels.append(dead_letter_manifest_path(cfg.topic, hour))
            for rel in rels:
                one, many = landed["by_hour"].read_json(rel), landed["range"].read_json(rel)
                assert one is not None and many is not None, rel
                assert _without_volatile(many) == _without_volatile(one), rel


def test_files_never_cross_a_frozen_task(landed):
    """Each file holds offsets of one frozen task: what makes the two ways of landing agree."""
    for cfg in landed["cfgs"]:
        for plan in landed["plans"][cfg.topic]:
            tasks = [(t.partition, t.start, t.end) for t in plan.tasks]
            for table in cfg.tables:
                done = landed["range"].read_json(done_file_path(cfg.dataset, table, hour_from_tag(plan.hour)))
                for f in done["files"]:
                    assert any(p == f["partition"] and s <= f["first_offset"] <= f["last_offset"] < e
                               for p, s, e in tasks), f["path"]
