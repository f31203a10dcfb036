"""A range of hours landed in one pass gives exactly what landing its hours one by one gives:
the same files (names, rows, bytes), the same dead letters and the same done files, on the
demo topics (routing, event-hour split, a schema change, dead letters) with small frozen tasks."""

from __future__ import annotations

import uuid
from pathlib import Path

import fastavro
import pytest

from kafka_landing.avro_landing.job import HoursToLand, Sources, land_hours
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.config import Route, TopicConfig
from kafka_landing_tools.demo.generate import ORDERS, WEB, demo_hours, generate
from kafka_landing.errors import LandingError
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.naming import (
    Hour,
    dead_letter_manifest_path,
    done_file_path,
    hour_from_tag,
)
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import land_hour

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
            plans[cfg.topic] = [freeze_slice(one_by_one, log, cfg, Hour(h), utcnow())[0] for h in hours]
        for plan in plans[cfg.topic]:
            land_hour(lambda: spark, one_by_one, fetch, kafka.spark_options(), cfg, plan, uuid.uuid4().hex[:8])
        got = land_hours(Sources(lambda: spark, kafka.spark_options(), fetch), ranged,
                         HoursToLand(cfg, plans[cfg.topic], uuid.uuid4().hex[:8]))
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


def test_an_hour_that_cannot_land_fails_alone_and_the_others_publish(make_topic, send, registry_url, registry, kafka,
                                                                     spark, store):
    """A schema that cannot land fails only the hours whose records carry it."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from kafka_landing.avro_landing.framing import frame
    from kafka_landing_tools.demo.generate import encode, register
    from kafka_landing.naming import ONE_HOUR, floor_hour, to_millis

    topic = make_topic(partitions=2)
    client = SchemaRegistryClient({"url": registry_url})
    good = {"type": "record", "name": "Good", "fields": [{"name": "n", "type": "long"}]}
    clash = {"type": "record", "name": "Clash", "fields": [{"name": "_kl_part", "type": "long"}]}  # an internal name
    ok_id, bad_id = register(client, f"{topic}-value", good), register(client, f"{topic}-other", clash)
    first = floor_hour(utcnow()) - ONE_HOUR * 4
    hours = [first, first + ONE_HOUR, first + 2 * ONE_HOUR]
    records = []
    for i, h in enumerate(hours):
        for m in range(6):
            schema, sid = (clash, bad_id) if i == 1 and m == 3 else (good, ok_id)
            body = encode(schema, {"_kl_part": m} if schema is clash else {"n": m})
            records.append((topic, m % 2, to_millis(h) + m * 60_000, None, frame(sid, body)))
    send(records)
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0, rows_per_task=2)
    with kafka.log_view() as log:
        plans = [freeze_slice(store, log, cfg, Hour(h), utcnow())[0] for h in hours]
    got = land_hours(Sources(lambda: spark, kafka.spark_options(), schema_fetcher(registry)), store,
                     HoursToLand(cfg, plans, "a1", likely_ids=(ok_id,)))
    tags = [p.hour for p in plans]
    assert isinstance(got[tags[1]], LandingError)
    assert f"{topic} {tags[1]}" in str(got[tags[1]]) and f"schema id {bad_id}" in str(got[tags[1]])
    assert store.read_json(done_file_path("d", "t", hours[1])) is None, "the failed hour published nothing"
    for i in (0, 2):
        assert not isinstance(got[tags[i]], LandingError), got[tags[i]]
        assert got[tags[i]].rows == 6 and store.read_json(done_file_path("d", "t", hours[i]))["rows"] == 6
