"""The warm engine's memory: each small-record throughput topic landed by kafka_landing on a
Spark Connect server of its own (a fixed heap, `stack.SERVER_HEAP`), started for that topic and
stopped after it, and the server's peak memory. The stack's long-lived server keeps what earlier
cases took, so it cannot say what one needs. The report's memory table sets it beside every
throughput contender's own peak, at 1x and 4x; the goals judge it at 4x and at the 10x case."""

from __future__ import annotations

import os
from pathlib import Path

from kafka_landing_tools.bench.measure import Job, high_water_marks
from kafka_landing_tools.bench.processes import contender_kafka_landing
from kafka_landing_tools.bench.stack import own_connect_server
from kafka_landing_tools.bench.world import TOPICS_DATA, Bench, Case


def contender_kafka_landing_server(args) -> dict:
    """kafka_landing on a server of its own: the records, and the server tree's peak (VmHWM)."""
    with own_connect_server(Path(args.out_dir) / f"server_{args.topic}_{os.getpid()}") as server:
        os.environ["SPARK_REMOTE"] = server.url
        records = contender_kafka_landing(args)
        peak = sum(high_water_marks(server.pid).values())
    return {"records": records, "server_peak_rss_mb": round(peak / 2**20)}


def _small(bench: Bench) -> dict[str, dict]:
    return {topic: info for topic, info in bench.throughput.items() if info["case"].startswith("small")}


def jobs(bench: Bench) -> list[Job]:
    keys = bench.keys
    return [Job(f"{info['case']} kafka_landing_server", "kafka_landing_server", bench.argv(topic, keys),
                bench.records(topic, keys), f"{topic} hours {keys[0]}..{keys[-1]}, on a server of its own")
            for topic, info in _small(bench).items()]


def report(bench: Bench, m: dict) -> dict:
    return {"server_memory": [{"case": info["case"], "tenfold": bool(info.get("tenfold")),
                               **m[f"{info['case']} kafka_landing_server"]}
                              for info in _small(bench).values()]}


CASE = Case("memory", jobs, report, {"kafka_landing_server": contender_kafka_landing_server},
            needs=frozenset({TOPICS_DATA}))

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
