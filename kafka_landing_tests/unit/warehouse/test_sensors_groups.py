"""The done-file sensor's grouped requests as Dagster itself resolves them (the path the
sensor daemon takes, no stack needed): a range request targets the table's asset with a
single-run partition range, a lone hour its partition, and the per-tick cap counts runs."""

from __future__ import annotations

import sys
from datetime import datetime, timezone

from kafka_landing.handoff.markers import mark_pending
from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key, hour_tag
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.queue.runs import MEMBER_TAG_PREFIX
from kafka_landing_tests.sensor_ticks import DATASET, TABLE, daemon_tick, publish_hour


def test_consecutive_hours_resolve_to_one_range_run_and_a_lone_hour_to_its_partition(one_table_landing):
    now = floor_hour(datetime.now(timezone.utc))
    hours = [now - ONE_HOUR * i for i in (9, 8, 7, 5)]  # 9-7 consecutive, 5 alone
    for h in hours:
        publish_hour(one_table_landing, h)
    ranged, alone = daemon_tick().run_requests
    assert ranged.job_name == alone.job_name == "__ASSET_JOB"
    assert [k.path for k in ranged.asset_selection] == [["warehouse", DATASET, TABLE]]
    assert ranged.partition_key is None
    assert (ranged.tags["dagster/asset_partition_range_start"], ranged.tags["dagster/asset_partition_range_end"]) == (
        hour_key(hours[0]), hour_key(hours[2]))
    assert sorted(v.split("@")[0] for k, v in ranged.tags.items() if k.startswith(MEMBER_TAG_PREFIX)) == [
        hour_tag(h) for h in hours[:3]]
    assert alone.partition_key == hour_key(hours[3]) and alone.tags["dagster/partition"] == hour_key(hours[3])
    for req in (ranged, alone):
        assert req.tags["kafka_landing/redo_done_hours"] == "true"
        assert req.tags["kafka_landing/spark"] == "true" and req.tags["kafka_landing/table"] == f"{DATASET}.{TABLE}"


def test_the_cap_per_tick_counts_runs_not_hours(one_table_landing, monkeypatch):
    from kafka_landing.warehouse.queue import tick

    monkeypatch.setattr(tick, "MAX_REQUESTS_PER_TICK", 2)
    now = floor_hour(datetime.now(timezone.utc))
    for start in (30, 20, 10):  # three runs of five consecutive hours
        for i in range(5):
            publish_hour(one_table_landing, now - ONE_HOUR * (start - i))
    requests = daemon_tick().run_requests
    assert len(requests) == 2, "two runs, the oldest first"
    assert [r.tags["dagster/asset_partition_range_start"] for r in requests] == [
        hour_key(now - ONE_HOUR * 30), hour_key(now - ONE_HOUR * 20)]
    assert all(sum(k.startswith(MEMBER_TAG_PREFIX) for k in r.tags) == 5 for r in requests)


def test_a_reland_between_the_sensors_reads_keeps_its_marker(one_table_landing, monkeypatch):
    """The sensor reads a done file whose content is loaded and clears its marker; a re-land that
    writes new content and its marker right after that read must stay pending (review N6)."""
    from kafka_landing.handoff.markers import content_sha, list_pending, marks_of
    from kafka_landing.warehouse.iceberg import IcebergWarehouse

    hour = floor_hour(datetime.now(timezone.utc)) - 3 * ONE_HOUR
    rel = publish_hour(one_table_landing, hour)
    loaded = content_sha(one_table_landing.read_bytes(rel))
    monkeypatch.setattr(IcebergWarehouse, "loaded_sha", lambda self, d, t, h: loaded)
    newer = one_table_landing.read_bytes(rel).replace(b'"attempt": "a1"', b'"attempt": "a2"')
    real_read, relanded = LocalStore.read_bytes, []

    def read_then_reland(self, path):
        got = real_read(self, path)
        # the queue tick's read of the done file (LandingHours.examine -> read_done_file), not the reconciliation's
        by_sensor = (sys._getframe(1).f_code.co_name, sys._getframe(2).f_code.co_name) == ("read_done_file", "examine")
        if path == rel and by_sensor and not relanded:  # publish() of a re-land, just after the sensor's read
            relanded.append(True)
            self.write_atomic(rel, newer)
            mark_pending(self, rel, newer)
        return got

    monkeypatch.setattr(LocalStore, "read_bytes", read_then_reland)
    daemon_tick()
    assert relanded
    (th,) = list_pending(one_table_landing)
    assert marks_of(one_table_landing, th).by_hour.get(th.hour) == content_sha(newer), \
        "the re-land's marker was removed"


def test_ready_runs_are_held_back_while_the_sensors_last_run_waits_in_the_queue(one_table_landing, monkeypatch):
    """Held back, not lost: asked for at the next tick once no run of the sensor is queued, or once
    the queued one has waited HOLD_SECONDS (the queue may be stuck behind another table's load)."""
    from dagster import DagsterRun, DagsterRunStatus
    from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.utils import make_new_run_id

    from kafka_landing.warehouse import sensors
    from kafka_landing.warehouse.queue.runs import HOLD_SECONDS

    publish_hour(one_table_landing, floor_hour(datetime.now(timezone.utc)) - 3 * ONE_HOUR)

    def run(status: DagsterRunStatus, sensor: str = sensors.SENSOR_NAME) -> DagsterRun:
        origin = RemoteJobOrigin(RemoteRepositoryOrigin(GrpcServerCodeLocationOrigin("localhost", 1, location_name="l"),
                                                        "__repository__"), "__ASSET_JOB")  # a queued run has one
        return DagsterRun(job_name="__ASSET_JOB", run_id=make_new_run_id(), status=status,
                          tags={"dagster/sensor_name": sensor}, remote_job_origin=origin)

    held = daemon_tick([run(DagsterRunStatus.QUEUED)])
    assert not held.run_requests and "held back while the last one requested waits in the run queue" in held.skip_message
    assert len(daemon_tick([run(DagsterRunStatus.STARTED)]).run_requests) == 1, "it started: ask now"
    assert len(daemon_tick([run(DagsterRunStatus.QUEUED, "another_sensor")]).run_requests) == 1
    real = sensors._clock
    monkeypatch.setattr(sensors, "_clock", lambda: real() + HOLD_SECONDS + 1)
    assert len(daemon_tick([run(DagsterRunStatus.QUEUED)]).run_requests) == 1, "held at most HOLD_SECONDS"
