"""Warehouse loads grouped by the done-file sensor, on a real Dagster instance with real
loads: a table's consecutive landed hours load in one run (a single-run partition range),
every hour of it; a failed group is retried and then given up hour by hour; a re-landed
hour is reloaded alone, and hours rewritten by another tool reload even though the
instance holds no newer upstream materialisation; a run starts Spark once for the
Iceberg warehouse and never for BigQuery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import yaml
from dagster import AssetKey, DagsterInstance

from kafka_landing.avro_landing.framing import frame
from kafka_landing.definitions import (
    build_definitions,
    build_resources,
    landing_job_name,
)
from kafka_landing_tools.demo.generate import encode, register
from kafka_landing.handoff.markers import content_sha
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, hour_tag, to_millis
from kafka_landing.warehouse.assets import warehouse_key
from kafka_landing.warehouse.queue.runs import MAX_ATTEMPTS
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import table_rows
from kafka_landing_tests.integration.test_sensor import (  # noqa: F401 - fixtures
    DATASET,
    TABLE,
    avro_file,
    done_body,
    hours_of,
    keys,
    members_of,
    publish,
    roots,
    run,
    warnings_logged,
    write_avro,
    write_done,
)
from kafka_landing_tests.sensor_ticks import tick

KEY = warehouse_key(DATASET, TABLE)


def rows_per_hour(warehouse: Path, dataset: str = DATASET, table: str = TABLE) -> dict[str, int]:
    """Rows of each hour of a table, read from the table (not from our load records); none before its first load."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        rows = table_rows(warehouse, dataset, table)
    except NoSuchTableError:
        return {}
    return {h: int(n) for h, n in sorted(rows["hour"].value_counts().items())}


def materialised(inst, key: AssetKey = KEY) -> dict[str, int]:
    """How many times each hour of the table was materialised on the instance."""
    counts: dict[str, int] = {}
    for rec in inst.fetch_materializations(key, limit=1000).records:
        counts[rec.partition_key] = counts.get(rec.partition_key, 0) + 1
    return counts


def loaded_sha(warehouse: Path, hour: str) -> str | None:
    path = warehouse / DATASET / TABLE / "_loads" / f"hour={hour}.json"
    return json.loads(path.read_text())["sha256"] if path.exists() else None


# --- landed by kafka_landing, loaded in one run -------------------------------------------------

SCHEMA = {"type": "record", "name": "Ev", "fields": [{"name": "id", "type": "long"}]}


def test_hours_landed_by_kafka_landing_load_in_one_run_that_starts_spark_once(
        make_topic, send, registry, spark, tmp_path, monkeypatch):
    topic = make_topic(partitions=2)
    config = tmp_path / "topics.yaml"
    config.write_text(yaml.safe_dump({"defaults": {"grace_minutes": 5},
                                      "topics": {topic: {"dataset": "grp", "table": "events"}}}))
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(config))
    monkeypatch.setenv("KAFKA_LANDING_ROOT", str(tmp_path / "landing"))
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(tmp_path / "warehouse"))
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "iceberg")  # rows_per_hour reads its table
    sid = register(registry.client(), f"{topic}-value", SCHEMA)
    first = floor_hour(utcnow()) - ONE_HOUR * 6
    hours = [first + ONE_HOUR * i for i in range(4)]
    sent = {hour_tag(h): 3 + i for i, h in enumerate(hours)}  # a different count per hour
    send([(topic, n % 2, to_millis(h + timedelta(minutes=1 + n)), None, frame(sid, encode(SCHEMA, {"id": 100 * i + n})))
          for i, h in enumerate(hours) for n in range(sent[hour_tag(h)])])
    defs = build_definitions()
    home = tmp_path / "dagster_home"
    home.mkdir()
    with DagsterInstance.local_temp(str(home)) as inst:
        landed = defs.resolve_job_def(landing_job_name(topic)).execute_in_process(
            instance=inst, resources=build_resources(),
            tags={"dagster/asset_partition_range_start": hour_key(hours[0]),
                  "dagster/asset_partition_range_end": hour_key(hours[-1])})
        assert landed.success

        requested = tick(defs, inst)
        assert len(requested.run_requests) == 1, "four consecutive hours of one table: one run"
        req = requested.run_requests[0]
        assert hours_of(req) == [hour_key(h) for h in hours]
        assert req.tags["kafka_landing/redo_done_hours"] == "true" and req.tags["kafka_landing/spark"] == "true"
        out = run_as_a_run_worker(req, home, tmp_path / "spark_events")
        assert out["success"] and out["checks_passed"]
        assert len(list((tmp_path / "spark_events").iterdir())) == 1, "one Spark application for the four hours"
        assert rows_per_hour(tmp_path / "warehouse", "grp", "events") == sent, "every hour of the range, all its rows"
        assert materialised(inst, warehouse_key("grp", "events")) == {hour_key(h): 1 for h in hours}
        (loaded_run,) = [r for r in inst.get_runs() if r.tags.get("dagster/run_key") == req.run_key]
        assert (loaded_run.tags["dagster/asset_partition_range_start"],
                loaded_run.tags["dagster/asset_partition_range_end"]) == (hour_key(hours[0]), hour_key(hours[-1]))

        assert not tick(defs, inst, cursor=requested.cursor).run_requests
        assert not tick(defs, inst).run_requests, "a restarted sensor (no cursor) asks for nothing loaded"


# --- failures, re-lands, other tools --------------------------------------------------------------

def test_a_failed_group_is_retried_then_given_up_hour_by_hour(roots, instance, spark, warnings_logged):  # noqa: F811
    landing, warehouse = roots()
    defs = build_definitions()
    hours = [floor_hour(utcnow()) - ONE_HOUR * (9 - i) for i in range(5)]
    entries = {}
    for i, h in enumerate(hours):
        entries[i] = avro_file(landing, h, 10 * i, 2, write=i not in (1, 2))  # hours 1 and 2: files not there yet
        publish(landing, h, done_body(h, [entries[i]]))
    rel = {i: f"tables/{DATASET}/{TABLE}/hour={hour_tag(h)}/_DONE.json" for i, h in enumerate(hours)}

    first = tick(defs, instance)
    assert [hours_of(r) for r in first.run_requests] == [[hour_key(h) for h in hours]]
    assert not run(defs, instance, first.run_requests[0]).success
    assert set(rows_per_hour(warehouse)) == {hour_tag(hours[i]) for i in (0, 3, 4)}, "the good hours loaded anyway"

    second = tick(defs, instance, cursor=first.cursor)
    assert [hours_of(r) for r in second.run_requests] == [[hour_key(hours[1]), hour_key(hours[2])]]
    assert second.run_requests[0].run_key.endswith("#attempt2") and second.run_requests[0].run_key not in keys(first)
    assert not run(defs, instance, second.run_requests[0]).success

    # The last attempt is taken alone: one hour cannot use up another's.
    third = tick(defs, instance, cursor=second.cursor)
    assert sorted(r.tags["kafka_landing/done_file"] for r in third.run_requests) == [rel[1], rel[2]]
    assert {r.tags["kafka_landing/load_attempt"] for r in third.run_requests} == {str(MAX_ATTEMPTS)}
    write_avro(landing / entries[2]["path"], 20, 2)  # hour 2's file arrives; hour 1's never does
    outcomes = {r.tags["kafka_landing/done_file"]: run(defs, instance, r).success for r in third.run_requests}
    assert outcomes == {rel[1]: False, rel[2]: True}

    warnings_logged.clear()
    quiet = tick(defs, instance, cursor=third.cursor, log=warnings_logged)
    assert not quiet.run_requests and "1 given up" in quiet.skip_reason.skip_message
    covering = [r.run_id for r in instance.get_runs() if rel[1] in members_of(r.tags)]
    assert len(covering) == MAX_ATTEMPTS
    (warning,) = [m for m in warnings_logged.messages() if rel[1] in m]
    assert f"finished {MAX_ATTEMPTS} times without loading it" in warning and all(i in warning for i in covering)
    assert materialised(instance) == {hour_key(hours[i]): 1 for i in (0, 2, 3, 4)}, "each hour loaded once"
    assert rows_per_hour(warehouse) == {hour_tag(hours[i]): 2 for i in (0, 2, 3, 4)}


def test_a_relanded_hour_in_a_loaded_range_is_requested_alone_and_other_tools_rewrites_reload(
        roots, instance, spark):  # noqa: F811
    landing, warehouse = roots()
    defs = build_definitions()
    hours = [floor_hour(utcnow()) - ONE_HOUR * (9 - i) for i in range(5)]
    for i in (0, 1, 2, 4):  # hour 3 not landed: a gap
        publish(landing, hours[i], done_body(hours[i], [avro_file(landing, hours[i], 10 * i, 3)]))
    first = tick(defs, instance)
    assert sorted(hours_of(r) for r in first.run_requests) == [
        [hour_key(h) for h in hours[:3]], [hour_key(hours[4])]], "a gap: two runs"
    for req in first.run_requests:
        assert run(defs, instance, req).success
    before = rows_per_hour(warehouse)
    assert before == {hour_tag(hours[i]): 3 for i in (0, 1, 2, 4)}

    # Re-landed by kafka_landing: new content and marker for hour 1 only -> hour 1 alone.
    relanded = publish(landing, hours[1], done_body(hours[1], [avro_file(landing, hours[1], 10, 3)], attempt="a2"))
    again = tick(defs, instance, cursor=first.cursor)
    assert [hours_of(r) for r in again.run_requests] == [[hour_key(hours[1])]]
    assert again.run_requests[0].run_key == f"{relanded}@{content_sha((landing / relanded).read_bytes())[:16]}"
    assert run(defs, instance, again.run_requests[0]).success
    assert rows_per_hour(warehouse) == before
    assert not tick(defs, instance, cursor=again.cursor).run_requests

    # Rewritten by another tool (no marker, no materialisation upstream on this instance) for
    # hours 0-2, loaded before: the sensor's range redoes them, though Dagster thinks them done.
    new = {}
    for i in (0, 1, 2):
        body = done_body(hours[i], [avro_file(landing, hours[i], 50 + 10 * i, 4)], attempt="other-tool")
        new[hour_tag(hours[i])] = content_sha((landing / write_done(landing, hours[i], body)).read_bytes())
    other = tick(defs, instance)
    assert [hours_of(r) for r in other.run_requests] == [[hour_key(h) for h in hours[:3]]]
    assert run(defs, instance, other.run_requests[0]).success
    assert {h: loaded_sha(warehouse, h) for h in new} == new, "every hour of the range loaded again"
    assert rows_per_hour(warehouse) == {**before, **{h: 4 for h in new}}
    assert not tick(defs, instance).run_requests


# --- Spark: once per run for Iceberg, never for BigQuery -----------------------------------------

RUN_IN_A_FRESH_PROCESS = """
import json, sys
from dagster import AssetKey, DagsterInstance, RunRequest
from dagster._core.instance.ref import InstanceRef
from kafka_landing.definitions import build_definitions
from kafka_landing_tools.demo.loads import run_load_request

req = json.loads(sys.argv[1])
request = RunRequest(run_key=req["run_key"], partition_key=req["partition_key"], tags=req["tags"],
                     asset_selection=[AssetKey(k) for k in req["assets"]])
with DagsterInstance.from_ref(InstanceRef.from_dir(req["home"])) as instance:
    result = run_load_request(build_definitions(), request, instance, raise_on_error=False)
from pyspark import SparkContext
print(json.dumps({"success": result.success,
                  "checks_passed": all(ev.passed for ev in result.get_asset_check_evaluations()),
                  "spark_running": SparkContext._active_spark_context is not None}))
"""


def run_as_a_run_worker(req, home: Path, event_logs: Path) -> dict:
    """Run a load request in a new Python process, as a run worker would, on a classic Spark
    (where starting one is what costs) with its event log on: every Spark application (session)
    the run starts leaves one log in `event_logs`."""
    event_logs.mkdir(exist_ok=True)
    env = {**os.environ, "SPARK_DRIVER_MEMORY": "1g", "KAFKA_LANDING_SPARK": "classic",
           "PYSPARK_SUBMIT_ARGS": f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{event_logs} "
                                  "pyspark-shell"}
    arg = json.dumps({"run_key": req.run_key, "partition_key": req.partition_key, "tags": dict(req.tags),
                      "assets": [k.path for k in req.asset_selection], "home": str(home)})
    done = subprocess.run([sys.executable, "-c", RUN_IN_A_FRESH_PROCESS, arg], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_bigquery_run_never_starts_spark_nor_takes_a_spark_slot(gcs_bucket, gcs_client, tmp_path, monkeypatch):
    from kafka_landing.handoff.markers import mark_pending
    from kafka_landing.store.gcs import GcsStore
    from kafka_landing_tests.bigquery_fake import FakeBigQuery

    fake = FakeBigQuery(lambda uri: gcs_client.bucket(uri[5:].split("/", 1)[0]).blob(uri[5:].split("/", 1)[1])
                        .download_as_bytes())
    fake.start()
    try:
        config = tmp_path / "topics.yaml"
        config.write_text(yaml.safe_dump({"defaults": {"grace_minutes": 5},
                                          "topics": {"sensor.events": {"dataset": DATASET, "table": TABLE}}}))
        for k, v in {"KAFKA_LANDING_TOPICS_CONFIG": str(config), "KAFKA_LANDING_ROOT": f"gs://{gcs_bucket}/landing",
                     "KAFKA_LANDING_WAREHOUSE": "bigquery", "KAFKA_LANDING_BIGQUERY_PROJECT": "kl-groups",
                     "KAFKA_LANDING_BIGQUERY_LOCATION": "US", "BIGQUERY_EMULATOR_HOST": fake.url}.items():
            monkeypatch.setenv(k, v)
        store = GcsStore(f"gs://{gcs_bucket}/landing", client=gcs_client)
        hours = [floor_hour(utcnow()) - ONE_HOUR * (6 - i) for i in range(3)]
        local = tmp_path / "files"
        for i, h in enumerate(hours):  # the files and done file as landing writes them, in the bucket
            entry = avro_file(local, h, 10 * i, 2 + i)
            store.write_atomic(entry["path"], (local / entry["path"]).read_bytes())
            rel = f"tables/{DATASET}/{TABLE}/hour={hour_tag(h)}/_DONE.json"
            content = json.dumps(done_body(h, [entry])).encode()
            store.write_atomic(rel, content)
            mark_pending(store, rel, content)
        defs = build_definitions()
        (tmp_path / "dagster_home").mkdir()
        with DagsterInstance.local_temp(str(tmp_path / "dagster_home")) as inst:
            (req,) = tick(defs, inst).run_requests
            assert hours_of(req) == [hour_key(h) for h in hours]
            assert "kafka_landing/spark" not in req.tags, "a BigQuery load must not wait for a Spark slot"
            assert req.tags["kafka_landing/redo_done_hours"] == "true"
            out = run_as_a_run_worker(req, tmp_path / "dagster_home", tmp_path / "spark_events")
            assert out == {"success": True, "checks_passed": True, "spark_running": False}
            assert list((tmp_path / "spark_events").iterdir()) == [], "no Spark application started"
            days: dict[str, int] = {}
            for i, h in enumerate(hours):
                days[h.strftime("%Y%m%d")] = days.get(h.strftime("%Y%m%d"), 0) + 2 + i
            assert fake.partition_counts("kl-groups", DATASET, TABLE) == days
            assert len(fake.job_ids("kl-groups")) == len(days), "one free load job per day: its hours met it (409)"
            assert not tick(defs, inst).run_requests
    finally:
        fake.stop()
