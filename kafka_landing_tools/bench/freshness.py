"""Freshness: how long after an hour's trigger its data is queryable. A real `dagster-daemon` on
an instance of the repo's dagster.yaml runs everything; each hour is triggered as the hourly
schedule triggers it (its run requests, evaluated by the code location and created as the
scheduler creates them), one hour after the other, and timed from the trigger to every table's
hour loaded (landing-hour and event-time tables) and every run, with its checks, ended. For one
topic and for many (2 partitions, a few hundred records per topic-hour), with where the time goes:
the landing run, the wait for the sensor, the load runs' queue and work."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kafka_landing_tools.bench.data import TopicSpec, produce_topic
from kafka_landing_tools.bench.measure import BenchError, Job, say
from kafka_landing_tools.bench.world import ROOT, Bench, Case

PARTITIONS = 2
PER_TOPIC_HOUR = 500


@dataclass
class Topics:
    """Each variant's topics, set in a config of its own."""
    one: list[str] = field(default_factory=list)
    many: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)  # variant -> records over its hours


def _tables(defs, topics: list[str]):
    """The warehouse tables the topics feed: the landing-hour tables and the event-time tables."""
    from kafka_landing.avro_landing.assets import landing_key
    from kafka_landing.warehouse.assets import GROUP as WAREHOUSE

    graph = defs.resolve_asset_graph()
    hourly = sorted({k for t in topics for k in graph.get(landing_key(t)).child_keys if k.path[0] == WAREHOUSE})
    by_event = sorted({k for h in hourly for k in graph.get(h).child_keys if k.path[0] == WAREHOUSE})
    return hourly, by_event


def _trigger(context, hour: datetime, grace_minutes: int) -> list[str]:
    """The hourly schedules' run requests for `hour`, as the scheduler makes them at their tick
    (`hourly_schedule`): evaluated by the code location, created and submitted to the queue. The
    runs' ids."""
    from dagster._core.definitions.selector import JobSubsetSelector
    from dagster._core.definitions.timestamp import TimestampWithTimezone
    from dagster._scheduler.scheduler import _create_scheduler_run  # the daemon's own way to make the run

    from kafka_landing.hourly_schedule import MARGIN_MINUTES
    from kafka_landing.naming import ONE_HOUR

    instance, request = context.instance, context.create_request_context()
    location = request.get_code_location(request.code_location_names[0])
    repo = next(iter(location.get_repositories().values()))
    tick = hour + ONE_HOUR + timedelta(minutes=grace_minutes + MARGIN_MINUTES)
    ids = []
    for schedule in repo.get_schedules():
        if not schedule.name.endswith("_hourly"):
            continue
        data = location.get_schedule_execution_data(
            instance=instance, repository_handle=repo.handle, schedule_name=schedule.name,
            scheduled_execution_time=TimestampWithTimezone(tick.timestamp(), "UTC"), log_key=None)
        for req in data.run_requests or []:
            job = location.get_job(JobSubsetSelector(
                location_name=location.name, repository_name=repo.name, job_name=schedule.job_name,
                op_selection=None, asset_selection=req.asset_selection))
            run = _create_scheduler_run(instance, tick, location, schedule, job, req)
            instance.submit_run(run.run_id, request)
            ids.append(run.run_id)
    return ids


def _hour_done(instance, hourly, by_event, key: str, since: float) -> bool:
    """Every landing-hour table has `key` loaded, every event-time table a load since `since`."""
    from dagster import AssetKey

    if not all(key in instance.get_materialized_partitions(k) for k in hourly):
        return False
    for k in by_event:
        latest = instance.get_latest_materialization_event(AssetKey(k.path))
        if latest is None or latest.timestamp < since:
            return False
    return True


def _stages(instance, since: float, landing: set[str]) -> dict:
    """The hour's timeline, in seconds from its trigger, from its runs' records: when the landing
    run(s) started and ended, when the first and the last load run was asked for, when all ended."""
    from dagster import RunsFilter

    records = instance.get_run_records(RunsFilter(created_after=datetime.fromtimestamp(since, timezone.utc)))
    failed = [r.dagster_run.run_id for r in records if r.dagster_run.status.value == "FAILURE"]
    if failed:
        raise BenchError(f"runs failed: {', '.join(failed)}; see `dagster run list` in the case's dagster_home")
    lands = [r for r in records if r.dagster_run.run_id in landing]
    asked = sorted(r.create_timestamp.timestamp() for r in records if r.dagster_run.run_id not in landing)

    def at(t: float) -> float:
        return round(t - since, 2)

    return {"seconds": at(max(r.end_time for r in records)),
            "landing_started": at(max(r.start_time for r in lands)), "landing_ended": at(max(r.end_time for r in lands)),
            "first_load_asked": at(asked[0]) if asked else None, "last_load_asked": at(asked[-1]) if asked else None,
            "load_runs": len(asked)}


def contender_freshness(args) -> dict:
    """The hours of --hour-keys of every topic of --topics-config, each triggered as its hourly
    schedule does once the one before is loaded; each hour's seconds and stages, and the rows."""
    from dagster import DagsterInstance
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    out = Path(args.out_dir)
    home = out / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ.update(DAGSTER_HOME=str(home), KAFKA_LANDING_TOPICS_CONFIG=args.topics_config,
                      KAFKA_LANDING_ROOT=args.landing_root, KAFKA_LANDING_WAREHOUSE_ROOT=args.warehouse_root,
                      FRESHNESS_DAEMON_INTERVAL_SECONDS="2")  # Dagster's 30 s would only make the case wait
    # The code location reads its topics from the environment when imported: only now.
    from kafka_landing.config import load_config
    from kafka_landing.definitions import build_definitions
    from kafka_landing.naming import Hour
    from kafka_landing_tools.daemon import CODE_LOCATION, loaded_rows, start_daemon, stop_daemon, wait_for

    defs, config = build_definitions(), load_config()
    topics = sorted(config.topics)
    grace = {c.grace_minutes for c in config.topics.values()}
    if len(grace) != 1:
        raise BenchError(f"{args.topics_config}: the case's topics share one grace, not {sorted(grace)}")
    hourly, by_event = _tables(defs, topics)
    daemon, log, hours = start_daemon(out, CODE_LOCATION), out / "daemon.log", []
    try:
        with DagsterInstance.get() as instance, WorkspaceProcessContext(
                instance, WorkspaceFileTarget(paths=[str(out / "workspace.yaml")])) as context:
            for key in args.hour_keys:
                since = time.time()
                landing = set(_trigger(context, Hour.from_key(key).start, *grace))
                if not landing:
                    raise BenchError(f"no hourly schedule requested a run for {key}")
                wait_for(f"hour {key} of {len(hourly)} + {len(by_event)} tables", lambda: _hour_done(
                    instance, hourly, by_event, key, since), 900, log, 0.2)
                wait_for("every run to end", lambda: all(r.is_finished for r in instance.get_runs(limit=500)),
                         900, log, 0.2)
                hours.append({"hour": key, **_stages(instance, since, landing)})
                say(f"{len(topics)} topic(s), hour {key}: {hours[-1]['seconds']} s")
            # What the UI shows for each table: the daemon's freshness state, evaluated without a run.
            states = wait_for("every table's freshness state", lambda: _fresh_states(instance, hourly), 120, log, 0.5)
            rows = loaded_rows(instance, hourly, args.hour_keys)
    finally:
        stop_daemon(daemon)
    return {"records": rows, "by_hour": hours, "tables": len(hourly) + len(by_event),
            "freshness_states": states}


def _fresh_states(instance, hourly) -> dict[str, str] | None:
    """Each landing-hour table's freshness state, once the daemon has judged every one since it was
    loaded (a state is recorded when it changes: UNKNOWN before a table's first load)."""
    records = instance.get_freshness_state_records(hourly)
    if any(k not in records or records[k].freshness_state.value == "UNKNOWN" for k in hourly):
        return None
    return {k.to_user_string(): records[k].freshness_state.value for k in hourly}


def _config(bench: Bench, topics: list[str], dataset: str) -> Path:
    import yaml

    path = bench.work / f"{dataset}.yaml"
    defaults = {"grace_minutes": 0, "first_hour": bench.keys[0]}
    path.write_text(yaml.safe_dump({"defaults": defaults, "topics": {
        t: {"dataset": dataset, "table": f"t{i:03d}", "event_time_field": "ts"} for i, t in enumerate(topics)}}))
    return path


def produce(bench: Bench) -> None:
    from kafka_landing.naming import hour_from_key

    kept, hours = Topics(), [hour_from_key(k) for k in bench.keys]
    bench.kept["freshness"] = kept
    many = bench.sizes.freshness_topics
    t0 = time.monotonic()
    for variant, names, n in (("one", kept.one, 1), ("many", kept.many, many)):
        if not n:  # 0 topics leaves the many-topics variant out
            continue
        for i in range(n):
            topic = f"bench_fresh_{variant}{i:03d}_{bench.run_id}"
            bench.created.append(topic)
            names.append(topic)
            p = produce_topic(bench.stack, TopicSpec(topic, "small", hours, PER_TOPIC_HOUR, partitions=PARTITIONS))
            kept.records[variant] = kept.records.get(variant, 0) + p["messages"]
        _config(bench, names, f"fresh_{variant}")
    say(f"produced {len(kept.one) + len(kept.many)} freshness topics x {len(hours)} hours x {PER_TOPIC_HOUR} "
        f"messages in {time.monotonic() - t0:.1f} s")


def jobs(bench: Bench) -> list[Job]:
    """One topic, then the many, each through a daemon of its own, hour after hour."""
    kept, work = bench.kept["freshness"], bench.work
    return [Job(f"freshness {variant}", "freshness",
                ["--topics-config", str(work / f"fresh_{variant}.yaml"), "--hour-keys", *bench.keys,
                 "--landing-root", str(work / f"fresh_{variant}" / "landing"),
                 "--warehouse-root", str(work / f"fresh_{variant}" / "warehouse"),
                 "--out-dir", str(work / f"fresh_{variant}")],
                kept.records[variant], f"{len(names)} topic(s) x {len(bench.keys)} hours, in the warehouse")
            for variant, names in (("one", kept.one), ("many", kept.many)) if names]


def summary(m: dict) -> dict:
    """A variant's hours: the median and the worst, and the stages of the median hour."""
    hours = m["by_hour"]
    median = statistics.median_low([h["seconds"] for h in hours])
    return {"median_s": median, "worst_s": max(h["seconds"] for h in hours), "tables": m["tables"],
            "freshness_states": m["freshness_states"],
            "median_hour": next(h for h in hours if h["seconds"] == median), "hours": hours}


def report(bench: Bench, m: dict) -> dict:
    kept = bench.kept["freshness"]
    return {"freshness": {"partitions": PARTITIONS, "per_topic_hour": PER_TOPIC_HOUR,
                          **{variant: {"topics": len(names), **summary(m[f"freshness {variant}"])} if names else None
                             for variant, names in (("one", kept.one), ("many", kept.many))}}}


# Alone: its daemon runs several runs at once by itself, and a clock beside others' work means nothing.
CASE = Case("freshness", jobs, report, {"freshness": contender_freshness}, produce=produce, alone=True)

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
