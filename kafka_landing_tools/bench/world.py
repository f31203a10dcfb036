"""A run's world: its sizes, its hours, its landing roots under one work folder, the topics the
cases share (the throughput topics, the routed day and its late hour, an empty topic) and the
topic config every measurement's process reads; and what a case is."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kafka_landing.spark_setup import CONNECT_MARK
from kafka_landing_tools.bench.data import DAY_ROUTE, TopicSpec, produce_topic
from kafka_landing_tools.bench.measure import Job, say
from kafka_landing_tools.bench.processes import sample_part, slice_parts
from kafka_landing_tools.bench.stack import Stack

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 300_000  # the 1x topics; the 4x topic is four times as many (1.2M)
TOPICS = (("small", 1), ("large", 1), ("small", 4))  # the throughput topics: (record kind, scale)
# The 10x cases (issue 48): 12M small and 3M ~1 KB records at the default size, where a run's records,
# not its start-up, decide; the contenders that take minutes there (spark_by_hand, the cold engine) sit
# them out and python_valve lands a sample (`throughput.TENFOLD_CONTENDERS`).
TENFOLD = (("small", 40), ("large", 10))
# The many-topics case: topics x the cases' hours, this many records per topic and hour.
MANY_TOPICS, MANY_PER_HOUR = 20, 2_500
FRESHNESS_TOPICS = 100  # the freshness case's many topics (its goal's size)
#: What a case reads, made before any case runs: the throughput topics, the routed day, its late
#: hour (records of an event day of it), an empty topic; and the day landed in one run into the
#: landing root (the backfill case lands it; a case that needs it without that case lands it first).
TOPICS_DATA, DAY, LATE_HOUR, EMPTY, DAY_LANDED = "topics", "day", "late hour", "empty", "day landed"


@dataclass(frozen=True)
class Sizes:
    messages: int = MESSAGES  # each 1x topic's and the day's
    hours: int = 4
    day_hours: int = 24
    topics: tuple[tuple[str, int], ...] = TOPICS
    many_topics: int = MANY_TOPICS  # 0 leaves the many-topics case out
    many_per_hour: int = MANY_PER_HOUR
    freshness_topics: int = FRESHNESS_TOPICS  # the freshness case's many-topics variant
    tenfold: bool = True  # the 10x throughput topics too (`TENFOLD`)
    year_days: int = 365  # days of the year_table case's table (the smoke run and the tests: a fortnight)


# The smoke run: every section, at sizes where start-up is nearly everything (no large topic).
QUICK = Sizes(messages=20_000, hours=2, day_hours=6, topics=(("small", 1), ("small", 4)), many_topics=0,
              freshness_topics=4, tenfold=False, year_days=14)


@dataclass(frozen=True)
class Case:
    """One section of the benchmark, runnable alone: the data it reads, its measurements (each a
    fresh process running one of its `contenders`, `--contender NAME`), and its part of the report."""
    name: str
    jobs: Callable[[Bench], list[Job]]
    report: Callable[[Bench, dict], dict]
    contenders: dict[str, Callable]
    needs: frozenset[str] = frozenset()
    lands: frozenset[str] = frozenset()  # what its jobs leave for the cases after it
    produce: Callable[[Bench], None] | None = None  # topics of its own, before the slices are frozen
    prepare: Callable[[Bench], None] | None = None  # right before its jobs, not timed
    alone: bool = False  # its jobs run one at a time whatever the run's workers


@dataclass
class Bench:
    """The run's hours, folders and topics, and the argv its measurements' processes get."""
    sizes: Sizes
    stack: Stack
    work: Path
    run_id: str
    keys: list[str]  # the throughput topics' hours
    day_keys: list[str]
    contenders: tuple[str, ...] | None  # the throughput case's, None: all of them
    when: str  # the run's start, as the report names it
    production: list[dict] = field(default_factory=list)
    topics_cfg: dict[str, dict] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    throughput: dict[str, dict] = field(default_factory=dict)  # throughput topic -> its production ("case": "small 1x")
    late_records: int = 0
    kept: dict[str, object] = field(default_factory=dict)  # a case's own facts, by case name

    @property
    def day(self) -> str:
        return f"bench_day_{self.run_id}"

    @property
    def empty(self) -> str:
        return f"bench_empty_{self.run_id}"

    @property
    def late_key(self) -> str:
        """The day topic's late hour, after its last: records of an event day of it."""
        from kafka_landing.naming import ONE_HOUR, hour_from_key, hour_key

        return hour_key(hour_from_key(self.day_keys[-1]) + ONE_HOUR)

    def where(self, root: str = "landing") -> list[str]:
        return ["--landing-root", str(self.work / root), "--out-dir", str(self.work)]

    def argv(self, topic: str, hour_keys: list[str], *more: str, root: str = "landing") -> list[str]:
        return ["--topic", topic, "--hour-keys", *hour_keys, *self.where(root), *more]

    def records(self, topic: str, hour_keys: list[str]) -> int:
        """The records the frozen slices of these hours hold."""
        return sum(p.records for p in slice_parts(str(self.work / "landing"), topic, hour_keys))

    def sample_records(self, topic: str, hour_keys: list[str]) -> int:
        """The records of a contender's sample (`processes.sample_part`)."""
        return sample_part(str(self.work / "landing"), topic, hour_keys).records

    def copy_root(self, source: str, target: str, under: str = "") -> None:
        """A landing root (or a folder of one) copied for a measurement of its own, not timed."""
        shutil.copytree(self.work / source / under, self.work / target / under)

    def produce(self, needs: set[str]) -> None:
        """The shared topics the chosen cases read."""
        if TOPICS_DATA in needs:
            self._produce_topics()
        if DAY in needs or LATE_HOUR in needs:
            self._produce_day(late=LATE_HOUR in needs)
        if EMPTY in needs:
            from kafka_landing_tools.demo.generate import ensure_topics

            self.created.append(self.empty)
            ensure_topics(self.stack.bootstrap, {self.empty: 1})
            self.topics_cfg[self.empty] = {"dataset": "bench", "table": "empty"}

    def _produce_topics(self) -> None:
        from kafka_landing.naming import hour_from_key

        hours = [hour_from_key(k) for k in self.keys]
        per_hour = max(1, self.sizes.messages // len(hours))
        for kind, scale in (*self.sizes.topics, *(TENFOLD if self.sizes.tenfold else ())):
            topic = f"bench_{kind}_{scale}x_{self.run_id}"
            self.created.append(topic)
            spec = TopicSpec(topic, kind, hours, per_hour * scale)
            p = {"case": f"{kind} {scale}x", "tenfold": (kind, scale) in TENFOLD, **produce_topic(self.stack, spec)}
            self.production.append(p)
            self.throughput[topic] = p
            self.topics_cfg[topic] = {"dataset": "bench", "table": f"{kind}_{scale}x", "rows_per_task": 100_000}
            say(f"produced {p['messages']:>9,} {p['case']} messages ({p['mb']} MB) in {p['seconds']} s")

    def _produce_day(self, late: bool) -> None:
        from kafka_landing.naming import hour_from_key

        day = [hour_from_key(k) for k in self.day_keys]
        self.created.append(self.day)
        per_hour = max(1, self.sizes.messages // len(day))
        p = {"case": f"day ({len(day)} hours, routed)",
             **produce_topic(self.stack, TopicSpec(self.day, "event", day, per_hour))}
        self.production.append(p)
        # With an event-time table by day: the late hour below amends one of the day's event days.
        self.topics_cfg[self.day] = {"dataset": "bench", "route": DAY_ROUTE, "rows_per_task": 100_000,
                                     "event_time_field": "ts"}
        say(f"produced {p['messages']:>9,} day messages ({p['mb']} MB) in {p['seconds']} s")
        if not late:
            return
        # The late records' event time: the hour in the middle of the day, whose UTC day holds most of its
        # hours (the 24 hours rarely start at midnight): the amendment replaces a full event day.
        event_ts = int(day[len(day) // 2].timestamp() * 1000) + 60_000
        spec = TopicSpec(self.day, "event", [hour_from_key(self.late_key)], max(1, per_hour // 10), event_ts,
                         first_n=p["messages"])
        produced = produce_topic(self.stack, spec)
        self.production.append({"case": "late hour of the day (event time in its middle hour)", "late": True,
                                **produced})
        self.late_records = produced["messages"]

    def freeze_job(self) -> Job | None:
        """Every hour's slices frozen once, so every contender reads exactly the same offsets. The
        empty topic is left to its own measurement (an hourly run freezes and lands), the late hour
        to its landing."""
        spec = {t: self.keys for t in self.throughput}
        if self.day in self.created:
            spec[self.day] = self.day_keys
        if not spec:
            return None
        records = sum(p["messages"] for p in self.production if p["topic"] in spec and not p.get("late"))
        return Job("freeze", "freeze", ["--freeze-spec", json.dumps(spec), *self.where()], records,
                   "every produced topic (the late hour is frozen when it lands)")

    def day_landed_job(self) -> Job:
        """The day landed in one run, for the cases that load it when the backfill case does not run."""
        return Job("the day landed (not reported)", "kafka_landing", self.argv(self.day, self.day_keys),
                   self.records(self.day, self.day_keys), f"{self.day}, {len(self.day_keys)} hours in one run")

    def environment(self) -> dict:
        """Every measurement's environment: the run's topic config, the Iceberg warehouse, its own Spark."""
        import yaml

        cfg_path = self.work / "topics.yaml"
        # The bench topics' history starts at their earliest hour (the day's first).
        defaults = {"grace_minutes": 0, "first_hour": min([*self.keys, *self.day_keys])}
        cfg_path.write_text(yaml.safe_dump({"defaults": defaults, "topics": self.topics_cfg}))
        # Each contender chooses its own Spark: none inherits a parent's Connect mark.
        inherited = {k: v for k, v in os.environ.items() if k != CONNECT_MARK}
        return {**inherited, "KAFKA_LANDING_TOPICS_CONFIG": str(cfg_path), "KAFKA_LANDING_WAREHOUSE": "iceberg",
                "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
