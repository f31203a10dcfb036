"""`make bench`: landing throughput and memory, side by side with the alternatives.

One run, one broker, the same data for every contender:

  kafka_landing   slices + landing through Dagster, a range of hours in one run
  spark_by_hand   the same reads, decoding and Avro writes as a plain Spark job
  python_valve    one Python process: confluent-kafka + fastavro, row by row
  librdkafka_raw  reading the same offsets without decoding: the physical limit

Each contender runs in its own process; its peak memory is the RSS of its whole
process tree (the JVM included), sampled every 100 ms. Every contender must
land exactly the records the slices hold, so a fast wrong answer cannot win.

    python -m kafka_landing.bench [--messages 40000] [--hours 4] [--out bench/results]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"type": "record", "name": "Click", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"}, {"name": "url", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}, {"name": "score", "type": "double"},
]}
LARGE = {"type": "record", "name": "Order", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "name", "type": "string"}, {"name": "email", "type": "string"}, {"name": "address", "type": "string"}]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"},
        {"name": "note", "type": "string"}]}}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}
PARTITIONS = 4


# --- data -----------------------------------------------------------------------

def _record(kind: str, i: int, rng: random.Random, ts: int) -> dict:
    if kind == "small":
        return {"id": i, "user": f"user-{rng.randrange(10**6):06d}", "url": "https://shop.example/p/" + "x" * rng.randrange(60, 110),
                "ts": ts, "score": rng.random()}
    return {"id": i, "ts": ts, "customer": {"name": "Customer %d" % rng.randrange(10**5), "email": "someone@example.com",
                                           "address": "Street " + "y" * 60},
            "items": [{"sku": f"SKU-{rng.randrange(10**4)}", "qty": rng.randrange(1, 9), "price": rng.random() * 100,
                       "note": "n" * rng.randrange(80, 120)} for _ in range(5)]}


def produce_bench_topic(bootstrap: str, registry_url: str, topic: str, kind: str, hours: list[datetime], per_hour: int) -> int:
    import fastavro
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from kafka_landing.avro_landing.framing import frame
    from kafka_landing.demo.generate import ensure_topics, register

    ensure_topics(bootstrap, {topic: PARTITIONS}, config={"retention.ms": "-1"})
    schema = SMALL if kind == "small" else LARGE
    sid = register(SchemaRegistryClient({"url": registry_url}), f"{topic}-value", schema)
    parsed = fastavro.parse_schema(schema)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    rng, size, n = random.Random(1), 0, 0
    for hour in hours:
        base = int(hour.timestamp() * 1000)
        for i in range(per_hour):
            ts = base + (i * 3_600_000) // per_hour
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, _record(kind, n, rng, ts))
            value = frame(sid, buf.getvalue())
            size += len(value)
            while True:
                try:
                    producer.produce(topic, value=value, key=str(n).encode(), partition=n % PARTITIONS, timestamp=ts)
                    break
                except BufferError:
                    producer.poll(0.1)
            n += 1
            if n % 10000 == 0:
                producer.poll(0)
    producer.flush(120)
    return size


# --- contenders (each runs in its own process) --------------------------------------

def _plans(landing_root: str, topic: str, hours: list[str]):
    from kafka_landing.kafka_slices.freeze import frozen_slice
    from kafka_landing.naming import hour_from_key
    from kafka_landing.store import open_store

    store = open_store(landing_root)
    return [frozen_slice(store, topic, hour_from_key(h)) for h in hours]


def contender_kafka_landing(args) -> int:
    """Through Dagster as a user would: the land_hourly job over a range, one run."""
    import yaml
    from dagster import DagsterInstance

    # Only this contender's topic: the job then lands exactly the data being measured.
    full = yaml.safe_load(Path(os.environ["KAFKA_LANDING_TOPICS_CONFIG"]).read_text())
    mine = Path(args.out_dir) / f"topics_{args.topic}.yaml"
    mine.write_text(yaml.safe_dump({**full, "topics": {args.topic: full["topics"][args.topic]}}))
    os.environ["KAFKA_LANDING_TOPICS_CONFIG"] = str(mine)
    from kafka_landing.definitions import build_definitions, build_resources

    defs = build_definitions()
    job = defs.resolve_job_def("land_hourly")
    with DagsterInstance.ephemeral() as instance:
        if args.mode == "runs":  # one run per hour, in one process (the Spark session is reused)
            for h in args.hours:
                assert job.execute_in_process(instance=instance, resources=build_resources(), partition_key=h).success
        else:
            result = job.execute_in_process(instance=instance, resources=build_resources(), tags={
                "dagster/asset_partition_range_start": args.hours[0], "dagster/asset_partition_range_end": args.hours[-1]})
            assert result.success
    from kafka_landing.manifests import DoneFile
    from kafka_landing.naming import done_file_path, hour_from_key
    from kafka_landing.store import open_store

    store = open_store(args.landing_root)
    return sum(DoneFile.from_dict(store.read_json(done_file_path("bench", args.table, hour_from_key(h)))).rows
               for h in args.hours)


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
    for plan in _plans(args.landing_root, args.topic, args.hours):
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
        out = df.select(from_avro(F.expr("substring(value, 6)"), schema).alias("r"), "topic", "partition", "offset", "timestamp", "key") \
                .select("r.*", "topic", "partition", "offset", "timestamp", "key")
        target = f"{args.out_dir}/spark_by_hand/{args.topic}/{plan.hour}"
        out.write.mode("overwrite").partitionBy("partition").format("avro").save(target)
        total += spark.read.format("avro").load(target).count()
    spark.stop()
    return total


def contender_python_valve(args) -> int:
    """One Python process consuming the same offsets and writing Avro row by row."""
    import fastavro
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from kafka_landing.avro_landing.framing import unframe

    registry = SchemaRegistryClient({"url": args.registry})
    schemas: dict[int, dict] = {}
    total = 0
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    for plan in _plans(args.landing_root, args.topic, args.hours):
        for p in plan.partitions:
            if not p.records:
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
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    total = 0
    for plan in _plans(args.landing_root, args.topic, args.hours):
        for p in plan.partitions:
            if not p.records:
                continue
            consumer.assign([TopicPartition(args.topic, p.partition, p.start)])
            offset = p.start
            while offset < p.end:
                for msg in consumer.consume(min(10000, p.end - offset), timeout=5):
                    if not msg.error() and msg.offset() < p.end:
                        offset = msg.offset() + 1
                        total += 1
    consumer.close()
    return total


CONTENDERS = {
    "kafka_landing": contender_kafka_landing,
    "spark_by_hand": contender_spark_by_hand,
    "python_valve": contender_python_valve,
    "librdkafka_raw": contender_librdkafka_raw,
}


# --- measuring -------------------------------------------------------------------------

def _tree_rss(pid: int) -> int:
    """RSS in bytes of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            children.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def measure(name: str, env: dict, argv: list[str]) -> dict:
    import tempfile

    # Output goes to files, not pipes: a full pipe would stall the contender.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kafka_landing.bench", "--contender", name, *argv],
                                stdout=out, stderr=err, text=True, env=env)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.1)
        seconds = time.monotonic() - t0
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"contender {name} failed:\n{err.read()[-4000:]}")
        result = json.loads(out.read().strip().splitlines()[-1])
    return {"contender": name, "seconds": round(seconds, 2), "records": result["records"], "peak_rss_mb": round(peak / 2**20)}


# --- the benchmark ---------------------------------------------------------------------

CASES = (("small", 1), ("large", 1), ("small", 4))


def run(messages: int, hours: int, out: Path, cases=CASES, day_hours: int = 24) -> dict:
    """`cases` and `day_hours` shrink only for the test that keeps the benchmark working."""
    from dagster import DagsterInstance

    from kafka_landing import devstack
    from kafka_landing.definitions import build_definitions, build_resources
    from kafka_landing.naming import ONE_HOUR, floor_hour, hour_key

    devstack.up()
    out.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:6]
    work = out / f"work_{run_id}"
    landing_root = work / "landing"
    work.mkdir(parents=True)
    now = datetime.now(timezone.utc)
    per_hour = max(1, messages // hours)
    topics_cfg, data = {}, {}
    first_hour = floor_hour(now) - ONE_HOUR * (hours + 30)
    hour_list = [first_hour + ONE_HOUR * i for i in range(hours)]
    for kind, scale in cases:
        topic = f"bench_{kind}_{scale}x_{run_id}"
        size = produce_bench_topic(devstack.BOOTSTRAP, devstack.REGISTRY_URL, topic, kind, hour_list, per_hour * scale)
        topics_cfg[topic] = {"dataset": "bench", "table": f"{kind}_{scale}x", "rows_per_task": 100_000}
        data[topic] = {"kind": kind, "scale": scale, "bytes": size}
    day = [first_hour - ONE_HOUR * (day_hours - i) for i in range(day_hours)]
    day_topic = f"bench_day_{run_id}"
    produce_bench_topic(devstack.BOOTSTRAP, devstack.REGISTRY_URL, day_topic, "small", day, max(1, messages // day_hours))
    topics_cfg[day_topic] = {"dataset": "bench", "table": "day", "rows_per_task": 100_000}
    empty_topic = f"bench_empty_{run_id}"
    topics_cfg[empty_topic] = {"dataset": "bench", "table": "empty"}
    from kafka_landing.demo.generate import ensure_topics

    ensure_topics(devstack.BOOTSTRAP, {empty_topic: 1})
    cfg_path = work / "topics.yaml"
    import yaml

    cfg_path.write_text(yaml.safe_dump({"defaults": {"grace_minutes": 0}, "topics": topics_cfg}))
    env = {**os.environ, "KAFKA_LANDING_TOPICS_CONFIG": str(cfg_path), "KAFKA_LANDING_ROOT": str(landing_root),
           "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    # Freeze the slices once, so every contender reads exactly the same offsets.
    saved = {k: os.environ.get(k) for k in ("KAFKA_LANDING_TOPICS_CONFIG", "KAFKA_LANDING_ROOT")}
    os.environ.update({k: env[k] for k in saved})
    try:
        defs = build_definitions()
        resources = build_resources()
    finally:  # leave the caller's environment as it was
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    slice_assets = [defs.get_assets_def(k) for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[0] == "kafka_slices"]
    from dagster import materialize

    keys = [hour_key(h) for h in hour_list]
    day_keys = [hour_key(h) for h in day]
    with DagsterInstance.ephemeral() as inst:
        for k in keys + day_keys:
            assert materialize(slice_assets, partition_key=k, resources=resources, instance=inst).success
    results = []
    for topic, info in data.items():
        plans = _plans(str(landing_root), topic, keys)
        expected = sum(p.records for p in plans)
        mb = info["bytes"] / 2**20
        for name in CONTENDERS:
            r = measure(name, env, _argv(topic, topics_cfg[topic]["table"], keys, landing_root, work))
            if r["records"] != expected:
                raise RuntimeError(f"{name} landed {r['records']} records of {topic}, the slices hold {expected}")
            r.update(case=f"{info['kind']} {info['scale']}x", topic=topic, messages_per_s=round(expected / r["seconds"]),
                     mb_per_s=round(mb / r["seconds"], 2))
            results.append(r)
            print(f"{r['case']:<10} {name:<15} {r['seconds']:>7.1f}s {r['messages_per_s']:>9} msg/s {r['peak_rss_mb']:>6} MB",
                  flush=True)
    # Fixed cost: landing an empty hour (a fresh process; Spark is never started).
    fixed = measure("kafka_landing", env, _argv(empty_topic, "empty", keys[:1], landing_root, work))
    # 24 hours: one backfill run against 24 single-hour runs.
    backfill = measure("kafka_landing", env, _argv(day_topic, "day", day_keys, landing_root, work))
    singles = measure("kafka_landing", env, _argv(day_topic, "day", day_keys, landing_root, work) + ["--mode", "runs"])
    report = {
        "when": now.isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                    "python": platform.python_version()},
        "versions": _versions(),
        "parameters": {"messages": messages, "hours": hours, "partitions": PARTITIONS},
        "results": results,
        "empty_hour": fixed,
        "backfill_24h": {"one_run": backfill, "24_runs_one_process": singles},
    }
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    (out / "bench.md").write_text(markdown(report))
    print(markdown(report))
    return report


def _argv(topic: str, table: str, hour_keys: list[str], landing_root: Path, work: Path) -> list[str]:
    return ["--topic", topic, "--table", table, "--hour-keys", *hour_keys, "--landing-root", str(landing_root),
            "--out-dir", str(work)]


def _versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("dagster", "pyspark", "confluent-kafka", "fastavro")}


def markdown(report: dict) -> str:
    lines = [f"Machine: {report['machine']['cores']} cores, {report['machine']['memory_gb']} GB; "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
             f"Messages: {report['parameters']['messages']} per case over {report['parameters']['hours']} hours "
             f"and {report['parameters']['partitions']} partitions (4x: four times as many per hour).", "",
             "| case | contender | seconds | msg/s | MB/s | peak RSS MB | kafka_landing time / this |",
             "|---|---|---:|---:|---:|---:|---:|"]
    by_case: dict[str, dict] = {}
    for r in report["results"]:
        by_case.setdefault(r["case"], {})[r["contender"]] = r
    for case, rs in by_case.items():
        kl = rs["kafka_landing"]["seconds"]
        for name, r in rs.items():
            lines.append(f"| {case} | {name} | {r['seconds']} | {r['messages_per_s']} | {r['mb_per_s']} | {r['peak_rss_mb']} | "
                         f"{kl / r['seconds']:.2f} |")
    e, b = report["empty_hour"], report["backfill_24h"]
    lines += ["", f"Empty hour, fresh process (slices + landing, Dagster start-up included): {e['seconds']} s, {e['peak_rss_mb']} MB.",
              f"24 hours of the small case: one backfill run {b['one_run']['seconds']} s; "
              f"24 single-hour runs in one process {b['24_runs_one_process']['seconds']} s."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=int(os.environ.get("BENCH_MESSAGES", "40000")))
    ap.add_argument("--hours", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    # Internal: run one contender in this process.
    ap.add_argument("--contender")
    ap.add_argument("--topic")
    ap.add_argument("--table")
    ap.add_argument("--landing-root")
    ap.add_argument("--out-dir")
    ap.add_argument("--hour-keys", nargs="+")
    ap.add_argument("--mode", default="range")
    ap.add_argument("--bootstrap")
    ap.add_argument("--registry")
    args = ap.parse_args()
    if args.contender:
        from kafka_landing import devstack

        args.hours = args.hour_keys
        args.bootstrap = args.bootstrap or devstack.BOOTSTRAP
        args.registry = args.registry or devstack.REGISTRY_URL
        print(json.dumps({"records": CONTENDERS[args.contender](args)}))
        return
    run(args.messages, args.hours, args.out)


if __name__ == "__main__":
    main()
