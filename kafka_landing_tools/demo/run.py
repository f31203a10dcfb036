"""`make demo`: produce demo data (once), land the last closed hours, let the
done-file sensor request the warehouse loads and run them, all on the Dagster
instance in $DAGSTER_HOME, then print a per-hour summary. The Makefile then
opens the UI on the same instance, where the runs, checks and metadata show.

The last hour is landed after the others, as the hourly schedule would, and
brings a few orders created two days before: the event-time table
`shop.orders__by_event` shows today's day amended by it (a new version), and
the late orders in a day of their own."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from confluent_kafka.admin import AdminClient
from dagster import DagsterInstance, build_sensor_context

from kafka_landing_tools import devstack
from kafka_landing.config import FIRST_HOUR_ENV, load_config
from kafka_landing_tools.demo.generate import ORDERS, WEB, demo_hour_count, demo_hours, generate, late_orders
from kafka_landing.naming import hour_key

HOURS = demo_hour_count()
PER_HOUR = int(os.environ.get("DEMO_PER_HOUR", "600"))
NOW = datetime.now(timezone.utc)
# The demo topics' history starts at the first demo hour (unless the landing root holds earlier
# frozen hours). Their config says `first_hour: demo`, which would derive the same hour from the
# clock when the code location loads; pinned here to NOW, so an hour turning while the data is
# produced cannot move it past the hours landed below. Later processes (the UI) start at the
# earliest frozen slice. Set before the code location below is built, which happens when it is imported.
os.environ.setdefault(FIRST_HOUR_ENV, hour_key(demo_hours(NOW, HOURS)[0]))

from kafka_landing.definitions import (  # noqa: E402 - after the first hour above
    build_definitions,
    build_resources,
    landing_job_name,
)
from kafka_landing_tools.demo.loads import run_event_requests, run_load_request  # noqa: E402
from kafka_landing.warehouse.sensors import EVENT_SENSOR_NAME, PARTITION_TAG, SENSOR_NAME  # noqa: E402


def _demo_data_present(bootstrap: str, registry_url: str) -> bool:
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    if not (ORDERS in topics and WEB in topics):
        return False
    from confluent_kafka.schema_registry import SchemaRegistryClient

    subjects = set(SchemaRegistryClient({"url": registry_url}).get_subjects())
    if not {f"{ORDERS}-value", f"{WEB}-value"} <= subjects:
        # The demo's records would name schema ids nobody knows, and every record would be a
        # dead letter. The stack's registry keeps its schemas on disk beside the broker's log, so
        # only a wiped registry folder, or a registry of an earlier stack (in memory), gets here.
        raise SystemExit(
            f"the demo topics {ORDERS} and {WEB} exist, but the schema registry at {registry_url} has no schemas for them "
            "(its data was wiped since the demo data was produced, or it kept them in memory, as the stack's registry "
            "did before it kept them in .local/stack/registry). Run `make demo-reset` to start the demo over, then "
            "`make demo`."
        )
    return True


CHECKS: dict[tuple[str, str], list[str]] = {}


def _record_checks(result, partition_key: str | None) -> None:
    """Each check result under the hour it is about: a range run reports one evaluation per hour
    (its `partition`); a one-hour run's may carry none, and then it is the run's hour. A check of
    no hour (hours_behind) in a range run has no hour to show under and is left to the UI."""
    for ev in result.get_asset_check_evaluations():
        hour = ev.partition or partition_key
        if hour is None:
            continue
        mark = "ok" if ev.passed else ("WARN" if ev.severity.value == "WARN" else "FAIL")
        CHECKS.setdefault((ev.asset_key.to_user_string(), hour), []).append(f"{ev.check_name}={mark}")


def land(defs, instance, hours) -> None:
    """Each hour of each topic as its own run of the topic's job, as the hourly schedules would."""
    for topic in load_config().topics:
        job = defs.resolve_job_def(landing_job_name(topic))
        for hour in hours:
            result = job.execute_in_process(instance=instance, partition_key=hour_key(hour),
                                            tags={"kafka_landing/source": "make-demo"})
            _record_checks(result, hour_key(hour))


def load_through_sensor(defs, instance) -> int:
    """One sensor tick, and its run requests (one per table and stretch of consecutive
    hours) run here as the daemon would launch them, so the sensor in `dagster dev` does
    not request them again. Returns the number of runs."""
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    resources = build_resources()
    with build_sensor_context(instance=instance, resources={"landing": resources["landing"], "warehouse": resources["warehouse"]}) as ctx:
        result = sensor(ctx)
    requests = result.run_requests or []
    for req in requests:
        _record_checks(run_load_request(defs, req, instance, resources=resources), req.partition_key)
    return len(requests)


def load_event_partitions(defs, instance) -> int:
    """One tick of the event sensor, and its runs (one per event day a landing hour changed, for all
    its tables)."""
    resources = build_resources()
    with build_sensor_context(instance=instance, resources={"landing": resources["landing"],
                                                            "warehouse": resources["warehouse"]}) as ctx:
        result = defs.resolve_sensor_def(EVENT_SENSOR_NAME)(ctx)
    for req, run in zip(result.run_requests or [], run_event_requests(defs, result, instance, resources=resources)):
        _record_checks(run, req.partition_key or req.tags.get(PARTITION_TAG))  # the tag: a run of several tables
    return len(result.run_requests or [])


def event_summary(instance, defs) -> str:
    """Each event-time table's partitions as their last load left them: version, rows, the landing
    hours they hold, what the last version changed and whether they were final."""
    from kafka_landing.warehouse.by_event.measures import event_conservation

    resources = build_resources()
    store = resources["landing"].store()
    warehouse = resources["warehouse"].backend(store)
    cfg = {(c.dataset, t): c for c in load_config().topics.values() if c.event_granularity for t in c.tables}
    lines = []
    for key in sorted(defs.resolve_asset_graph().get_all_asset_keys()):
        if not key.path[-1].endswith("__by_event"):
            continue
        lines.append(f"\n{key.to_user_string()} (by event day; a new version each time a landing hour changes a day)")
        lines.append(f"{'partition':<12} {'version':>7} {'rows':>6}  {'landing hours (rows)':<44} last change")
        latest = {}
        for r in instance.fetch_materializations(key, limit=500).records:  # newest first
            latest.setdefault(r.partition_key, r)
        for partition in sorted(latest):
            md = {k: v.value for k, v in latest[partition].asset_materialization.metadata.items()}
            hours = ", ".join(f"{h[5:]} ({n})" for h, n in md["landing_hours"].items())
            changed = ", ".join(md["changed_hours"])
            note = (f"amended by {changed}" if md["version"] > 1 else f"created by {changed}") + \
                   ("; final" if md["settled"] else "; not final yet" + (
                       f": may change until {md['settles_at'][:16]}" if md["settles_at"] else ""))
            # Conservation as it stands now: a run that loaded one day before another it shares a landing
            # hour with warned that the other waited; both are loaded now.
            table = key.path[-1][:-len("__by_event")]
            c = event_conservation(store, warehouse, cfg[(key.path[1], table)], table, partition)
            lines.append(f"{partition:<12} {md['version']:>7} {md['dagster/row_count']:>6}  {hours:<44} {note}; "
                         f"conservation now: {'ok' if c.ok else c.why}")
    return "\n".join(lines)


def summary(instance, defs, hours) -> str:
    lines = [f"{'hour':<17} {'asset':<34} {'rows':>6}  checks / notes"]
    for key in sorted(defs.resolve_asset_graph().get_all_asset_keys()):
        if key.path[0] not in ("kafka_slices", "avro_landing", "warehouse") or key.path[-1].endswith("__by_event"):
            continue
        latest = {}
        for r in instance.fetch_materializations(key, limit=200).records:  # newest first
            latest.setdefault(r.partition_key, r)
        for hour in hours:
            pk = hour_key(hour)
            rec = latest.get(pk)
            if rec is None:
                lines.append(f"{pk:<17} {key.to_user_string():<34} {'-':>6}  not materialised")
                continue
            md = rec.asset_materialization.metadata
            rows = md.get("dagster/row_count")
            notes = []
            if "dead_letters" in md and md["dead_letters"].value:
                notes.append(f"dead letters {md['dead_letters'].value}")
            if "partitions" in md:
                notes.append(", ".join(f"p{r.data['partition']}:[{r.data['start_offset']},{r.data['end_offset']})"
                                       for r in md["partitions"].value.records))
            notes = CHECKS.get((key.to_user_string(), pk), []) + notes
            lines.append(f"{pk:<17} {key.to_user_string():<34} {rows.value if rows else '':>6}  {'; '.join(notes)}")
    return "\n".join(lines)


def _bucket_on_the_emulator() -> None:
    """`DEMO_STORAGE=gcs`: the landing root is a bucket on the local GCS emulator; create it once."""
    root = os.environ.get("KAFKA_LANDING_ROOT", "")
    if not (root.startswith("gs://") and os.environ.get("STORAGE_EMULATOR_HOST")):
        return
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="kafka-landing-demo", credentials=AnonymousCredentials())
    bucket = root[len("gs://"):].split("/", 1)[0]
    if client.lookup_bucket(bucket) is None:
        client.create_bucket(bucket)
    print(f"landing root: {root} on the GCS emulator at {os.environ['STORAGE_EMULATOR_HOST']}")


def main() -> None:
    now = NOW
    _bucket_on_the_emulator()
    if _demo_data_present(devstack.BOOTSTRAP, devstack.REGISTRY_URL):
        print("demo topics exist already: reusing their data (`make demo-reset` starts over)")
    else:
        sent = generate(devstack.BOOTSTRAP, devstack.REGISTRY_URL, hours=HOURS, per_hour=PER_HOUR, now=now)
        late = late_orders(devstack.BOOTSTRAP, devstack.REGISTRY_URL, demo_hours(now, HOURS)[-1])
        print(f"produced {len(sent.records)} records to {ORDERS} and {WEB} over the last {HOURS} closed hours, and "
              f"{len(late)} orders created two days before that reach Kafka in the last hour")
    hours = demo_hours(now, HOURS)
    defs = build_definitions()
    instance = DagsterInstance.get()
    # The hours before the last, then the last one: the event-time table is versioned after each.
    land(defs, instance, hours[:-1])
    runs = load_through_sensor(defs, instance)
    events = load_event_partitions(defs, instance)
    land(defs, instance, hours[-1:])
    runs += load_through_sensor(defs, instance)
    events += load_event_partitions(defs, instance)
    print(f"the done-file sensor requested {runs} warehouse load run(s) (one per table and stretch of "
          f"consecutive hours), the event sensor {events} event partition load(s); all ran\n")
    print(summary(instance, defs, hours))
    print(event_summary(instance, defs))


if __name__ == "__main__":
    main()
