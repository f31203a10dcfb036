"""The sensors' world: a sensor tick as the daemon evaluates it, the warnings it logs, and done files
that say nothing but their hour (all a sensor reads).

- `evaluate`: one tick of a sensor on given resources (`local_resources`: a test folder's landing root
  and Iceberg warehouse); `tick`: of a code location's sensor, on the resources the environment
  configures; `daemon_tick`: of the done-file sensor, resolved against the definitions as the daemon does.
- `Warnings`: a log handler keeping the messages of the warnings a tick logs.
- `empty_done_file`, `publish_empty`: a done file listing no rows, published with its pending marker.
- `one_table_landing` (a fixture; load this module as a plugin, as the root conftest does) and
  `publish_hour`: a code location of one topic into one Iceberg table, and its hours.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path

import pytest
from dagster import DagsterInstance, build_sensor_context

from kafka_landing.handoff.markers import content_sha, mark_pending
from kafka_landing.naming import done_file_path, hour_tag
from kafka_landing.resources import LandingResource
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.resources import IcebergWarehouseResource
from kafka_landing.warehouse.sensors import SENSOR_NAME

# --- a tick ----------------------------------------------------------------------------------------


class Warnings(logging.Handler):
    """The messages of the warnings logged to it, in order."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def local_resources(root: Path) -> dict:
    """The landing root `root`/landing and the Iceberg warehouse `root`/warehouse, as a sensor's resources."""
    return {"landing": LandingResource(landing_root=str(root / "landing")),
            "warehouse": IcebergWarehouseResource(root=str(root / "warehouse"))}


def evaluate(sensor, instance, resources: dict, cursor: str | None = None, log: logging.Handler | None = None):
    """One tick of the sensor definition `sensor` from `cursor`: its result. What it logs goes to `log` too."""
    with build_sensor_context(instance=instance, resources=resources, cursor=cursor) as ctx:
        if log is not None:
            ctx.log.addHandler(log)
        return sensor(ctx)


def tick(defs, instance, cursor: str | None = None, log: logging.Handler | None = None, *, sensor: str = SENSOR_NAME):
    """One tick of the code location's sensor named `sensor` (the done-file sensor unless told), on the
    landing and warehouse resources the environment configures."""
    from kafka_landing.definitions import build_resources

    res = build_resources()
    return evaluate(defs.resolve_sensor_def(sensor), instance,
                    {"landing": res["landing"], "warehouse": res["warehouse"]}, cursor, log)


def daemon_tick(runs=()):
    """One tick of the done-file sensor as the daemon evaluates it, on a fresh instance holding `runs`
    (DagsterRuns): its run requests resolved against the definitions and resources the environment
    configures."""
    from kafka_landing.definitions import build_definitions, build_resources

    defs, res = build_definitions(), build_resources()
    with DagsterInstance.ephemeral() as instance, build_sensor_context(
            instance=instance, definitions=defs, resources={"landing": res["landing"], "warehouse": res["warehouse"]}
    ) as ctx:
        for run in runs:
            instance.add_run(run)
        return defs.resolve_sensor_def(SENSOR_NAME).evaluate_tick(ctx)


# --- done files with no rows -----------------------------------------------------------------------


def empty_done_file(dataset: str, table: str, hour: datetime, attempt: str = "a1", over: dict | None = None, *,
                    topic: str = "t", manifest: str = "m") -> bytes:
    """A done file of `hour` listing no rows, its slice manifest `manifest`; `over`: fields replaced."""
    return json.dumps({
        "topic": topic, "dataset": dataset, "table": table, "hour": hour_tag(hour), "rows": 0, "schema_ids": [],
        "files": [], "dead_letters": {"rows": 0, "by_reason": {}, "files": []},
        "slice": {"manifest": manifest, "records": 0, "partitions": []}, "topic_records_read": 0,
        "offsets_without_record": 0, "attempt": attempt, "landed_at": "2026-01-01T00:00:00+00:00", "version": 1,
        **(over or {})}).encode()


def publish_empty(store: LocalStore, dataset: str, table: str, hour: datetime, attempt: str = "a1",
                  over: dict | None = None, *, topic: str = "t", manifest: str = "m") -> tuple[str, str]:
    """`empty_done_file` as publish writes it: the done file, then its pending marker; its path and content sha."""
    rel = done_file_path(dataset, table, hour)
    content = empty_done_file(dataset, table, hour, attempt, over, topic=topic, manifest=manifest)
    store.write_atomic(rel, content)
    mark_pending(store, rel, content)
    return rel, content_sha(content)


# --- a code location of one table ------------------------------------------------------------------

TOPIC, DATASET, TABLE = "unit.events", "ux", "events"


@pytest.fixture
def one_table_landing(code_location) -> LocalStore:
    """A code location of one topic, TOPIC, into the Iceberg table DATASET.TABLE: its landing root."""
    landing, _ = code_location({TOPIC: {"dataset": DATASET, "table": TABLE}})
    return LocalStore(landing)


def publish_hour(store: LocalStore, hour: datetime, attempt: str = "a1") -> str:
    """An empty done file of TOPIC's `hour` (its slice manifest where planning writes it) and its pending
    marker: the done file's path."""
    rel, _ = publish_empty(store, DATASET, TABLE, hour, attempt, topic=TOPIC,
                           manifest=f"slices/{TOPIC}/hour={hour_tag(hour)}.json")
    return rel
