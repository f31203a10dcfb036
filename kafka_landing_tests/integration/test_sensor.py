"""The done-file sensor on a real Dagster instance, with real loads (Spark): no done
file is missed whatever its mtime, consecutive ready hours load in one run, failed loads are asked for again (boundedly
and visibly), duplicate and restarted ticks request nothing twice, a re-land
during a load stays pending, done files contradicting their path are never
requested, and a tick over a year of hours of 20 tables stays cheap."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import fastavro
import pytest
from dagster import RunRequest, materialize

from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing_tools.demo.loads import run_load_request
from kafka_landing.naming import (
    ONE_HOUR,
    floor_hour,
    hour_key,
    hour_tag,
    landing_file_name,
    OffsetRange,
)
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.jobs import RETIRE_JOB
from kafka_landing.warehouse.load import load_done_file
from kafka_landing.warehouse.queue.runs import table_slot
from kafka_landing.warehouse.sensors import RETIRED_SENSOR_NAME
from kafka_landing_tests.conftest import defs_hours, utcnow
from kafka_landing_tests.helpers import table_rows
from kafka_landing_tests.sensor_ticks import tick

TOPIC, DATASET, TABLE = "sensor.events", "sx", "events"
SCHEMA = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}


@pytest.fixture
def roots(tmp_path, monkeypatch, code_location):
    """A topic config of one table (or `tables` tables), and landing and warehouse roots of the test's own."""

    def _configure(base: Path = tmp_path, tables: int = 0, first_hour: str | None = None) -> tuple[Path, Path]:
        own = {"first_hour": first_hour} if first_hour else {}
        topics = ({TOPIC: {"dataset": DATASET, "table": TABLE, **own}} if not tables else
                  {f"perf.t{i:02d}": {"dataset": "perf", "table": f"t{i:02d}"} for i in range(tables)})
        code_location(topics)
        monkeypatch.setenv("KAFKA_LANDING_ROOT", str(base / "landing"))  # a base of the test's choosing
        monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(base / "warehouse"))
        return base / "landing", base / "warehouse"

    return _configure


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def clear(self):
        self.records.clear()

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def warnings_logged():
    """Warnings the sensor logs to its tick's log (pass it to `tick`)."""
    return Records()


def hours_ago(n: int) -> datetime:
    return floor_hour(utcnow()) - ONE_HOUR * n


def avro_file(landing: Path, hour: datetime, first: int, rows: int, write: bool = True) -> dict:
    """One landing file of the table's hour, as landing writes them, and its done-file entry."""
    name = landing_file_name(OffsetRange(TOPIC, 0, first, first + rows - 1), DATASET, TABLE, 1)
    rel = f"tables/{DATASET}/{TABLE}/hour={hour_tag(hour)}/{name}"
    if write:
        write_avro(landing / rel, first, rows)
    return {"path": rel, "rows": rows, "bytes": 0, "partition": 0, "first_offset": first,
            "last_offset": first + rows - 1, "schema_id": 1}


def write_avro(path: Path, first: int, rows: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        fastavro.writer(f, SCHEMA, [{"id": i} for i in range(first, first + rows)], codec="snappy")


def done_body(hour: datetime, files: list[dict], dataset=DATASET, table=TABLE, attempt="a1", **over) -> dict:
    rows = sum(f["rows"] for f in files)
    return {
        "topic": TOPIC, "dataset": dataset, "table": table, "hour": hour_tag(hour), "rows": rows, "schema_ids": [1],
        "files": files, "dead_letters": {"rows": 0, "by_reason": {}, "files": []},
        "slice": {"manifest": f"slices/{TOPIC}/hour={hour_tag(hour)}.json", "records": rows, "partitions": []},
        "topic_records_read": rows, "offsets_without_record": 0, "attempt": attempt, "landed_at": utcnow().isoformat(),
        "version": 1, **over,
    }


def write_done(landing: Path, hour: datetime, body: dict, mtime: float | None = None, dataset=DATASET,
               table=TABLE) -> str:
    """A done file as another tool writes it: no pending marker; `mtime` as `rsync -t` or `cp -p` keep it."""
    rel = f"tables/{dataset}/{table}/hour={hour_tag(hour)}/_DONE.json"
    p = landing / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(body))
    if mtime is not None:
        os.utime(p, (mtime, mtime))
    return rel


def publish(landing: Path, hour: datetime, body: dict) -> str:
    """A done file as kafka_landing's publish() writes it: the done file, then its pending marker."""
    from kafka_landing.handoff.markers import mark_pending

    rel = write_done(landing, hour, body)
    mark_pending(LocalStore(landing), rel, (landing / rel).read_bytes())
    return rel


def run(defs, instance, req):
    """Run a request as the daemon would: the table's asset and its conservation check, its hour or
    hour range, tagged with the run key."""
    return run_load_request(defs, req, instance, raise_on_error=False)


def hours_of(req) -> list[str]:
    """The hours (partition keys) a load request covers: its partition, or its partition range."""
    if req.partition_key:
        return [req.partition_key]
    return defs_hours(req)


def members_of(tags) -> set[str]:
    """The done files a load request (or run) covers, from its member tags."""
    from kafka_landing.warehouse.queue.runs import MEMBER_TAG_PREFIX

    def done_file(v: str) -> str:  # <hour>@<sha> of the run's one table, or <dataset>.<table>/<hour>@<sha>
        name, _, member = v.rpartition("/")
        dataset, table = (name or tags["kafka_landing/table"]).split(".")
        return f"tables/{dataset}/{table}/hour={member.split('@')[0]}/_DONE.json"

    return {done_file(v) for k, v in tags.items() if k.startswith(MEMBER_TAG_PREFIX)}


def failure_message(result) -> str:
    return next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error.message


def table_ids(warehouse: Path) -> list[int]:
    """The ids the table holds, read from the table; none before its first load."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return sorted(table_rows(warehouse, DATASET, TABLE)["id"].tolist())
    except NoSuchTableError:
        return []


def keys(result) -> list[str]:
    return sorted(r.run_key for r in result.run_requests or [])


def test_a_done_file_older_than_everything_seen_is_still_loaded(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    h1, h0 = hours_ago(3), hours_ago(4)
    publish(landing, h1, done_body(h1, [avro_file(landing, h1, 100, 5)]))
    first = tick(defs, instance)
    assert [r.partition_key for r in first.run_requests] == [hour_key(h1)]
    assert run(defs, instance, first.run_requests[0]).success

    # Copied in later by another tool that keeps timestamps (rsync -t, cp -p): an mtime of 2001, no marker.
    old = datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp()
    write_done(landing, h0, done_body(h0, [avro_file(landing, h0, 0, 3)]), mtime=old)
    second = tick(defs, instance, cursor=first.cursor)
    assert [r.partition_key for r in second.run_requests] == [hour_key(h0)]
    assert run(defs, instance, second.run_requests[0]).success
    assert table_ids(warehouse) == [0, 1, 2, 100, 101, 102, 103, 104]
    assert not tick(defs, instance, cursor=second.cursor).run_requests


def test_hours_before_the_tables_first_hour_are_not_requested_and_say_why(roots, instance, warnings_logged):
    """A table shares its topic's hours: a done file of an earlier hour (written by another tool)
    is no partition of the table, so it is named in a warning, not requested."""
    landing, _ = roots(first_hour=hour_key(hours_ago(3)))
    defs = build_definitions()
    early, ok = hours_ago(5), hours_ago(3)
    publish(landing, early, done_body(early, [avro_file(landing, early, 0, 2)]))
    publish(landing, ok, done_body(ok, [avro_file(landing, ok, 2, 2)]))
    result = tick(defs, instance, log=warnings_logged)
    assert [r.partition_key for r in result.run_requests] == [hour_key(ok)]
    assert any(f"hour {hour_key(early)} is not a partition of warehouse/{DATASET}/{TABLE} (before its topic's first "
               "hour" in m for m in warnings_logged.messages()), warnings_logged.messages()


def test_a_failed_load_is_requested_again_until_it_loads(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    h = hours_ago(3)
    entry = avro_file(landing, h, 0, 4, write=False)  # a tool that writes the done file before its data
    rel = publish(landing, h, done_body(h, [entry]))

    first = tick(defs, instance)
    assert len(first.run_requests) == 1
    failed = run(defs, instance, first.run_requests[0])
    assert not failed.success and f"{entry['path']} does not exist" in failure_message(failed)

    again = tick(defs, instance, cursor=first.cursor)
    assert keys(again) == [f"{first.run_requests[0].run_key}#attempt2"], "a failed load is requested again, new key"
    assert again.run_requests[0].tags["kafka_landing/done_file"] == rel
    write_avro(landing / entry["path"], 0, 4)
    assert run(defs, instance, again.run_requests[0]).success
    assert table_ids(warehouse) == [0, 1, 2, 3]
    assert not tick(defs, instance, cursor=again.cursor).run_requests
    assert not tick(defs, instance).run_requests


def test_retries_are_bounded_and_the_give_up_is_visible_until_fixed(roots, instance, spark, warnings_logged):
    from kafka_landing.warehouse.queue.runs import MAX_ATTEMPTS

    landing, warehouse = roots()
    defs = build_definitions()
    h = hours_ago(3)
    entry = avro_file(landing, h, 0, 2, write=False)
    rel = publish(landing, h, done_body(h, [entry]))
    cursor, attempts = None, []
    for _ in range(MAX_ATTEMPTS):
        result = tick(defs, instance, cursor)
        cursor = result.cursor
        assert len(result.run_requests) == 1
        attempts.append(result.run_requests[0].tags["kafka_landing/load_attempt"])
        assert not run(defs, instance, result.run_requests[0]).success
    assert attempts == [str(a) for a in range(1, MAX_ATTEMPTS + 1)]
    for _ in range(2):  # every later tick: nothing requested, and said so
        warnings_logged.clear()
        result = tick(defs, instance, cursor, log=warnings_logged)
        assert not result.run_requests
        assert "1 given up" in result.skip_reason.skip_message
        assert any(rel in m and f"finished {MAX_ATTEMPTS} times without loading it" in m
                   for m in warnings_logged.messages())
    # Fixed, then materialised by hand (no run key): the marker goes, the sensor is quiet.
    write_avro(landing / entry["path"], 0, 2)
    from kafka_landing_tools.demo.loads import load_run_defs
    from kafka_landing.warehouse.assets import warehouse_key

    assert materialize(load_run_defs(defs, [warehouse_key(DATASET, TABLE)]), partition_key=hour_key(h),
                       resources=build_resources(), instance=instance).success
    warnings_logged.clear()
    result = tick(defs, instance, cursor, log=warnings_logged)
    assert not result.run_requests and "0 given up" in result.skip_reason.skip_message
    assert not [m for m in warnings_logged.messages() if rel in m]
    assert table_ids(warehouse) == [0, 1]


def test_duplicate_and_restarted_ticks_request_nothing_twice_and_a_reland_requests_a_reload(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    hours = [hours_ago(5), hours_ago(4), hours_ago(3)]
    for i, h in enumerate(hours):
        publish(landing, h, done_body(h, [avro_file(landing, h, 10 * i, 3)]))
    first = tick(defs, instance)
    assert [hours_of(r) for r in first.run_requests] == [[hour_key(h) for h in hours]], "consecutive hours: one run"
    # A duplicate tick before the runs exist asks for the same run keys: Dagster launches each once.
    assert keys(tick(defs, instance, cursor=first.cursor)) == keys(first)
    for req in first.run_requests:
        assert run(defs, instance, req).success
    assert not tick(defs, instance, cursor=first.cursor).run_requests, "a duplicate tick after the runs"
    assert not tick(defs, instance).run_requests, "a restarted sensor (no cursor) reloads nothing"
    assert not list((landing / "pending_loads").rglob("*.json")), "each load cleared its marker"

    # Re-landed: new content, a new marker, one new load, same rows.
    relanded = publish(landing, hours[1], done_body(hours[1], [avro_file(landing, hours[1], 10, 3)], attempt="a2"))
    reload = tick(defs, instance)
    assert [r.tags["kafka_landing/done_file"] for r in reload.run_requests] == [relanded]
    assert not set(keys(reload)) & set(keys(first))
    assert run(defs, instance, reload.run_requests[0]).success
    assert table_ids(warehouse) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    assert not tick(defs, instance, cursor=reload.cursor).run_requests


class RelandDuringLoad(LocalStore):
    """Re-lands the hour (new done file, new marker) right after the load has read the old one."""

    def __init__(self, root, hour, body):
        super().__init__(root)
        self.hour, self.body, self.fired = hour, body, False

    def read_bytes(self, rel):
        content = super().read_bytes(rel)
        if rel.endswith("_DONE.json") and not self.fired:
            self.fired = True
            publish(Path(self.root), self.hour, self.body)
        return content


def test_a_reland_during_a_load_stays_pending(roots, instance, spark):
    from kafka_landing.handoff.markers import content_sha

    landing, warehouse = roots()
    defs = build_definitions()
    h = hours_ago(3)
    rel = publish(landing, h, done_body(h, [avro_file(landing, h, 0, 2)]))
    old = (landing / rel).read_bytes()
    store = RelandDuringLoad(landing, h, done_body(h, [avro_file(landing, h, 0, 2)], attempt="a2"))
    result = load_done_file(build_resources()["warehouse"].backend(store), store, rel, lambda: spark)
    assert result.done_sha256 == content_sha(old) and store.fired
    reload = tick(defs, instance)
    assert len(reload.run_requests) == 1, "the re-land's marker survived the load of the older content"
    assert reload.run_requests[0].tags["kafka_landing/done_sha256"] == content_sha((landing / rel).read_bytes())
    assert run(defs, instance, reload.run_requests[0]).success
    assert not tick(defs, instance).run_requests


@pytest.mark.parametrize("case", ["dataset", "hour", "other_hour_file", "dotdot_file", "absolute_file"])
def test_a_done_file_contradicting_its_path_is_never_requested(roots, instance, spark, warnings_logged, case):
    landing, warehouse = roots()
    defs = build_definitions()
    h = hours_ago(3)
    files = [avro_file(landing, h, 0, 2)]
    other = avro_file(landing, h - ONE_HOUR, 50, 2)  # a real file of the hour before
    body = {
        "dataset": lambda: done_body(h, files, dataset="shop"),
        "hour": lambda: {**done_body(h, files), "hour": hour_tag(h - ONE_HOUR)},
        "other_hour_file": lambda: done_body(h, [*files, other]),
        "dotdot_file": lambda: done_body(h, [*files, {**other, "path": f"tables/{DATASET}/{TABLE}/hour={hour_tag(h)}"
                                                                           f"/../hour={hour_tag(h - ONE_HOUR)}/x.avro"}]),
        "absolute_file": lambda: done_body(h, [*files, {**other, "path": str(landing / other["path"])}]),
    }[case]()
    field = {"dataset": "'dataset'", "hour": "'hour'"}.get(case, "'files[1].path'")
    rel = publish(landing, h, body)
    result = tick(defs, instance, log=warnings_logged)
    assert not result.run_requests
    assert any(rel in m and field in m for m in warnings_logged.messages())
    # And a load asked for by hand refuses it, naming the done file and the field; nothing is loaded.
    from kafka_landing_tools.demo.loads import load_run_defs
    from kafka_landing.warehouse.assets import warehouse_key

    failed = materialize(load_run_defs(defs, [warehouse_key(DATASET, TABLE)]), partition_key=hour_key(h),
                         resources=build_resources(), instance=instance, raise_on_error=False)
    assert not failed.success
    message = failure_message(failed)
    assert rel in message and field in message and "Nothing was loaded" in message
    assert table_ids(warehouse) == []


# --- a year of hours, 20 tables --------------------------------------------------------------

def build_history(landing: Path, warehouse: Path, tables: int, hours: list[datetime], unloaded: int) -> set[str]:
    """Done files for every (table, hour), plain os calls; the warehouse's load records for
    all but the last `unloaded` hours of each table, whose done files carry a pending marker
    (as publish leaves them). Returns the done files not loaded."""
    from kafka_landing.handoff.markers import content_sha, mark_pending

    store, pending = LocalStore(landing), set()
    for i in range(tables):
        table = f"t{i:02d}"
        loads = warehouse / "perf" / table / "_loads"
        os.makedirs(loads)
        for j, h in enumerate(hours):
            tag = hour_tag(h)
            rel = f"tables/perf/{table}/hour={tag}/_DONE.json"
            body = json.dumps(done_body(h, [], dataset="perf", table=table, topic=f"perf.{table}",
                                        landed_at="2026-01-01T00:00:00+00:00")).encode()
            os.makedirs(landing / os.path.dirname(rel))
            fd = os.open(landing / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, body)
            os.close(fd)
            if j < len(hours) - unloaded:
                fd = os.open(loads / f"hour={tag}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, json.dumps({"done_file": rel, "sha256": content_sha(body), "rows": 0}).encode())
                os.close(fd)
            else:
                mark_pending(store, rel, body)
                pending.add(rel)
    return pending


@pytest.fixture
def fast_dir(tmp_path):
    """175,000 small files: on tmpfs when there is one. This machine's ext4 is mounted with
    `discard`, where deleting them takes minutes; a tick reads them from the page cache either way.
    Deleting them takes seconds even there: an `rm` left running does it while the next tests run."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else tmp_path
    d = base / f"kafka_landing_sensor_{uuid.uuid4().hex[:8]}"
    d.mkdir()
    yield d
    subprocess.run(["sh", "-c", 'rm -rf "$0" </dev/null >/dev/null 2>&1 &', str(d)], check=True)


def reconciled(cursor: str | None) -> int:
    """How many hours the reconciliation has checked, by its cursor."""
    tables = json.loads(cursor)["reconcile"]["tables"] if cursor else {}
    return sum(b - a + 1 for t in tables.values() for a, b in t["hours"])


def test_a_tick_over_a_year_of_hours_of_20_tables_stays_cheap(roots, instance, fast_dir):
    from kafka_landing.warehouse import sensors

    landing, warehouse = roots(fast_dir, tables=20)
    last = floor_hour(utcnow() - timedelta(minutes=5)) - ONE_HOUR
    hours = [last - ONE_HOUR * i for i in reversed(range(8760))]
    pending = build_history(landing, warehouse, 20, hours, unloaded=5)
    assert sum(1 for _ in (landing / "tables").glob("*/*/hour=*/_DONE.json")) == 20 * 8760
    defs = build_definitions()

    cursor = None
    for i in range(3):  # a restarted sensor (no cursor), then two more ticks with its cursor
        started = time.monotonic()
        result = tick(defs, instance, cursor)
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"tick {i} took {elapsed:.1f} s over 8,760 hours x 20 tables"
        requested = [members_of(r.tags) for r in result.run_requests]
        assert set().union(*requested) == pending, "exactly the loads not done, none of the 175,100 loaded hours"
        # The 20 tables' 5 hours: one run per group of tables with distinct slots, each table once.
        slots = Counter(table_slot("perf", f"t{i:02d}") for i in range(20))
        assert len(requested) == max(slots.values()), "tables of the same hours share runs"
        assert sum(len(m) for m in requested) == 100 and all(len(m) % 5 == 0 for m in requested)
        assert reconciled(result.cursor) == reconciled(cursor) + sensors.RECONCILE_PER_TICK, \
            "the reconciliation moves on, reading no done file twice"
        cursor = result.cursor


def run_retire(defs, instance, req):
    """Run a retired-hours request as the daemon would: its job, config, tags and run key."""
    from kafka_landing.warehouse.queue.runs import RUN_KEY_TAG

    return defs.resolve_job_def(req.job_name or RETIRE_JOB).execute_in_process(
        run_config=req.run_config, instance=instance, raise_on_error=False,
        tags={**req.tags, RUN_KEY_TAG: req.run_key, "dagster/sensor_name": RETIRED_SENSOR_NAME})


def test_an_hour_a_routing_change_retired_is_emptied_in_the_warehouse(roots, instance, spark, code_location):
    """Review N8, the warehouse half: the topic now feeds another table, so re-landing the hour
    retired the old table's done file (empty, `retired`, marked pending). The old table is in no
    topic config, so no asset loads it: the retired-hours sensor requests `retire_hours`, which
    empties the hour, once; a done file of an unconfigured table that is not retired is left alone."""
    landing, warehouse = roots()
    h, other = hours_ago(3), hours_ago(4)
    defs = build_definitions()
    publish(landing, h, done_body(h, [avro_file(landing, h, 0, 4)]))
    publish(landing, other, done_body(other, [avro_file(landing, other, 10, 2)]))
    for req in tick(defs, instance).run_requests:
        assert run(defs, instance, req).success
    assert table_ids(warehouse) == [0, 1, 2, 3, 10, 11]

    # The routing changed and hour h was re-landed: publish retired the old table's hour.
    code_location({TOPIC: {"dataset": DATASET, "table": "events_v2"}})
    shutil.rmtree(landing / f"tables/{DATASET}/{TABLE}/hour={hour_tag(h)}")
    rel = publish(landing, h, done_body(h, [], schema_ids=[], retired="routing changed: re-landed by attempt a2"))
    defs = build_definitions()
    assert not [r for r in tick(defs, instance).run_requests or [] if TABLE in r.run_key]

    first = tick(defs, instance, sensor=RETIRED_SENSOR_NAME)
    assert [r.tags["kafka_landing/done_file"] for r in first.run_requests] == [rel]
    assert run_retire(defs, instance, first.run_requests[0]).success
    assert table_ids(warehouse) == [10, 11]  # the retired hour is gone, the hour never re-landed stays
    again = tick(defs, instance, cursor=first.cursor, sensor=RETIRED_SENSOR_NAME)
    assert not again.run_requests
    assert not (landing / "pending_loads" / DATASET / TABLE / f"hour={hour_tag(h)}.json").exists()

    # A job run asked to retire a done file that is not retired refuses it, naming it.
    other_rel = f"tables/{DATASET}/{TABLE}/hour={hour_tag(other)}/_DONE.json"
    refused = run_retire(defs, instance, RunRequest(run_key="by-hand", job_name=RETIRE_JOB, run_config={
        "ops": {"retire_hours_op": {"config": {"done_files": [other_rel]}}}}))
    assert not refused.success and "is not retired" in failure_message(refused)
    assert table_ids(warehouse) == [10, 11]
