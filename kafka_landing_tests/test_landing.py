"""avro_landing against the real broker, registry and Spark: conservation, round
trip, dead letters, idempotence and crash safety."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import TopicPartition
from dagster import Failure

from kafka_landing.avro_landing.assets import check_still_in_kafka, schema_fetcher
from kafka_landing.demo.generate import ORDERS, WEB, demo_hours, generate
from kafka_landing.framing import frame
from kafka_landing.landing import DeadLetterLimitExceeded, land_hour
from kafka_landing.landing_store import LandingStore
from kafka_landing.manifests import DoneFile
from kafka_landing.naming import ONE_HOUR, done_file_path, floor_hour, hour_tag, parse_landing_file_name, to_millis
from kafka_landing.slices import freeze_slice
from kafka_landing.topic_config import Route, TopicConfig
from kafka_landing_tests.conftest import utcnow

HOURS = 3


def read_avro(store: LandingStore, rel: str) -> list[dict]:
    with open(store.path(rel), "rb") as f:
        return list(fastavro.reader(f))


def done_files(store: LandingStore, cfg: TopicConfig, hour) -> dict[str, DoneFile]:
    return {t: DoneFile.from_dict(store.read_json(done_file_path(cfg.dataset, t, hour))) for t in cfg.tables}


def land(spark, store, registry, kafka, cfg, hour, attempt=None):
    with kafka.log_view() as log:
        plan, _ = freeze_slice(store, log, cfg, hour, utcnow())
    return plan, land_hour(lambda: spark, store, schema_fetcher(registry), kafka.spark_options(), cfg, plan,
                           attempt or uuid.uuid4().hex[:8])


@pytest.fixture(scope="module")
def demo(bootstrap, registry_url, kafka, registry, spark, tmp_path_factory):
    """Demo data on fresh topics, every hour landed once."""
    suffix = uuid.uuid4().hex[:6]
    topics = {ORDERS: f"orders_{suffix}", WEB: f"web_{suffix}"}
    now = utcnow()
    sent = generate(bootstrap, registry_url, hours=HOURS, per_hour=150, now=now, topics=topics)
    store = LandingStore(tmp_path_factory.mktemp("landing"))
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


def hour_offsets(store: LandingStore, done: dict[str, DoneFile]) -> list[tuple[int, int]]:
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
    with open(store.path(done.files[0].path), "rb") as f:
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
    with pytest.raises(DeadLetterLimitExceeded, match=r"2 of 2 records are dead letters"):
        land(spark, store, registry, kafka, cfg, hour)
    manifest = store.read_json(f"dead_letters/{topic}/hour={hour_tag(hour)}/_MANIFEST.json")
    assert manifest["rows"] == 2 and manifest["by_reason"] == {"bad magic byte": 1, "unknown schema id": 1}
    assert sum(len(read_avro(store, f["path"])) for f in manifest["files"]) == 2
    assert not store.exists(done_file_path("d", "t", hour)), "no done file for a failed hour"


def test_relanding_and_crashes_give_the_same_files(demo, kafka, registry, spark, monkeypatch):
    store, cfg, hour = demo["store"], demo["cfgs"][ORDERS], demo["hours"][1]
    before = done_files(store, cfg, hour)["orders"]
    names_before = sorted(store.list(str(Path(before.files[0].path).parent), "*.avro"))
    assert len(names_before) > 1

    # A crash half way through publishing: some files moved, no new done file.
    real_move, moved = LandingStore.move, []

    def crashing_move(self, src, rel):
        if len(moved) == 2:
            raise OSError("simulated crash")
        moved.append(rel)
        real_move(self, src, rel)

    monkeypatch.setattr(LandingStore, "move", crashing_move)
    with pytest.raises(OSError, match="simulated crash"):
        land(spark, store, registry, kafka, cfg, hour)
    monkeypatch.setattr(LandingStore, "move", real_move)
    assert done_files(store, cfg, hour)["orders"] == before, "the old done file still describes the hour"
    # Debris of an attempt that died without cleaning up is never listed.
    debris = store.path(f"{Path(before.files[0].path).parent}/{cfg.topic}+0+shop.orders+1+0+9.avro")
    debris.write_bytes(b"half a file")

    for _ in range(2):
        plan, result = land(spark, store, registry, kafka, cfg, hour)
        after = done_files(store, cfg, hour)["orders"]
        assert after.content_key() == before.content_key()
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
        plan, _ = freeze_slice(store, log, cfg, hour, utcnow())
    admin.delete_records([TopicPartition(topic, 0, 3)])[TopicPartition(topic, 0, 3)].result(timeout=30)
    with pytest.raises(Failure, match=r"partition 0: offsets \[0, 3\) of hour .* deleted by retention"):
        check_still_in_kafka(kafka, plan)
