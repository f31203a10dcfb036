"""Replay: the landed day landed again in one run, once from Kafka and once from its archive (its
landing files and dead letters), each on a copy of the landing root the backfill left, through
the replay job as a user runs it (issue 50: a replay from the archive no slower than from Kafka).
Both land every record again under the same config: the same decode, routing, event-time split
and publication; only the read differs."""

from __future__ import annotations

from kafka_landing_tools.bench.measure import BenchError, Job
from kafka_landing_tools.bench.processes import landed_rows, only_topic
from kafka_landing_tools.bench.world import DAY, DAY_LANDED, Bench, Case

ROOTS = {"kafka": "landing_replay_kafka", "archive": "landing_replay_archive"}


def contender_replay(args) -> int:
    """The topic's replay job over the hours in one run, from `--source`, as the command line runs it."""
    from dagster import DagsterInstance

    cfg = only_topic(args)
    from kafka_landing.definitions import replay_hours
    from kafka_landing.naming import Hour

    with DagsterInstance.ephemeral() as instance:
        result = replay_hours(args.topic, Hour.from_key(args.hour_keys[0]), Hour.from_key(args.hour_keys[-1]),
                              args.source, instance)
    if not result.success:
        raise BenchError(f"the replay of {args.topic} from {args.source}, hours {args.hour_keys[0]}..{args.hour_keys[-1]} "
                         "failed; its log is above")
    return landed_rows(args, cfg)


def prepare(bench: Bench) -> None:
    """Each way replays a copy of the root the backfill landed the day into."""
    for root in ROOTS.values():
        bench.copy_root("landing", root)


def jobs(bench: Bench) -> list[Job]:
    day, keys = bench.day, bench.day_keys
    records = bench.records(day, keys)
    return [Job(f"replay from {source}", "replay", bench.argv(day, keys, "--source", source, root=root), records,
                f"{day}, {len(keys)} landed hours landed again from {source} in one run")
            for source, root in ROOTS.items()]


def report(bench: Bench, m: dict) -> dict:
    return {"replay": {"hours": len(bench.day_keys), "from_kafka": m["replay from kafka"],
                       "from_archive": m["replay from archive"]}}


CASE = Case("replay", jobs, report, {"replay": contender_replay}, needs=frozenset({DAY, DAY_LANDED}), prepare=prepare)

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
