"""avro_landing against the real broker, registry and Spark: conservation, round
trip, dead letters, idempotence and crash safety."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from datetime import timedelta
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import TopicPartition

from kafka_landing.avro_landing.conservation import check_landed_hour
from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.config import Route, TopicConfig
from kafka_landing_tools.demo.generate import (
    ORDERS,
    WEB,
    demo_hours,
    encode,
    generate,
    register,
)
from kafka_landing.errors import DeadLetterLimitExceeded, LandingError
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.kafka_slices.plan import check_still_in_kafka
from kafka_landing.handoff.manifests import DoneFile
from kafka_landing.naming import (
    ONE_HOUR,
    Hour,
    done_file_path,
    floor_hour,
    hour_tag,
    to_millis,
)
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import content_key, land_hour, parse_landing_file_name

HOURS = 3
SIMPLE = {"type": "record", "name": "Simple", "fields": [{"name": "n", "type": "long"}]}


def read_avro(store: LocalStore, rel: str) -> list[dict]:
    with open(Path(store.location(rel)), "rb") as f:
        return list(fastavro.reader(f))


def done_files(store: LocalStore, cfg: TopicConfig, hour) -> dict[str, DoneFile]:
    return {t: DoneFile.from_dict(store.read_json(done_file_path(cfg.dataset, t, hour))) for t in cfg.tables}


def land(spark, store, registry, kafka, cfg, hour, attempt=None, fetch=None):
    with kafka.log_view() as log:
        plan, _ = freeze_slice(store, log, cfg, Hour(hour), utcnow())
    return plan, land_hour(lambda: spark, store, fetch or schema_fetcher(registry), kafka.spark_options(), cfg, plan,
                           attempt or uuid.uuid4().hex[:8])


@pytest.fixture(scope="module")
def demo(bootstrap, registry_url, kafka, registry, spark, tmp_path_factory):
    """Demo data on fresh topics, every hour landed once."""
    suffix = uuid.uuid4().hex[:6]
    topics = {ORDERS: f"orders_{suffix}", WEB: f"web_{suffix}"}
    now = utcnow()
    sent = generate(bootstrap, registry_url, hours=HOURS, per_hour=150, now=now, topics=topics)
    store = LocalStore(tmp_path_factory.mktemp("landing"))
    cfgs = {
        ORDERS: TopicConfig(topic=topics[ORDERS], dataset="shop", table="orders", event_time_field="created_at",
                            grace_minutes=5, rows_per_task=20, dead_letter_limit=0.2),
        WEB: TopicConfig(topic=topics[WEB], dataset="web", grace_minutes=5, rows_per_task=1000, dead_letter_limit=0.2,
                         route=Route(field="type", tables={"page_view": "page_views", "click": "clicks"}, default="other_events")),
    }
    hours = demo_hours(now, HOURS)
    results = {}
    for name, cfg in cfgs.items():
        for hour in hours:
            results[(name, hour)] = land(spark, store, registry, kafka, cfg, hour)
    return {"sent": sent, "topics": topics, "store": store, "cfgs": cfgs, "hours": hours, "results": results}


def landed_rows(demo, name) -> dict[tuple[int, int], dict]:
    cfg, store = demo["cfgs"][name], demo["store"]
    rows = {}
    for hour in demo["hours"]:
        for table, done in done_files(store, cfg, hour).items():
            for f in done.files:
                for r in read_avro(store, f.path):
                    key = (r["_kafka_partition"], r["_kafka_offset"])
                    assert key not in rows, f"offset {key} landed twice"
                    rows[key] = {**r, "_table": table, "_file": f}
    return rows


def dead_rows(demo, name) -> dict[tuple[int, int], dict]:
    cfg, store = demo["cfgs"][name], demo["store"]
    rows = {}
    for hour in demo["hours"]:
        for f in next(iter(done_files(store, cfg, hour).values())).dead_letters.files:
            for r in read_avro(store, f.path):
                key = (r["partition"], r["offset"])
                assert key not in rows
                rows[key] = r
    return rows


def hour_offsets(store: LocalStore, done: dict[str, DoneFile]) -> list[tuple[int, int]]:
    """(partition, offset) of every landed row and dead letter one hour's done files list."""
    files = [f for d in done.values() for f in d.files] + list(next(iter(done.values())).dead_letters.files)
    out = []
    for f in files:
        for r in read_avro(store, f.path):
            out.append((r["_kafka_partition"], r["_kafka_offset"]) if "_kafka_offset" in r else (r["partition"], r["offset"]))
    return out


@pytest.mark.parametrize("name", [ORDERS, WEB])
def test_conservation_every_offset_exactly_once(demo, name):
    cfg, store = demo["cfgs"][name], demo["store"]
    seen = []
    for hour in demo["hours"]:
        plan, result = demo["results"][(name, hour)]
        dones = done_files(store, cfg, hour)
        assert set(dones) == set(cfg.tables), "every table gets a done file, even an empty hour"
        rows = sum(d.rows for d in dones.values())
        assert result.records_read == plan.records == rows + result.dead_letters.rows
        offsets = hour_offsets(store, dones)
        assert len(offsets) == len(set(offsets)), "an offset landed twice in one hour"
        assert set(offsets) == {(p.partition, o) for p in plan.partitions for o in range(p.start, p.end)}
        seen += offsets
    assert len(seen) == len(set(seen)), "an offset landed in two hours"
    sent = {(s.partition, s.offset) for s in demo["sent"].for_topic(cfg.topic)}
    assert set(seen) == sent


def _normalise(v):
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, dict):
        return {k: _normalise(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_normalise(x) for x in v]
    return v


@pytest.mark.parametrize("name", [ORDERS, WEB])
def test_round_trip_field_by_field(demo, name):
    landed = landed_rows(demo, name)
    cfg = demo["cfgs"][name]
    checked_v2 = 0
    for s in demo["sent"].for_topic(cfg.topic):
        if s.bad:
            continue
        row = landed[(s.partition, s.offset)]
        for field, value in s.record.items():
            assert _normalise(row[field]) == _normalise(value), (field, row[field], value)
        if "coupon" in s.record:
            checked_v2 += 1
        elif name == ORDERS:
            assert row.get("coupon") is None  # v1 rows: the v2 field does not appear (schema per file)
        assert row["_kafka_topic"] == cfg.topic
        assert row["_kafka_key"] == s.key
        assert int(row["_kafka_timestamp"].timestamp() * 1000) == s.timestamp_ms
        assert [(h["key"], h["value"]) for h in row["_kafka_headers"]] == [("trace-id", row["_kafka_headers"][0]["value"]), ("source", b"demo")]
        meta = parse_landing_file_name(Path(row["_file"].path).name)
        assert (meta["partition"], meta["schema_id"]) == (s.partition, s.schema_id)
        assert meta["first_offset"] <= s.offset <= meta["last_offset"]
        if name == WEB:
            expected = {"page_view": "page_views", "click": "clicks"}.get(s.record["type"], "other_events")
            assert row["_table"] == expected == meta["table"]
        else:
            assert meta["event_hour"] == hour_tag(s.record["created_at"])
    if name == ORDERS:
        assert checked_v2 > 0, "the second schema version was produced and compared"


def test_landing_files_keep_the_writer_schema(demo):
    store = demo["store"]
    done = done_files(store, demo["cfgs"][ORDERS], demo["hours"][-1])["orders"]
    with open(Path(store.location(done.files[0].path)), "rb") as f:
        reader = fastavro.reader(f)
        fields = {fld["name"]: fld for fld in reader.writer_schema["fields"]}
        assert reader.codec == "snappy"
    assert fields["order_id"]["type"] == {"type": "string", "logicalType": "uuid"}
    assert fields["created_at"]["doc"].startswith("When the customer")
    assert fields["total"]["type"]["logicalType"] == "decimal"
    assert fields["_kafka_offset"]["type"] == "long"


def test_dead_letters_keep_reason_and_raw_bytes(demo):
    sent = {(s.partition, s.offset): s for s in demo["sent"].for_topic(demo["topics"][WEB]) if s.bad}
    dead = dead_rows(demo, WEB)
    assert set(dead) == set(sent)
    reasons = set()
    for key, row in dead.items():
        s = sent[key]
        assert row["value"] == s.value and row["key"] == s.key and row["topic"] == demo["topics"][WEB]
        assert row["reason"].startswith(s.bad), (row["reason"], s.bad)
        reasons.add(s.bad)
    assert reasons == {"bad magic byte", "unknown schema id", "corrupt body", "null value"}


def test_dead_letter_limit_fails_after_writing_them(make_topic, send, kafka, registry, spark, store):
    topic = make_topic(partitions=1)
    hour = floor_hour(utcnow()) - ONE_HOUR * 3
    send([(topic, 0, to_millis(hour + timedelta(minutes=1)), b"k", b"\x07garbage"),
          (topic, 0, to_millis(hour + timedelta(minutes=2)), b"k", frame(123456789, b"\x02"))])
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0, dead_letter_limit=0.4)
    with pytest.raises(DeadLetterLimitExceeded, match=r"2 of 2 records are dead letters") as failed:
        land(spark, store, registry, kafka, cfg, hour)
    kept = re.search(r"kept under (\S+)\.", str(failed.value)).group(1)
    manifest = store.read_json(f"{kept}/_MANIFEST.json")
    assert manifest["rows"] == 2 and manifest["by_reason"] == {"bad magic byte": 1, "unknown schema id": 1}
    assert sum(len(read_avro(store, f["path"])) for f in manifest["files"]) == 2
    assert not store.exists(done_file_path("d", "t", hour)), "no done file for a failed hour"


@pytest.fixture
def small_hour(make_topic, send, kafka, registry, spark, store):
    """One landed hour of two partitions: good records and one dead letter."""
    topic = make_topic(partitions=2)
    sid = register(registry.client(), f"{topic}-value", SIMPLE)
    hour = floor_hour(utcnow()) - ONE_HOUR * 3
    send([(topic, p, to_millis(hour + timedelta(minutes=m)), None, frame(sid, encode(SIMPLE, {"n": m})))
          for p in (0, 1) for m in range(10)] + [(topic, 0, to_millis(hour + timedelta(minutes=30)), None, b"\x05bad")])
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0, rows_per_task=4, dead_letter_limit=0.5)
    plan, result = land(spark, store, registry, kafka, cfg, hour)
    assert result.rows == 20 and result.dead_letters.rows == 1
    return cfg, plan, hour


def test_conservation_check_fails_when_what_it_guards_breaks(small_hour, store, spark, registry, kafka):
    cfg, plan, hour = small_hour
    assert check_landed_hour(store, cfg, plan).passed
    done = done_files(store, cfg, hour)["t"]
    landed, dead = done.files[0].path, done.dead_letters.files[0].path
    breakages = {
        "delete a landed file": (lambda: store.delete(landed), f"listed file {landed} does not exist"),
        "truncate a landed file": (lambda: Path(store.location(landed)).write_bytes(store.read_bytes(landed)[:-40]),
                                   f"{landed} is not a whole Avro file"),
        "drop a dead-letter file": (lambda: store.delete(dead), f"listed file {dead} does not exist"),
        "drop the done file": (lambda: store.delete(done_file_path("d", "t", hour)), "no done file"),
    }
    for what, (breaks, problem) in breakages.items():
        land(spark, store, registry, kafka, cfg, hour)  # whole again
        assert check_landed_hour(store, cfg, plan).passed, what
        breaks()
        verdict = check_landed_hour(store, cfg, plan)
        assert not verdict.passed, f"the check passed after: {what}"
        assert any(problem in p for p in verdict.problems), (what, verdict.problems)


def test_relanding_keeps_the_previous_hour_until_the_new_one_is_complete(small_hour, store, spark, kafka, monkeypatch):
    cfg, plan, hour = small_hour
    before = store.read_json(done_file_path("d", "t", hour))
    # The registry forgot the schema: every record is now a dead letter, over the limit.
    with pytest.raises(DeadLetterLimitExceeded, match="previous done files, if any, are untouched"):
        land_hour(lambda: spark, store, lambda sid: None, kafka.spark_options(), cfg, plan, "forgot")
    assert store.read_json(done_file_path("d", "t", hour)) == before
    assert check_landed_hour(store, cfg, plan).passed, "the previous complete hour is intact"

    # A successful re-land removes files no longer listed only after the new done file is in place.
    events = []
    real_write, real_delete = LocalStore.write_atomic, LocalStore.delete
    monkeypatch.setattr(LocalStore, "write_atomic",
                        lambda self, rel, data: (events.append(("write", rel)), real_write(self, rel, data))[1])
    monkeypatch.setattr(LocalStore, "delete", lambda self, rel: (events.append(("delete", rel)), real_delete(self, rel))[1])
    stale = f"{Path(before['files'][0]['path']).parent}/{cfg.topic}+0+d.t+1+00000000000000000000+00000000000000000001.avro"
    Path(store.location(stale)).write_bytes(b"an old attempt's file")
    land(spark, store, None, kafka, cfg, hour, fetch=lambda sid: json.dumps(SIMPLE))
    done_at = events.index(("write", done_file_path("d", "t", hour)))
    deleted = [i for i, (kind, rel) in enumerate(events) if kind == "delete" and rel.endswith(".avro")]
    assert deleted and min(deleted) > done_at, events
    assert not store.exists(stale)
    assert check_landed_hour(store, cfg, plan).passed


def test_relanding_and_crashes_give_the_same_files(demo, kafka, registry, spark, monkeypatch):
    store, cfg, hour = demo["store"], demo["cfgs"][ORDERS], demo["hours"][1]
    before = done_files(store, cfg, hour)["orders"]
    names_before = sorted(store.list(str(Path(before.files[0].path).parent), "*.avro"))
    assert len(names_before) > 1

    # A crash half way through publishing: some files moved, no new done file.
    real_move, moved = LocalStore.move, []

    def crashing_move(self, src, rel):
        if len(moved) == 2:
            raise OSError("simulated crash")
        moved.append(rel)
        real_move(self, src, rel)

    monkeypatch.setattr(LocalStore, "move", crashing_move)
    with pytest.raises(LandingError, match=r"publishing the hour failed \(OSError: simulated crash\)"):
        land(spark, store, registry, kafka, cfg, hour)
    monkeypatch.setattr(LocalStore, "move", real_move)
    assert done_files(store, cfg, hour)["orders"] == before, "the old done file still describes the hour"
    # Debris of an attempt that died without cleaning up is never listed.
    debris = Path(store.location(f"{Path(before.files[0].path).parent}/{cfg.topic}+0+shop.orders+1+0+9.avro"))
    debris.write_bytes(b"half a file")

    for _ in range(2):
        plan, result = land(spark, store, registry, kafka, cfg, hour)
        after = done_files(store, cfg, hour)["orders"]
        assert content_key(after) == content_key(before)
        assert sorted(store.list(str(Path(after.files[0].path).parent), "*.avro")) == names_before
        assert not debris.exists()
        for f in after.files:
            assert len(read_avro(store, f.path)) == f.rows
    assert not store.list(f"staging/{cfg.topic}/hour={hour_tag(hour)}"), "no staging left behind"


def test_offsets_deleted_after_freezing_fail_landing_clearly(make_topic, send, kafka, admin, store):
    topic = make_topic(partitions=1)
    hour = floor_hour(utcnow()) - ONE_HOUR * 3
    send([(topic, 0, to_millis(hour + timedelta(minutes=m)), None, b"x") for m in range(5)])
    cfg = TopicConfig(topic=topic, dataset="d", table="t", grace_minutes=0)
    with kafka.log_view() as log:
        plan, _ = freeze_slice(store, log, cfg, Hour(hour), utcnow())
    admin.delete_records([TopicPartition(topic, 0, 3)])[TopicPartition(topic, 0, 3)].result(timeout=30)
    with pytest.raises(LandingError, match=r"partition 0: offsets \[0, 3\) of hour .* deleted by retention"), \
            kafka.log_view() as log:
        check_still_in_kafka(log, plan)


def test_staging_left_by_killed_attempts_is_swept_after_a_day(small_hour, store, spark, registry, kafka):
    cfg, plan, hour = small_hour
    old, fresh = (f"staging/{cfg.topic}/hour={hour_tag(hour)}/{name}" for name in ("killed-2-days-ago", "running-now"))
    for rel in (old, fresh):
        store.write_atomic(f"{rel}/part-0.avro", b"half a file")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(Path(store.location(old)), (two_days_ago, two_days_ago))
    land(spark, store, registry, kafka, cfg, hour)
    assert not store.exists(old), "a killed attempt's staging outlived a day"
    assert store.exists(f"{fresh}/part-0.avro"), "a live attempt's staging was swept"
