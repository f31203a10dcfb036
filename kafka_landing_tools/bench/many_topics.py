"""Many topics: 20 topics of small records over the throughput hours, landed and loaded as a user
does it from the UI, through a real `dagster-daemon` on an instance of the repo's dagster.yaml
(the queued coordinator, at most two Spark runs at once): one asset backfill of every topic's
landing assets (one run for them all), then the done-file sensor's load runs; wall time from the
daemon's start to every table loaded and every run ended. Beside it, the same records as one topic
through the same path: what the many topics cost beyond their records."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka_landing_tools.bench.data import TopicSpec, produce_topic
from kafka_landing_tools.bench.measure import Job, say
from kafka_landing_tools.bench.world import ROOT, Bench, Case


@dataclass
class ManyTopics:
    """The case's topics, each set in a config of its own: the other cases' code location stays as small."""
    many: list[str] = field(default_factory=list)
    records: int = 0
    one_records: int = 0  # the same records as one topic


def contender_many_topics(args) -> int:
    """Every topic of --topics-config, its --hour-keys landed and loaded through a real daemon on
    an instance of the repo's dagster.yaml (queued coordinator, its concurrency limits); the rows loaded."""
    import yaml

    from kafka_landing_tools.daemon import land_and_load

    home = Path(args.out_dir) / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ.update(DAGSTER_HOME=str(home), KAFKA_LANDING_TOPICS_CONFIG=args.topics_config,
                      KAFKA_LANDING_ROOT=args.landing_root, KAFKA_LANDING_WAREHOUSE_ROOT=args.warehouse_root)
    topics = sorted(yaml.safe_load(Path(args.topics_config).read_text())["topics"])
    done = land_and_load(topics, args.hour_keys, Path(args.out_dir), timeout=1800)
    return done["rows"]


def produce(bench: Bench) -> None:
    import yaml

    from kafka_landing.naming import hour_from_key

    sizes, kept = bench.sizes, ManyTopics()
    bench.kept["many_topics"] = kept
    hours = [hour_from_key(k) for k in bench.keys]
    t0, cfg, p = time.monotonic(), {}, {}
    for i in range(sizes.many_topics):
        topic = f"bench_many{i:02d}_{bench.run_id}"
        bench.created.append(topic)
        kept.many.append(topic)
        p = produce_topic(bench.stack, TopicSpec(topic, "small", hours, sizes.many_per_hour))
        kept.records += p["messages"]
        cfg[topic] = {"dataset": "bench_many", "table": f"t{i:02d}"}
    defaults = {"grace_minutes": 0, "first_hour": bench.keys[0]}
    (bench.work / "many_topics.yaml").write_text(yaml.safe_dump({"defaults": defaults, "topics": cfg}))
    one = f"bench_manyone_{bench.run_id}"
    bench.created.append(one)
    kept.one_records = produce_topic(bench.stack, TopicSpec(one, "small", hours, sizes.many_per_hour
                                                            * sizes.many_topics))["messages"]
    (bench.work / "many_one.yaml").write_text(yaml.safe_dump({"defaults": defaults, "topics": {
        one: {"dataset": "bench_many", "table": "one"}}}))
    say(f"produced {sizes.many_topics} topics x {len(hours)} hours x {sizes.many_per_hour:,} messages "
        f"({p.get('mb')} MB each) in {time.monotonic() - t0:.1f} s")


def jobs(bench: Bench) -> list[Job]:
    """The many topics, and the same records as one topic, each through a daemon of its own."""
    kept, work, hours = bench.kept["many_topics"], bench.work, len(bench.keys)
    return [Job(label, "many_topics",
                ["--topics-config", str(work / config), "--hour-keys", *bench.keys,
                 "--landing-root", str(work / folder / "landing"),
                 "--warehouse-root", str(work / folder / "warehouse"), "--out-dir", str(work / folder)],
                records, what)
            for label, config, folder, records, what in (
                ("many topics", "many_topics.yaml", "many", kept.records,
                 f"{len(kept.many)} topics x {hours} hours, in the warehouse"),
                ("many topics as one", "many_one.yaml", "many_one", kept.one_records,
                 f"one topic x {hours} hours, in the warehouse"))]


def report(bench: Bench, m: dict) -> dict:
    return {"many_topics": {"topics": len(bench.kept["many_topics"].many), "hours": len(bench.keys),
                            "per_hour": bench.sizes.many_per_hour, **m["many topics"],
                            "as_one_topic": m["many topics as one"]}}


# Alone, whatever the run's workers: it runs several runs at once by itself.
CASE = Case("many_topics", jobs, report, {"many_topics": contender_many_topics}, produce=produce, alone=True)

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
