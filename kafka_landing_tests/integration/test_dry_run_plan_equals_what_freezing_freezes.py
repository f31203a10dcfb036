"""The dry-run plan against the real broker: it equals what freezing the same hours in order
freezes, it writes nothing, and the `plan` command prints it (or exits 2 on bad arguments)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from kafka_landing.config import TopicConfig
from kafka_landing_tools.devstack import ROOT
from kafka_landing.kafka_slices.dry_run import FROZEN, PLANNED, TopicHistory, dry_run
from kafka_landing.kafka_slices.freeze import freeze_slice, load_frozen
from kafka_landing.naming import ONE_HOUR, Hour, floor_hour, hour_key, hour_tag, to_millis
from kafka_landing_tests.conftest import utcnow


def tree(root) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")} if root.exists() else {}


def produce_hours(send, topic, first, n):
    recs = []
    for h in range(n):
        for p in (0, 1):
            for m in range(p, 3 + h + p):  # a different count per hour and partition
                recs.append((topic, p, to_millis(first + ONE_HOUR * h + timedelta(minutes=7 * m)), None, b"x"))
    send(recs)


def test_dry_run_equals_the_slices_frozen_later_and_writes_nothing(make_topic, send, kafka, store):
    topic = make_topic(partitions=2)
    cfg = TopicConfig(topic=topic, dataset="ds", table="tbl", grace_minutes=5, rows_per_task=4)
    now = utcnow()
    first = floor_hour(now) - ONE_HOUR * 5
    hours = [Hour(first).plus(i) for i in range(4)]
    produce_hours(send, topic, first, 4)
    with kafka.log_view() as log:
        freeze_slice(store, log, cfg, hours[0], now)  # one hour already frozen
        before = tree(Path(store.root))
        rows = dry_run(cfg, hours[0], hours[-1], utcnow(), log, TopicHistory(store, load_frozen(store, topic)))
        assert tree(Path(store.root)) == before, "the dry run wrote to the landing root"
        assert [r.state for r in rows] == [FROZEN, PLANNED, PLANNED, PLANNED]
        assert [r.hour for r in rows] == hours
        assert [r.records for r in rows] == [2 * (3 + h) for h in range(4)]
        for h, row in zip(hours, rows):
            frozen, _ = freeze_slice(store, log, cfg, h, utcnow())
            assert frozen.partitions == row.plan.partitions
            assert frozen.tasks == row.plan.tasks


def test_the_plan_says_which_frozen_offsets_kafka_no_longer_holds(make_topic, send, kafka, admin, store):
    """Retention (here: DeleteRecords) takes the first hour and part of the second after both
    froze: the plan names those offsets per partition; the third hour Kafka still holds."""
    from confluent_kafka import TopicPartition

    from kafka_landing.kafka_slices.dry_run import format_table

    topic = make_topic(partitions=2)
    cfg = TopicConfig(topic=topic, dataset="ds", table="tbl", grace_minutes=5, rows_per_task=4)
    first = floor_hour(utcnow()) - ONE_HOUR * 5
    hours = [Hour(first).plus(i) for i in range(3)]
    produce_hours(send, topic, first, 3)  # partition 0: 3, 4, 5 records an hour; partition 1: 3, 4, 5 too
    with kafka.log_view() as log:
        for h in hours:
            freeze_slice(store, log, cfg, h, utcnow())
    frozen = load_frozen(store, topic)
    [p0] = [p for p in frozen[hours[1]].partitions if p.partition == 0]
    middle = p0.start + 2
    done = admin.delete_records([TopicPartition(topic, 0, middle)])
    done[TopicPartition(topic, 0, middle)].result(timeout=30)

    with kafka.log_view() as log:
        rows = dry_run(cfg, hours[0], hours[-1], utcnow(), log, TopicHistory(store, frozen))

    [h0p0] = [p for p in frozen[hours[0]].partitions if p.partition == 0]
    assert [r.gone for r in rows] == [((0, h0p0.start, h0p0.end),), ((0, p0.start, middle),), ()]
    assert f"Kafka no longer holds [{p0.start}, {middle})" in format_table(rows)
    assert "2 frozen hour(s) whose offsets Kafka no longer holds" in format_table(rows)


def run_cli(*args, env):
    return subprocess.run([sys.executable, "-m", "kafka_landing", "plan", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_plan_command(make_topic, send, bootstrap, tmp_path):
    topic = make_topic(partitions=2)
    first = floor_hour(utcnow()) - ONE_HOUR * 4
    produce_hours(send, topic, first, 3)
    config = tmp_path / "topics.yaml"
    config.write_text(f"topics:\n  {topic}:\n    dataset: ds\n    table: tbl\n    grace_minutes: 5\n"
                      f"    first_hour: {hour_key(first + ONE_HOUR)}\n")
    landing_root = tmp_path / "landing"
    env = {**os.environ, "KAFKA_LANDING_TOPICS_CONFIG": str(config), "KAFKA_LANDING_ROOT": str(landing_root),
           "KAFKA_LANDING_WAREHOUSE_ROOT": str(tmp_path / "wh"), "KAFKA_BOOTSTRAP_SERVERS": bootstrap}

    out = run_cli("--topic", topic, "--from", hour_key(first), "--to", hour_key(first + ONE_HOUR * 2), env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:6] == ["hour", "state", "partition", "start", "end", "records"]
    assert sum(line.startswith(hour_tag(first + ONE_HOUR)) and "would freeze" in line for line in lines) == 2
    assert "3 hours: 0 frozen, 3 would freeze (24 records)" in out.stdout
    assert "1 before the topic's first hour" in out.stdout  # the config starts the topic an hour later
    early = [line for line in lines if line.startswith(hour_tag(first))]
    assert early and all("move first_hour earlier" in line for line in early), lines
    assert tree(landing_root) == {}

    bad = run_cli("--topic", topic, "--from", hour_key(first + ONE_HOUR), "--to", hour_key(first), env=env)
    assert bad.returncode == 2 and "after its end" in bad.stderr and hour_key(first) in bad.stderr
    bad = run_cli("--topic", topic, "--from", "yesterday", "--to", hour_key(first), env=env)
    assert bad.returncode == 2 and "'yesterday' is not an hour" in bad.stderr
    bad = run_cli("--topic", "nope", "--from", hour_key(first), "--to", hour_key(first), env=env)
    assert bad.returncode == 2 and "no topic 'nope'" in bad.stderr and topic in bad.stderr


def test_plan_backfill_job_records_the_plan_on_the_slices_asset(make_topic, send, kafka, tmp_path):
    from kafka_landing.kafka_slices.assets import slice_key
    from kafka_landing.kafka_slices.jobs import plan_backfill
    from kafka_landing.resources import LandingResource
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    topic = make_topic(partitions=2)
    first = floor_hour(utcnow()) - ONE_HOUR * 4
    produce_hours(send, topic, first, 2)
    config = tmp_path / "topics.yaml"
    config.write_text(f"topics:\n  {topic}:\n    dataset: ds\n    table: tbl\n    grace_minutes: 5\n")
    landing = LandingResource(landing_root=str(tmp_path / "landing"), topics_config=str(config))
    result = plan_backfill.execute_in_process(
        run_config={"ops": {"plan_backfill_op": {"config": {
            "topic": topic, "from_hour": hour_key(first), "to_hour": hour_key(first + ONE_HOUR)}}}},
        resources={"kafka": kafka, "landing": landing, "warehouse": IcebergWarehouseResource(root=str(tmp_path / "wh"))},
    )
    assert result.success
    [obs] = [e.event_specific_data.asset_observation for e in result.all_events
             if e.event_type_value == "ASSET_OBSERVATION"]
    assert obs.asset_key == slice_key(topic)
    assert obs.metadata["would_freeze"].value == 2 and obs.metadata["records_to_read"].value == 6 + 8
    assert (obs.metadata["from_archive"].value, obs.metadata["stale_against_config"].value) == (0, [])  # none landed
    assert f"| {hour_tag(first + ONE_HOUR)} | would freeze | 1 |" in obs.metadata["plan"].value
    assert tree(tmp_path / "landing") == {}

    bad = plan_backfill.execute_in_process(
        run_config={"ops": {"plan_backfill_op": {"config": {
            "topic": topic, "from_hour": hour_key(first + ONE_HOUR), "to_hour": hour_key(first)}}}},
        resources={"kafka": kafka, "landing": landing, "warehouse": IcebergWarehouseResource(root=str(tmp_path / "wh"))},
        raise_on_error=False,
    )
    assert not bad.success
    assert "after its end" in str(bad.failure_data_for_node("plan_backfill_op").error)


def test_plan_command_reads_secrets_from_their_env_vars(tmp_path):
    """The CLI's resources hold EnvVars; it must use the values (here a GCP key without a private
    key: the account named shows it was read), say which landing root failed, and never print
    the key."""
    config = tmp_path / "topics.yaml"
    config.write_text("topics:\n  t:\n    dataset: ds\n    table: tbl\n    first_hour: 2026-11-01-00:00\n")
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env.update({"KAFKA_LANDING_TOPICS_CONFIG": str(config), "KAFKA_LANDING_ROOT": "gs://kafka-landing-prod/landing",
                "NO_GCE_CHECK": "True", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
                "KAFKA_LANDING_GCP_CREDENTIALS": '{"type": "service_account", "client_email": '
                                                 '"lander@proj.iam.gserviceaccount.com", "private_key_id": "secret-id-123"}'})
    out = run_cli("--topic", "t", "--from", "2026-11-20-10:00", "--to", "2026-11-20-11:00", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error: landing root gs://kafka-landing-prod/landing:" in out.stderr
    assert "key given for lander@proj.iam.gserviceaccount.com could not be loaded" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "secret-id-123" not in out.stdout + out.stderr
