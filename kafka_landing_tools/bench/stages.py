"""Where the per-record time goes: each throughput topic's offsets through kafka_landing's own
read, then read + decode, then read + decode + route, on the warm engine, each one Spark job
writing nothing (`noop`), timed in one process with the session already open. What the landing
adds beyond the last is its write and publishing; the report sets the stages beside the pass
(the throughput case's kafka_landing less the fixed cost case's empty hour)."""

from __future__ import annotations

import os
import time
import uuid

from kafka_landing_tools.bench.measure import BenchError, Job
from kafka_landing_tools.bench.processes import only_topic, plans
from kafka_landing_tools.bench.world import TOPICS_DATA, Bench, Case


def contender_spark_stages(args) -> dict:
    """Each stage's seconds, and the records every stage saw (one number, or the run fails)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from kafka_landing import defaults
    from kafka_landing.avro_landing.decode import Vouch, decode_checked, frame_columns, resolve_schemas
    from kafka_landing.avro_landing.read import read_hours
    from kafka_landing.avro_landing.route import classify
    from kafka_landing.kafka_slices.plan import hour_tasks
    from kafka_landing.spark_setup import open_session, session_config

    cfg = only_topic(args)
    spark = open_session(os.environ.get("SPARK_REMOTE") or defaults.SPARK_CONNECT_URL, session_config())
    client = SchemaRegistryClient({"url": args.registry})
    tasks = hour_tasks(plans(args.landing_root, args.topic, args.hour_keys))
    options = {"kafka.bootstrap.servers": args.bootstrap, "kafka.isolation.level": "read_committed"}

    def framed():
        return frame_columns(read_hours(spark, options, args.topic, tasks))

    sid = framed().select("_schema_id").first()["_schema_id"]
    writers, _ = resolve_schemas(lambda i: client.get_schema(i).schema_str, [sid], args.topic)

    def decoded():  # as the landing decodes: the bodies the body check vouches for are not decoded
        return decode_checked(framed(), sid, writers[sid], args.topic,
                              Vouch(cfg.route.field if cfg.route else None, cfg.event_time_field))

    stages = {"read": lambda: read_hours(spark, options, args.topic, tasks), "read + decode": decoded,
              "read + decode + route": lambda: classify(decoded(), cfg, args.topic, sid, writers[sid], [])}
    seconds, records = {}, set()
    for name, frame in stages.items():
        obs = Observation(f"stage-{uuid.uuid4().hex}")
        t0 = time.monotonic()
        frame().observe(obs, F.count(F.lit(1)).alias("n")).write.format("noop").mode("overwrite").save()
        seconds[name] = round(time.monotonic() - t0, 2)
        records.add(obs.get["n"])
    spark.stop()
    if len(records) != 1:
        raise BenchError(f"{args.topic}: the stages saw different numbers of records: {sorted(records)}")
    return {"records": records.pop(), "stages": seconds}


def jobs(bench: Bench) -> list[Job]:
    keys = bench.keys
    return [Job(f"{info['case']} spark_stages", "spark_stages", bench.argv(topic, keys), bench.records(topic, keys),
                f"{topic} hours {keys[0]}..{keys[-1]}, stage by stage")
            for topic, info in bench.throughput.items() if not info.get("tenfold")]


def report(bench: Bench, m: dict) -> dict:
    return {"stages": [{"case": info["case"], "records": m[f"{info['case']} spark_stages"]["records"],
                        "seconds": m[f"{info['case']} spark_stages"]["stages"]} for info in bench.throughput.values() if not info.get("tenfold")]}


CASE = Case("stages", jobs, report, {"spark_stages": contender_spark_stages}, needs=frozenset({TOPICS_DATA}))

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
