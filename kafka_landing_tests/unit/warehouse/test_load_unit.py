"""The one load step (`load.load_unit`) owns the markers: it never refuses a unit for another unit's
failure, clears every hour a day load now holds (given-up ones included), refuses a spent quota only
until it refills, and clears an event marker naming content no done file has (a re-land that died
before its done file). Through the strict BigQuery fake; no services."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from kafka_landing.config import TopicConfig
from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff import markers
from kafka_landing.handoff.event_index import mark_event_partitions
from kafka_landing.handoff.manifests import DoneFile, content_sha
from kafka_landing.handoff.markers import Marks
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import done_file_path, hour_from_tag
from kafka_landing.warehouse.by_event.measures import settling
from kafka_landing.warehouse.load import LoadError, load_unit
from kafka_landing.warehouse.queue import tick as queue
from kafka_landing_tests.bigquery_support import bigquery_warehouse
from kafka_landing_tests.helpers import write_event_hour, write_hour

PROJECT, DS, T = "kl-unit", "shop", "t"
SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}]}
H13, H14 = "2026-01-31T13", "2026-01-31T14"


def no_spark():
    raise AssertionError("BigQuery loads start no Spark")


@pytest.fixture
def env(fake_bigquery):
    store, fake = fake_bigquery
    return store, fake, bigquery_warehouse(fake, store, PROJECT)


def land(store, hour, ids, partition=0, table=T):
    rel = write_hour(store, DS, table, hour, [(partition, 1, SCHEMA, [{"order_id": i} for i in ids])])
    markers.mark_pending(store, rel, store.read_bytes(rel))
    return markers.parse_done_path(rel)


def test_a_day_load_failing_because_another_hour_was_re_landed_does_not_refuse_the_hour_loaded(env):
    store, fake, wh = env
    h13, h14 = land(store, H13, ["a0", "a1"]), land(store, H14, ["b0"])
    old_b = [f["path"] for f in json.loads(store.read_bytes(h14.done_file))["files"]]
    run = fake._run

    def re_land_first(job):  # hour 14 re-lands with other files while hour 13's day job is queued
        fake._run = run
        land(store, H14, ["b0", "b9"], partition=1)
        for p in old_b:
            store.delete(p)
        run(job)

    fake._run = re_land_first
    with pytest.raises(LoadError) as failed:
        load_unit(wh, store, h13, no_spark)
    assert failed.value.transient  # a file replaced meanwhile: the next attempt reads the new done files
    sha13 = content_sha(store.read_bytes(h13.done_file))
    assert markers.refusal(store, h13, Marks({H13: sha13})) is None


def test_a_day_load_clears_every_hour_it_recorded_given_up_ones_included(env):
    store, fake, wh = env
    h13, h14 = land(store, H13, ["a0"]), land(store, H14, ["b0"])
    sha13 = content_sha(store.read_bytes(h13.done_file))
    assert markers.give_up(store, h13, Marks({H13: sha13}), sha13, "refused for hour 15's problem")
    load_unit(wh, store, h14, no_spark)  # the day's load holds hour 13 as it is now
    assert wh.loaded_sha(DS, T, H13) == sha13
    assert markers.list_pending(store) == [] and markers.list_pending(store, given_up=True) == []
    tables = queue.LandingHours({(DS, T)}, lambda u: True, wh.loaded_sha)
    assert queue.tick(store, tables, lambda loads: []).given_up == {}  # nothing warned about


def test_another_hours_unreadable_done_file_fails_the_day_without_refusing_the_hour_loaded(env):
    store, fake, wh = env
    h13, h14 = land(store, H13, ["a0"]), land(store, H14, ["b0"])
    store.write_atomic(h14.done_file, b"{not json")
    with pytest.raises(KafkaLandingError) as failed:
        load_unit(wh, store, h13, no_spark)
    assert "hour 2026-01-31T14" in str(failed.value) and failed.value.elsewhere
    sha13 = content_sha(store.read_bytes(h13.done_file))
    assert markers.refusal(store, h13, Marks({H13: sha13})) is None


def test_a_spent_quota_refuses_the_hour_until_it_refills_not_for_good(env):
    store, fake, wh = env
    land(store, H13, ["a0"])
    load_unit(wh, store, markers.parse_done_path(done_file_path(DS, T, hour_from_tag(H13))), no_spark)
    fake.max_load_jobs_per_day = len(fake.load_jobs.get((PROJECT, DS, T), []))  # the quota is used up
    h23 = land(store, "2026-02-01T23", ["c0"])
    with pytest.raises(LoadError) as failed:
        load_unit(wh, store, h23, no_spark)
    assert not failed.value.transient and failed.value.heals_after
    refused = markers.refusal(store, h23, Marks({h23.partition: content_sha(store.read_bytes(h23.done_file))}))
    assert refused is not None and refused.heals_at is not None and "quota" in refused.why.lower()
    assert refused.holds() and not refused.holds(datetime.fromisoformat(refused.heals_at))


EVENT_SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "created_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}]}
CFG = TopicConfig(topic="orders", dataset=DS, table="orders", event_time_field="created_at")


def test_an_event_marker_of_a_re_land_that_died_before_its_done_file_is_cleared_by_the_next_load(env):
    store, fake, wh = env
    when = datetime(2026, 1, 31, 13, tzinfo=timezone.utc)
    rel = write_event_hour(store, DS, "orders", H13, {H13: [{"order_id": "a", "created_at": when}]}, EVENT_SCHEMA,
                           topic="orders")
    unit = event_unit(DS, "orders", "2026-01-31")
    load_unit(wh, store, unit, no_spark, CFG)
    old = DoneFile.from_dict(json.loads(store.read_bytes(rel)))
    new = dataclasses.replace(old, attempt="re-land-2")
    mark_event_partitions(store, new, content_sha(new.to_bytes()), old, "day")  # then the re-land dies
    assert markers.marks_of(store, unit)
    ev = load_unit(wh, store, unit, no_spark, CFG)
    assert not markers.marks_of(store, unit)  # the partition can settle
    assert ev.manifest.version == 1 and not ev.new_version and ev.waiting == ()


def test_an_event_marker_of_a_publish_that_completed_stays_until_loaded(env):
    store, fake, wh = env
    when = datetime(2026, 1, 31, 13, tzinfo=timezone.utc)
    write_event_hour(store, DS, "orders", H13, {H13: [{"order_id": "a", "created_at": when}]}, EVENT_SCHEMA,
                     topic="orders")
    unit = event_unit(DS, "orders", "2026-01-31")
    load_unit(wh, store, unit, no_spark, CFG)
    write_event_hour(store, DS, "orders", H14, {H13: [{"order_id": "late", "created_at": when}]}, EVENT_SCHEMA,
                     topic="orders", first=2000)
    assert markers.marks_of(store, unit).hours == [H14]
    ev = load_unit(wh, store, unit, no_spark, CFG)
    assert ev.manifest.rows == 2 and not markers.marks_of(store, unit)


def test_an_event_load_reads_its_markers_before_and_under_their_lock_only(env, monkeypatch):
    """Before the load (what a refusal would name) and by the compare-and-delete under their lock,
    which answers those it left: the settling the asset shows reads them no more."""
    store, fake, wh = env
    when = datetime(2026, 1, 31, 13, tzinfo=timezone.utc)
    write_event_hour(store, DS, "orders", H13, {H13: [{"order_id": "a", "created_at": when}]}, EVENT_SCHEMA,
                     topic="orders")
    unit = event_unit(DS, "orders", "2026-01-31")
    reads, marks_of = [], markers.marks_of
    monkeypatch.setattr(markers, "marks_of", lambda store, u: reads.append(u) or marks_of(store, u))
    ev = load_unit(wh, store, unit, no_spark, CFG)
    settle = settling(store, ev.manifest, ev.waiting, CFG.settle_hours)
    assert reads == [unit, unit]
    assert (ev.cleared, ev.waiting, settle.settled) == (1, (), False)
