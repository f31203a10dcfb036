"""An hour landed again from its archive (its landing files and dead letters), after Kafka lost
its records, is the hour a landing from Kafka gives under the same config, record for record:
under the config it was landed with (the same files, the same done files), and under a new
routing and event-time field (every table and event hour as a landing of the same records from
Kafka under that config). On the demo topics: routing, an event-hour split, a schema change,
dead letters of every kind."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import time
import uuid
from pathlib import Path

import fastavro
import pytest
from confluent_kafka import TopicPartition
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kafka_landing.avro_landing.archive import ArchiveError, find_archive
from kafka_landing.avro_landing.conservation import check_landed_hour
from kafka_landing.avro_landing.job import HoursToLand, Sources, land_hours
from kafka_landing.avro_landing.registry import schema_fetcher
from kafka_landing.config import Route, TopicConfig
from kafka_landing.errors import LandingError
from kafka_landing.kafka_slices.freeze import freeze_slice
from kafka_landing.kafka_slices.plan import check_still_in_kafka
from kafka_landing.naming import Hour, dead_letter_manifest_path, done_file_path
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.conftest import utcnow
from kafka_landing.avro_landing.write import NothingWritten
from kafka_landing_tests.integration.test_splice_writer import SETTINGS
from kafka_landing_tests.integration.test_value_fidelity import schema_and_records
from kafka_landing_tools.demo.generate import ORDERS, PARTITIONS, WEB, demo_hours, generate

HOURS = 2
VOLATILE = ("attempt", "landed_at", "retired", "bytes", "crc32c")  # who landed it, when, and the random sync markers


def _configs(topics: dict[str, str]) -> tuple[list[TopicConfig], list[TopicConfig]]:
    """The config the hours were landed with, and a later one: another routing, another event time."""
    before = [
        TopicConfig(topic=topics[ORDERS], dataset="shop", table="orders", event_time_field="created_at",
                    grace_minutes=5, rows_per_task=9, dead_letter_limit=0.5),
        TopicConfig(topic=topics[WEB], dataset="web", grace_minutes=5, rows_per_task=13, dead_letter_limit=0.5,
                    route=Route(field="type", tables={"page_view": "page_views", "click": "clicks"},
                                default="other_events")),
    ]
    after = [
        dataclasses.replace(before[0], event_time_field=None),
        dataclasses.replace(before[1], route=Route(field="type", tables={"click": "clicks", "purchase": "purchases"},
                                                   default="rest"), event_time_field="occurred_at"),
    ]
    return before, after


def _land(spark, store, fetch, kafka_options, cfg, plans, archives=(), direct=True):
    got = land_hours(Sources(lambda: spark, kafka_options, fetch), store,
                     HoursToLand(cfg, plans, uuid.uuid4().hex[:8], archives=tuple(archives)), direct=direct)
    failed = {h: r for h, r in got.items() if isinstance(r, LandingError)}
    assert not failed, failed
    return got


@pytest.fixture(scope="module")
def archived(bootstrap, registry_url, kafka, registry, spark, admin, tmp_path_factory):
    """The demo hours landed from Kafka under the first config (`kafka`) and under the second
    (`reference`), then every record deleted from the topics."""
    suffix = uuid.uuid4().hex[:6]
    topics = {ORDERS: f"orders_{suffix}", WEB: f"web_{suffix}"}
    now = utcnow()
    generate(bootstrap, registry_url, hours=HOURS, per_hour=60, now=now, topics=topics)
    before, after = _configs(topics)
    kafka_store, reference = LocalStore(tmp_path_factory.mktemp("kafka")), LocalStore(tmp_path_factory.mktemp("ref"))
    fetch = schema_fetcher(registry)
    plans = {}
    for cfg, later in zip(before, after):
        with kafka.log_view() as log:
            plans[cfg.topic] = [freeze_slice(kafka_store, log, cfg, Hour(h), utcnow())[0] for h in demo_hours(now, HOURS)]
        _land(spark, kafka_store, fetch, kafka.spark_options(), cfg, plans[cfg.topic])
        for plan in plans[cfg.topic]:  # the reference reads the same frozen slices
            reference.write_json_atomic(f"slices/{cfg.topic}/hour={plan.hour}.json", kafka_store.read_json(
                f"slices/{cfg.topic}/hour={plan.hour}.json"))
        _land(spark, reference, fetch, kafka.spark_options(), later, plans[cfg.topic])
    # Retention takes every record of both topics.
    with kafka.log_view() as log:
        ends = [TopicPartition(t, p, log.watermarks(t, p)[1]) for k, t in topics.items() for p in range(PARTITIONS[k])]
    for tp, f in admin.delete_records(ends).items():
        f.result(timeout=30)
    return {"before": before, "after": after, "plans": plans, "kafka": kafka_store, "reference": reference,
            "fetch": fetch, "kafka_options": kafka.spark_options(), "kafka_resource": kafka}


def _copy(store: LocalStore, to: Path) -> LocalStore:
    shutil.copytree(store.root, to)
    return LocalStore(to)


def _records(store: LocalStore, folder: str) -> dict[str, list[dict]]:
    """{file: records} of the Avro files under `folder` (tables/ or dead_letters/)."""
    out = {}
    for path in sorted(Path(store.root, folder).rglob("*.avro")):
        with open(path, "rb") as f:
            out[str(path.relative_to(store.root))] = list(fastavro.reader(f))
    return out


def _stable(d):
    if isinstance(d, dict):
        return {k: _stable(v) for k, v in d.items() if k not in VOLATILE}
    if isinstance(d, list):
        return [_stable(v) for v in d]
    return d


def _replay(a, store, cfgs, direct=True):
    results = {}
    for cfg in cfgs:
        archives = [find_archive(store, plan) for plan in a["plans"][cfg.topic]]
        results[cfg.topic] = _land(a["_spark"], store, a["fetch"], {}, cfg, [x.plan for x in archives], archives,
                                   direct)
    return results


@pytest.fixture
def a(archived, spark):
    return {**archived, "_spark": spark}


def test_kafka_no_longer_holds_the_hours(a):
    with a["kafka_resource"].log_view() as log:
        for cfg in a["before"]:
            for plan in a["plans"][cfg.topic]:
                if plan.records:
                    with pytest.raises(LandingError, match="deleted by retention"):
                        check_still_in_kafka(log, plan)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "decoding"])
def test_an_hour_landed_again_from_its_archive_under_its_config_is_the_same_hour(a, tmp_path, direct):
    """Both ways of landing read the archive: straight into files in the JVM, and as rows."""
    replayed = _copy(a["kafka"], tmp_path / "replayed")
    results = _replay(a, replayed, a["before"], direct)
    for folder in ("tables", "dead_letters"):
        want, got = _records(a["kafka"], folder), _records(replayed, folder)
        assert want, f"the hours landed {folder}"
        assert sorted(got) == sorted(want), f"{folder}: the same file names"
        for name in want:
            assert got[name] == want[name], f"{name}: the same records in the same order"
    for cfg in a["before"]:
        for plan in a["plans"][cfg.topic]:
            for rel in [*(done_file_path(cfg.dataset, t, plan.hour) for t in cfg.tables),
                        dead_letter_manifest_path(cfg.topic, plan.hour)]:
                assert _stable(replayed.read_json(rel)) == _stable(a["kafka"].read_json(rel)), rel
            assert check_landed_hour(replayed, cfg, plan).passed
            r = results[cfg.topic][plan.hour]
            assert r.archived is not None and r.records_read == r.archived.records > 0


def test_a_new_routing_and_event_time_replayed_from_the_archive_equal_a_landing_from_kafka(a, tmp_path):
    replayed = _copy(a["kafka"], tmp_path / "replayed")
    _replay(a, replayed, a["after"])
    for cfg in a["after"]:
        for table in cfg.tables:
            folder = f"tables/{cfg.dataset}/{table}"
            want, got = _records(a["reference"], folder), _records(replayed, folder)
            assert want, f"{folder}: the new routing feeds it"
            assert got == want, f"{folder}: the same files, records and order as a landing from Kafka"
        for plan in a["plans"][cfg.topic]:
            for table in cfg.tables:
                rel = done_file_path(cfg.dataset, table, plan.hour)
                assert _stable(replayed.read_json(rel)) == _stable(a["reference"].read_json(rel)), rel
            assert check_landed_hour(replayed, cfg, plan).passed
    # The tables only the old routing fed no longer hold the hours: retired, 0 rows.
    web = a["after"][1]
    for plan in a["plans"][web.topic]:
        for table in ("page_views", "other_events"):
            done = replayed.read_json(done_file_path(web.dataset, table, plan.hour))
            assert done["rows"] == 0 and done["retired"], (table, done)
            assert not list(Path(replayed.root, f"tables/web/{table}/hour={plan.hour}").glob("*.avro"))
    # The event-time split moved from orders (none now) to web (`ts`): the same event files as from Kafka.
    assert _records(replayed, "events") == _records(a["reference"], "events")


def replay_killable(root: str, cfg_json: str, spark_url: str, registry_url: str) -> None:
    """A replay of every frozen hour of the config's topic under `root`, in a process of its own:
    what `KAFKA_LANDING_CRASH_AT` kills (python -c, from the test below)."""
    import json

    from kafka_landing.kafka_slices.freeze import load_frozen
    from kafka_landing.resources import SchemaRegistryResource, SparkResource

    raw = json.loads(cfg_json)
    cfg = TopicConfig(**{**raw, "route": Route(**raw["route"]) if raw["route"] else None})
    store = LocalStore(root)
    archives = [find_archive(store, plan) for plan in load_frozen(store, cfg.topic).values()]
    spark = SparkResource(remote=spark_url).spark_session
    _land(spark, store, schema_fetcher(SchemaRegistryResource(url=registry_url)), {}, cfg, [x.plan for x in archives],
          archives)


def test_a_replay_killed_at_each_step_then_replayed_again_equals_a_landing_from_kafka(a, tmp_path, stack,
                                                                                      registry_url):
    """SIGKILL at each crash point of a replay under the new routing (whose publish retires the old
    tables last), then the replay again, from the archive the killed one left: every table and dead
    letter as a landing of the same records from Kafka under that config."""
    import json
    import subprocess
    import sys

    from kafka_landing.crash_points import ENV_VAR, STEPS

    web = a["after"][1]
    steps = [s for s in STEPS if s.startswith("landing:")]
    cfg_json = json.dumps(dataclasses.asdict(web), default=str)
    runs = {}
    for step in steps:
        store = _copy(a["kafka"], tmp_path / step.replace(":", "_"))
        code = (f"from kafka_landing_tests.integration.test_archive_replay import replay_killable; "
                f"replay_killable({store.root!r}, {cfg_json!r}, {stack['spark']['url']!r}, {registry_url!r})")
        runs[step] = (store, subprocess.Popen([sys.executable, "-c", code], env={**os.environ, ENV_VAR: step},
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for step, (store, proc) in runs.items():
        out = proc.communicate(timeout=300)[0].decode(errors="replace")
        assert proc.returncode == -signal.SIGKILL, f"{step}: the replay was not killed there: {out[-3000:]}"
        _replay(a, store, [web])
        for folder in (f"tables/{web.dataset}", f"dead_letters/{web.topic}"):
            want = _records(a["reference"], folder)
            assert want and _records(store, folder) == want, f"{step}: {folder}"
        for plan in a["plans"][web.topic]:
            assert check_landed_hour(store, web, plan).passed, step


def test_a_replay_of_the_replay_changes_nothing(a, tmp_path):
    replayed = _copy(a["kafka"], tmp_path / "replayed")
    _replay(a, replayed, a["after"])
    once = {**_records(replayed, "tables"), **_records(replayed, "dead_letters")}
    _replay(a, replayed, a["after"])
    assert {**_records(replayed, "tables"), **_records(replayed, "dead_letters")} == once


def test_an_archive_missing_a_file_is_refused_naming_it(a, tmp_path):
    broken = _copy(a["kafka"], tmp_path / "broken")
    cfg = a["before"][1]
    plan = next(p for p in a["plans"][cfg.topic] if p.records)
    done = broken.read_json(done_file_path(cfg.dataset, "clicks", plan.hour))
    gone = done["files"][0]["path"]
    (Path(broken.root) / gone).unlink()
    with pytest.raises(ArchiveError, match=f"{re.escape(gone)}.*does not exist"):
        find_archive(broken, plan)


def test_an_archive_file_cut_short_fails_the_hours_naming_it(a, tmp_path):
    """A file that is there but cannot be read: the engine names it, nothing is published."""
    broken = _copy(a["kafka"], tmp_path / "broken")
    cfg = a["before"][1]
    plan = next(p for p in a["plans"][cfg.topic] if p.records)
    archive = find_archive(broken, plan)
    cut = Path(broken.root) / archive.files[0].path
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    done = {t: broken.read_json(done_file_path(cfg.dataset, t, plan.hour)) for t in cfg.tables}
    with pytest.raises(ArchiveError, match=f"{re.escape(archive.files[0].path)} cannot be read") as got:
        land_hours(Sources(lambda: a["_spark"], {}, a["fetch"]), broken,
                   HoursToLand(cfg, [archive.plan], uuid.uuid4().hex[:8], archives=(archive,)))
    assert "landing from the archive failed" in str(got.value) and "EOFException" in str(got.value), got.value
    assert {t: broken.read_json(done_file_path(cfg.dataset, t, plan.hour)) for t in cfg.tables} == done


def _delete(admin, topic: str, again: bool) -> None:
    """The topic deleted (and, `again`, created again, empty); deletion is asynchronous: wait for it."""
    from confluent_kafka.admin import NewTopic

    admin.delete_topics([topic])[topic].result(timeout=30)
    for _ in range(100):
        if not again:
            if topic not in admin.list_topics(timeout=10).topics:
                return
            time.sleep(0.2)
            continue
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
            return
        except Exception as exc:  # noqa: BLE001 - still marked for deletion: try again
            if "marked for deletion" not in str(exc) and "already exists" not in str(exc):
                raise
            time.sleep(0.2)
    raise AssertionError(f"{topic} could not be deleted (or created again)")


@pytest.mark.parametrize("loss", ["retention", "deleted", "recreated"])
def test_the_replay_job_reads_kafka_where_it_can_and_the_archive_where_it_cannot_and_re_drives_dead_letters(
        code_location, make_topic, send, registry, admin, monkeypatch, tmp_path, capsys, loss):
    """Two hours landed from Kafka, each with two records of a schema id the registry did not know
    yet (dead letters); the schema is then registered, and retention takes the first hour (or the
    topic is deleted, or deleted and created again: both hours gone). The replay job (source auto, as the UI's
    backfill of it) lands what Kafka lost from the archive and the rest from Kafka: every record a
    row, and each archived hour's story says two dead letters were re-driven."""
    from datetime import timedelta

    from dagster import DagsterInstance

    from kafka_landing.__main__ import main
    from kafka_landing.avro_landing.assets import landing_key
    from kafka_landing.avro_landing.framing import frame
    from kafka_landing_tests.helpers import materializations
    from kafka_landing.definitions import build_definitions, landing_job_name, replay_job_name
    from kafka_landing.naming import ONE_HOUR, floor_hour, to_millis
    from kafka_landing.warehouse.sensors import RANGE_END_TAG, RANGE_START_TAG
    from kafka_landing_tests.integration.test_landing import SIMPLE
    from kafka_landing_tools.demo.generate import encode, register

    topic = make_topic(partitions=1)
    root, _ = code_location({topic: {"dataset": "d", "table": "t", "dead_letter_limit": 0.9}}, grace_minutes=0)
    client = registry.client()
    sid = register(client, f"{topic}-value", SIMPLE)
    later = {"type": "record", "name": f"Later{uuid.uuid4().hex}", "fields": [{"name": "n", "type": "long"}]}
    next_id = register(client, f"{topic}-other", {**later, "name": f"Other{uuid.uuid4().hex}"}) + 1
    first = floor_hour(utcnow()) - ONE_HOUR * 3
    sent = []
    for h in range(2):
        for m in range(5):
            n = 10 * h + m
            sent.append((topic, 0, to_millis(first + ONE_HOUR * h + timedelta(minutes=m)), None,
                         frame(sid, encode(SIMPLE, {"n": n})) if m < 3 else frame(next_id, encode(later, {"n": n}))))
    send(sent)
    keys = [Hour(first).key, Hour(first + ONE_HOUR).key]
    tags = {RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[1]}
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    instance = DagsterInstance.get()

    def materialised(result) -> dict:
        assert result.success, [e.event_specific_data.error.message for e in result.all_events
                                if e.event_type_value == "STEP_FAILURE"]
        return {e.materialization.partition: e.materialization.metadata for e in result.get_asset_materialization_events()
                if e.asset_key.path[0] == "avro_landing"}

    landed = materialised(build_definitions().resolve_job_def(landing_job_name(topic)).execute_in_process(
        instance=instance, tags=tags, raise_on_error=False))
    assert [(landed[k]["dead_letters"].value, landed[k]["source"].value) for k in keys] == [(2, "kafka")] * 2
    assert register(client, f"{topic}-later", later) == next_id, "the registry gave the schema the id it was sent with"
    if loss == "retention":  # hour 1
        admin.delete_records([TopicPartition(topic, 0, 5)])[TopicPartition(topic, 0, 5)].result(timeout=30)
    else:
        _delete(admin, topic, again=loss == "recreated")
    second = "kafka" if loss == "retention" else "archive"

    gone = 1 if loss == "retention" else 2
    assert main(["replay", "--topic", topic, "--from", keys[0], "--to", keys[1], "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert f"{gone} frozen hour(s) whose offsets Kafka no longer holds in part: {gone} would be read from their " \
           "archive" in plan, plan
    # The UI's backfill of the replay job runs each hour with the job's config: `auto`.
    job = build_definitions().resolve_job_def(replay_job_name(topic))
    assert job.partitioned_config.get_run_config_for_partition_key(keys[0]) == {
        "ops": {f"avro_landing__{topic}": {"config": {"source": "auto"}}}}
    assert main(["replay", "--topic", topic, "--from", keys[0], "--to", keys[1]]) == 0
    out = capsys.readouterr().out
    assert f"{keys[0]}: from archive, 5 rows, 0 dead letters, 2 re-driven" in out, out
    assert f"{keys[1]}: from {second}, 5 rows, 0 dead letters" in out, out
    by_partition = materializations(DagsterInstance.get(), landing_key(topic))  # as the UI shows the CLI's run
    replayed = {k: by_partition[k][-1].asset_materialization.metadata for k in keys}

    story = {k: (replayed[k]["source"].value, replayed[k]["dagster/row_count"].value, replayed[k]["dead_letters"].value)
             for k in keys}
    assert story == {keys[0]: ("archive", 5, 0), keys[1]: (second, 5, 0)}
    assert replayed[keys[0]]["dead_letters_redriven"].value == 2
    assert replayed[keys[0]]["dead_letters_before"].value == {"unknown schema id": 2}
    store = LocalStore(str(root))
    for h, k in enumerate(keys):
        done = store.read_json(done_file_path("d", "t", Hour.from_key(k)))
        values = sorted(r["n"] for f in done["files"] for r in fastavro.reader(open(store.location(f["path"]), "rb")))
        assert values == [10 * h + m for m in range(5)]
        assert {f["schema_id"] for f in done["files"]} == {sid, next_id}


@settings(max_examples=10, **SETTINGS)
@given(case=schema_and_records(), data=st.data())
def test_the_archive_gives_back_every_landed_record_as_kafka_had_it(case, data, spark, tmp_path):
    """A property over every Avro type and its edge values, keys, headers and timestamps: the
    records the splice writer landed, read back by the archive source, are the values as produced
    (the Confluent frame and the body, byte for byte) with their keys, headers, timestamps,
    partitions and offsets, each landed record once."""
    from kafka_landing.avro_landing.contract import ARCHIVE_FORMAT, FIELD_SEP, ITEM_SEP, NUMBER_SEP, OPTION_SEGMENTS
    from kafka_landing.avro_landing.decode import decode_checked, frame_columns
    from kafka_landing.avro_landing.framing import frame
    from kafka_landing.avro_landing.route import classify
    from kafka_landing.avro_landing.write import write_good
    from kafka_landing_tests.integration.test_decode import topic_cfg
    from kafka_landing_tests.integration.test_splice_writer import HEADERS, KEYS, TIMESTAMPS, raw_frame
    from kafka_landing_tests.integration.test_value_fidelity import body

    schema, records = case
    sid = 7
    rows = [("t", data.draw(st.integers(0, 2)), offset, data.draw(TIMESTAMPS), data.draw(KEYS), data.draw(HEADERS),
             frame(sid, body(schema, r))) for offset, r in enumerate(records)]
    cfg = topic_cfg("t")
    classified = classify(decode_checked(frame_columns(raw_frame(spark, rows)), sid, schema, "t"), cfg, "t", sid,
                          schema, [])
    store = LocalStore(str(tmp_path / uuid.uuid4().hex[:8]))
    try:
        staged = write_good(classified, cfg, sid, schema, store, "staging")
    except NothingWritten:
        staged = []
    assume(staged)  # some record landed
    landed = {(s.file.partition, o) for s in staged for o in _offsets(store.location(s.src))}
    segments = [FIELD_SEP.join([NUMBER_SEP.join(map(str, (s.file.partition, s.file.first_offset,
                                                           s.file.last_offset + 1))), str(sid), store.location(s.src)])
                for s in staged]
    got = spark.read.format(ARCHIVE_FORMAT).option(OPTION_SEGMENTS, ITEM_SEP.join(segments)).load().collect()
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted(landed), "each landed record once"
    sent = {(p, o): (ts, key, headers, value) for _t, p, o, ts, key, headers, value in rows}
    for r in got:
        ts, key, headers, value = sent[(r["partition"], r["offset"])]
        assert bytes(r["value"]) == value, f"offset {r['offset']}: the value as produced"
        assert (r["_kl_ms"], None if r["key"] is None else bytes(r["key"])) == (ts, key)
        assert (None if r["headers"] is None else [(h["key"], None if h["value"] is None else bytes(h["value"]))
                                                   for h in r["headers"]]) == headers


def _offsets(path: str) -> list[int]:
    """The file's offsets, read as a plain long beside every other field skipped (no value converted)."""
    import json

    from kafka_landing.avro_types import strip_logical_types

    with open(path, "rb") as f:
        writer = strip_logical_types(json.loads(fastavro.reader(f).metadata["avro.schema"]))
    reader = {**writer, "fields": [{"name": "_kafka_offset", "type": "long"}]}
    with open(path, "rb") as f:
        return [rec["_kafka_offset"] for rec in fastavro.reader(f, reader_schema=reader)]
