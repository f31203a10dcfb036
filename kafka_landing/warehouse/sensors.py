"""The done-file sensor: each done file requests exactly one load of its
(table, hour). The run key is the done file's identity and content, so a
duplicate tick or a restarted sensor requests nothing twice, and a re-landed
hour (a new done file) requests a reload. Done files written by anything that
follows the layout are picked up too."""

import hashlib
import json

from dagster import AssetKey, DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from kafka_landing.naming import DONE_FILE_GLOB, DONE_FILE_RE, hour_from_tag, hour_key
from kafka_landing.resources import LandingResource

SENSOR_NAME = "done_file_sensor"


def done_run_key(rel: str, content: bytes) -> str:
    return f"{rel}@{hashlib.sha256(content).hexdigest()[:16]}"


def build_done_file_sensor(tables: dict[tuple[str, str], AssetKey]):
    @sensor(
        name=SENSOR_NAME,
        asset_selection=list(tables.values()),
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description="Loads a warehouse hour when its done file appears or changes.",
    )
    def done_file_sensor(context: SensorEvaluationContext, landing: LandingResource):
        store = landing.store()
        # The cursor: the newest done-file mtime handled, and the run keys handled at that mtime.
        cursor = json.loads(context.cursor) if context.cursor else {"mtime_ns": 0, "keys": []}
        newest, at_newest = cursor["mtime_ns"], set(cursor["keys"])
        requests, unknown = [], set()
        for rel in store.glob(DONE_FILE_GLOB):
            m = DONE_FILE_RE.match(rel)
            if not m:
                continue
            mtime = store.mtime_ns(rel)
            if mtime < cursor["mtime_ns"]:
                continue
            run_key = done_run_key(rel, store.read_bytes(rel))
            if mtime == cursor["mtime_ns"] and run_key in cursor["keys"]:
                continue
            if mtime > newest:
                newest, at_newest = mtime, set()
            if mtime == newest:
                at_newest.add(run_key)
            target = tables.get((m["dataset"], m["table"]))
            if target is None:
                unknown.add(f"{m['dataset']}.{m['table']}")
                continue
            requests.append(RunRequest(
                run_key=run_key,
                partition_key=hour_key(hour_from_tag(m["hour"])),
                asset_selection=[target],
                tags={"kafka_landing/spark": "true", "kafka_landing/table": f"{m['dataset']}.{m['table']}", "kafka_landing/done_file": rel},
            ))
        if unknown:
            context.log.warning(f"done files for tables not in the topic config, not loaded: {sorted(unknown)}")
        new_cursor = json.dumps({"mtime_ns": newest, "keys": sorted(at_newest)})
        if not requests:
            return SensorResult(skip_reason=SkipReason("no new done files"), cursor=new_cursor)
        return SensorResult(run_requests=requests, cursor=new_cursor)

    return done_file_sensor
