"""Landing throughput: each throughput topic's hours landed by every contender, the same frozen
offsets for all, each in a fresh process.

  kafka_landing       slices + landing through Dagster (the topic's land_<topic> job), a range of hours in one run
  kafka_landing_cold  the same on a classic Spark session its run starts: what every run paid before the warm engine
  spark_by_hand       the same reads, decoding and Avro writes as a plain Spark job
  python_valve        one Python process: confluent-kafka + fastavro, row by row
  librdkafka_raw      reading the same offsets without decoding, in Python
  java_consumer_raw   the same with Kafka's own Java consumer (its consumer performance tool):
                      the physical limit for a JVM reader, which the warm engine is

The 10x cases (`world.TENFOLD`) are run by `TENFOLD_CONTENDERS` only, python_valve on a sample.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from kafka_landing_tools.bench.measure import Job
from kafka_landing_tools.bench.processes import contender_kafka_landing, plans, sample_part
from kafka_landing_tools.bench.world import ROOT, TOPICS_DATA, Bench, Case

# Set to 1 (the test that proves a wrong count fails the benchmark), librdkafka_raw
# reads one record less than its slices hold.
SHORT_READ_ENV = "KAFKA_LANDING_BENCH_RAW_READS_ONE_LESS"


def contender_kafka_landing_cold(args) -> int:
    """kafka_landing on a classic Spark session its run starts (KAFKA_LANDING_SPARK=classic), not on
    the stack's warm Spark Connect server: what every run paid before the warm engine."""
    os.environ["KAFKA_LANDING_SPARK"] = "classic"
    os.environ.pop("SPARK_REMOTE", None)
    return contender_kafka_landing(args)


def contender_spark_by_hand(args) -> int:
    """What a Spark user writes by hand for the same offsets: read, strip the header, from_avro, write Avro."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from kafka_landing.spark_setup import spark_config

    builder = SparkSession.builder
    for k, v in spark_config().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    registry = SchemaRegistryClient({"url": args.registry})
    total = 0
    for plan in plans(args.landing_root, args.topic, args.hour_keys):
        parts = [p for p in plan.partitions if p.records]
        if not parts:
            continue
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("assign", json.dumps({args.topic: [p.partition for p in parts]}))
              .option("startingOffsets", json.dumps({args.topic: {str(p.partition): p.start for p in parts}}))
              .option("endingOffsets", json.dumps({args.topic: {str(p.partition): p.end for p in parts}})).load())
        df = df.withColumn("sid", F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("int"))
        sid = df.select("sid").first()["sid"]
        schema = registry.get_schema(sid).schema_str
        out = df.select(from_avro(F.expr("substring(value, 6)"), schema).alias("r"), "topic", "partition", "offset",
                        "timestamp", "key").select("r.*", "topic", "partition", "offset", "timestamp", "key")
        target = f"{args.out_dir}/spark_by_hand/{args.topic}/{plan.hour}"
        out.write.mode("overwrite").partitionBy("partition").format("avro").save(target)
        total += spark.read.format("avro").load(target).count()
    spark.stop()
    return total


def _consumer(bootstrap: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "fetch.max.bytes": 52428800})


def contender_python_valve(args) -> int:
    """One Python process consuming the same offsets and writing Avro row by row."""
    import io

    import fastavro
    from confluent_kafka import TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from kafka_landing.avro_landing.framing import unframe

    registry = SchemaRegistryClient({"url": args.registry})
    schemas: dict[int, dict] = {}
    total = 0
    consumer = _consumer(args.bootstrap)
    sample = sample_part(args.landing_root, args.topic, args.hour_keys) if args.sample else None
    for plan in plans(args.landing_root, args.topic, args.hour_keys):
        for p in plan.partitions:
            if not p.records or (sample is not None and p != sample):
                continue
            consumer.assign([TopicPartition(args.topic, p.partition, p.start)])
            rows, offset = [], p.start
            while offset < p.end:
                for msg in consumer.consume(min(10000, p.end - offset), timeout=5):
                    if msg.error() or msg.offset() >= p.end:
                        continue
                    offset = msg.offset() + 1
                    sid, body = unframe(msg.value())
                    if sid not in schemas:
                        schemas[sid] = fastavro.parse_schema(json.loads(registry.get_schema(sid).schema_str))
                    rec = fastavro.schemaless_reader(io.BytesIO(body), schemas[sid])
                    rec.update(_kafka_partition=msg.partition(), _kafka_offset=msg.offset())
                    rows.append(rec)
            out_schema = {**json.loads(registry.get_schema(sid).schema_str)}
            out_schema["fields"] = out_schema["fields"] + [{"name": "_kafka_partition", "type": "int"},
                                                           {"name": "_kafka_offset", "type": "long"}]
            target = Path(args.out_dir) / "python_valve" / args.topic / plan.hour
            target.mkdir(parents=True, exist_ok=True)
            with open(target / f"{p.partition}.avro", "wb") as f:
                fastavro.writer(f, fastavro.parse_schema(out_schema), rows, codec="deflate")
            total += len(rows)
    consumer.close()
    return total


def contender_librdkafka_raw(args) -> int:
    """The physical limit: the same offsets read, nothing decoded or written."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(args.bootstrap)
    short = os.environ.get(SHORT_READ_ENV) == "1"
    total = 0
    for plan in plans(args.landing_root, args.topic, args.hour_keys):
        for p in plan.partitions:
            if not p.records:
                continue
            end = p.end - 1 if short else p.end
            short = False
            consumer.assign([TopicPartition(args.topic, p.partition, p.start)])
            offset = p.start
            while offset < end:
                for msg in consumer.consume(min(10000, end - offset), timeout=5):
                    if not msg.error() and msg.offset() < end:
                        offset = msg.offset() + 1
                        total += 1
    consumer.close()
    return total


def contender_java_consumer_raw(args) -> int:
    """Kafka's Java consumer reading the same offsets, nothing decoded or written: a throughput topic
    holds only its hours' records, so its earliest offsets on are the slices' offsets."""
    import subprocess

    total = sum(p.records for plan in plans(args.landing_root, args.topic, args.hour_keys) for p in plan.partitions)
    if not total:
        return 0
    done = subprocess.run(
        ["java", "-Xmx1g", "-cp", str(ROOT / ".jvm" / "kafka" / "*"), "org.apache.kafka.tools.ConsumerPerformance",
         "--bootstrap-server", args.bootstrap, "--topic", args.topic, "--messages", str(total),
         "--group", f"bench-{uuid.uuid4().hex}", "--timeout", "60000", "--hide-header"],
        capture_output=True, text=True, check=True)
    # One CSV line: start, end, MB, MB/s, messages, messages/s, rebalance ms, fetch ms, fetch MB/s, fetch msg/s.
    return int(done.stdout.strip().splitlines()[-1].split(",")[4])


CONTENDERS = {
    "kafka_landing": contender_kafka_landing,
    "kafka_landing_cold": contender_kafka_landing_cold,
    "spark_by_hand": contender_spark_by_hand,
    "python_valve": contender_python_valve,
    "librdkafka_raw": contender_librdkafka_raw,
    "java_consumer_raw": contender_java_consumer_raw,
}


# The contenders of the 10x cases: the others take minutes there (spark_by_hand about 20 s per 300,000
# records, the cold engine a JVM's start on top of the warm engine's work); python_valve lands a sample.
TENFOLD_CONTENDERS = ("kafka_landing", "python_valve", "librdkafka_raw", "java_consumer_raw")
SAMPLED = "python_valve"


def _names(bench: Bench, info: dict) -> tuple[str, ...]:
    names = bench.contenders or tuple(CONTENDERS)
    return tuple(n for n in names if n in TENFOLD_CONTENDERS) if info.get("tenfold") else names


def _sampled(info: dict, name: str) -> bool:
    return bool(info.get("tenfold")) and name == SAMPLED


def jobs(bench: Bench) -> list[Job]:
    keys = bench.keys
    return [Job(f"{info['case']} {name}", name, bench.argv(topic, keys, *(["--sample"] if sample else [])),
                bench.sample_records(topic, keys) if sample else bench.records(topic, keys),
                f"{topic} hours {keys[0]}..{keys[-1]}" + (", a sample: the first hour's first partition" if sample else ""))
            for topic, info in bench.throughput.items() for name in _names(bench, info)
            for sample in (_sampled(info, name),)]


def throughput_row(info: dict, m: dict, cores: int, sample: bool = False) -> dict:
    """msg/s and MB/s of what the contender landed: a sample's MB are its share of the case's."""
    s = m["seconds"]
    mb = info["mb"] * m["records"] / info["messages"] if sample else info["mb"]
    return {"case": info["case"], "topic": info["topic"], "messages": info["messages"], "mb": info["mb"],
            "tenfold": bool(info.get("tenfold")), "sample": sample, **m,
            "messages_per_s": round(m["records"] / s), "mb_per_s": round(mb / s, 2),
            "messages_per_s_per_core": round(m["records"] / s / cores), "mb_per_s_per_core": round(mb / s / cores, 2)}


def report(bench: Bench, m: dict) -> dict:
    cores = os.cpu_count() or 1
    return {"throughput": [throughput_row(info, m[f"{info['case']} {name}"], cores, _sampled(info, name))
                           for info in bench.throughput.values() for name in _names(bench, info)]}


CASE = Case("throughput", jobs, report, CONTENDERS, needs=frozenset({TOPICS_DATA}))

if __name__ == "__main__":
    from kafka_landing_tools.bench.options import run_alone

    run_alone(CASE)
