"""What every measurement's process shares (`python -m kafka_landing_tools.bench --contender NAME`,
its arguments parsed by `__main__`): the topic config narrowed to its topic, the frozen slices,
a Dagster run's partitions; and the two processes several cases run: freezing the slices, and
landing through Dagster as a user does."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kafka_landing_tools.bench.measure import BenchError


def plans(landing_root: str, topic: str, hours: list[str]):
    """The frozen slice of each hour, all of them there."""
    from kafka_landing.kafka_slices.freeze import frozen_slice
    from kafka_landing.naming import Hour
    from kafka_landing.store import open_store

    store = open_store(landing_root)
    found = [frozen_slice(store, topic, Hour.from_key(h)) for h in hours]
    missing = [h for h, p in zip(hours, found) if p is None]
    if missing:
        raise BenchError(f"{topic}: no frozen slice under {landing_root} for hours {missing}")
    return found


def slice_parts(landing_root: str, topic: str, hours: list[str]):
    return [p for plan in plans(landing_root, topic, hours) for p in plan.partitions]


def sample_part(landing_root: str, topic: str, hours: list[str]):
    """A sample of the hours, for a contender too slow to land a 10x case whole in the run's time:
    the first hour's first partition holding records (a sixteenth of a 4-hour, 4-partition case)."""
    return next(p for p in plans(landing_root, topic, hours[:1])[0].partitions if p.records)


def only_topic(args):
    """Point the topic config at this contender's topic alone, so a job lands exactly the
    data being measured; returns that topic's config."""
    import yaml

    full = yaml.safe_load(Path(os.environ["KAFKA_LANDING_TOPICS_CONFIG"]).read_text())
    mine = Path(args.out_dir) / f"topics_{args.topic}_{os.getpid()}.yaml"
    mine.write_text(yaml.safe_dump({**full, "topics": {args.topic: full["topics"][args.topic]}}))
    os.environ["KAFKA_LANDING_TOPICS_CONFIG"] = str(mine)
    os.environ["KAFKA_LANDING_ROOT"] = args.landing_root
    from kafka_landing.config import load_config

    return load_config().topic(args.topic)


def partitions(hour_keys: list[str]) -> dict:
    """Arguments that make a Dagster run cover these hours: one key, or a single-run range."""
    if len(hour_keys) == 1:
        return {"partition_key": hour_keys[0]}
    return {"tags": {"dagster/asset_partition_range_start": hour_keys[0],
                     "dagster/asset_partition_range_end": hour_keys[-1]}}


def runs_of(args) -> list[list[str]]:
    """The hours as one run, or (`--mode runs`) one run per hour, in this one process."""
    return [[h] for h in args.hour_keys] if args.mode == "runs" else [args.hour_keys]


def landing_job(args):
    """What every kafka_landing run needs before it runs: imports, definitions, the job, resources."""
    cfg = only_topic(args)
    from kafka_landing.definitions import (
        build_definitions,
        build_resources,
        landing_job_name,
    )

    return cfg, build_definitions().resolve_job_def(landing_job_name(args.topic)), build_resources()


def landed_rows(args, cfg) -> int:
    from kafka_landing.handoff.manifests import DoneFile
    from kafka_landing.naming import done_file_path, hour_from_key
    from kafka_landing.store import open_store

    store = open_store(args.landing_root)
    return sum(DoneFile.from_dict(store.read_json(done_file_path(cfg.dataset, t, hour_from_key(h)))).rows
               for t in cfg.tables for h in args.hour_keys)


def contender_kafka_landing(args) -> int:
    """Through Dagster as a user would: the topic's land_<topic> job over the hours, one run
    (`--mode runs`: one run per hour, in one process, so the Spark session is reused)."""
    from dagster import DagsterInstance

    cfg, job, resources = landing_job(args)
    with DagsterInstance.ephemeral() as instance:
        for hours in runs_of(args):
            result = job.execute_in_process(instance=instance, resources=resources, raise_on_error=False,
                                            **partitions(hours))
            if not result.success:
                raise BenchError(f"the landing job of {args.topic}, hours {hours[0]}..{hours[-1]} failed; "
                                 "its log is above")
    return landed_rows(args, cfg)


def contender_freeze(args) -> int:
    """Not measured: freeze every topic's slices once, so all contenders read the same offsets."""
    from dagster import DagsterInstance, materialize

    from kafka_landing.definitions import build_definitions, build_resources
    from kafka_landing.kafka_slices.assets import slice_key

    spec = json.loads(args.freeze_spec)  # topic -> hour keys
    os.environ["KAFKA_LANDING_ROOT"] = args.landing_root
    defs = build_definitions()
    resources = build_resources()
    by_hours: dict[tuple, list[str]] = {}
    for topic, hours in spec.items():
        by_hours.setdefault(tuple(hours), []).append(topic)
    with DagsterInstance.ephemeral() as instance:
        for hours, topics in by_hours.items():
            result = materialize([defs.get_assets_def(slice_key(t)) for t in topics], instance=instance,
                                 resources=resources, raise_on_error=False, **partitions(list(hours)))
            if not result.success:
                raise BenchError(f"freezing the slices of {topics} failed; its log is above")
    return sum(p.records for topic, hours in spec.items() for p in slice_parts(args.landing_root, topic, hours))


CONTENDERS = {"kafka_landing": contender_kafka_landing, "freeze": contender_freeze}
