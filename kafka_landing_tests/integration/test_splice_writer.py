"""The splice writer (jvm/splice) against Spark's own Avro writer, record by record (issue 36,
item 1): the same decoded and routed records of one schema id are written both ways, and every
file must hold the same records, in the same order, under the same schema, codec and header keys,
read by fastavro and by Spark (Avro's Java reader). Hypothesis draws the schema over every Avro
type with edge values (test_value_fidelity's strategies) and the Kafka columns with theirs; the
hand-made bodies are the encodings a re-encoder would normalise away: trailing bytes after the
record, non-minimal varints, arrays in sized blocks, decimals with sign padding."""

from __future__ import annotations

import json
import struct
import subprocess
import uuid
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kafka_landing.avro_landing import avro_schemas
from kafka_landing.avro_landing.decode import decode_checked, frame_columns
from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.route import classify
from kafka_landing.avro_landing.write import SPLICE_FORMAT, NothingWritten, _group_files, write_good
from kafka_landing.defaults import JVM_DIR
from kafka_landing.spark_setup import spark_readable
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.integration.test_decode import record_schema, topic_cfg
from kafka_landing_tests.integration.test_value_fidelity import body, schema_and_records

HOUR = "2026-11-27T00"
RAW = StructType([
    StructField("topic", StringType()), StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp_ms", LongType()), StructField("key", BinaryType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))),
    StructField("value", BinaryType()),
])


def raw_frame(spark, rows: list[tuple]):
    """Records as Spark's Kafka source gives them, each claimed by frozen task 0 of HOUR."""
    df = spark.createDataFrame(rows, RAW).coalesce(1)  # one Spark task: one file per group, as landing's tasks
    return df.select("topic", "partition", "offset", F.col("timestamp_ms").alias("_kl_ms"), "key",
                     "headers", "value", F.lit(HOUR).alias("_kl_hour"), F.lit(0).alias("_kl_hour_ix"),
                     F.lit(0).cast("long").alias("_kl_chunk"))


AVRO_TOOLS = JVM_DIR / "tools" / "avro-tools-1.12.1.jar"


def avro_tools_records(path: str) -> list[str]:
    """Avro's own reader, `avro-tools tojson` in a JVM of its own: each record as JSON with sorted
    keys (map entries in any order, as `canon`)."""
    out = subprocess.run(["java", "-jar", str(AVRO_TOOLS), "tojson", path], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, f"avro-tools cannot read {path}: {out.stderr[-2000:]}"
    def parsed(line: str) -> str:
        try:
            return json.dumps(json.loads(line), sort_keys=True)
        except ValueError as exc:
            raise AssertionError(f"avro-tools wrote {line[max(0, exc.pos - 80):exc.pos + 40]!r}: {exc}") from None

    return [parsed(line) for line in out.stdout.split("\n") if line.strip()]  # not splitlines: \x85 is a line break there


def written_both_ways(spark, tmp_path, writer: dict, sid: int, rows: list[tuple],
                      avro_tools: bool = False) -> dict[bool, dict]:
    """{splice: {group: (file metadata, codec, records)}} of one write each way; `avro_tools`: and
    every file as avro-tools reads it, under "avro-tools"."""
    cfg = topic_cfg("t")
    classified = classify(decode_checked(frame_columns(raw_frame(spark, rows)), sid, writer, "t"), cfg, "t", sid,
                          writer, [])
    out = {}
    for splice in (True, False):
        store = LocalStore(str(tmp_path / uuid.uuid4().hex[:8]))
        write_good(classified, cfg, sid, writer, store, "staging", splice=splice)
        files, tools = {}, {}
        for group, rel in _group_files(store, "staging").items():
            if avro_tools:
                tools[group] = avro_tools_records(store.location(rel))
            with open(store.location(rel), "rb") as fh:
                reader = fastavro.reader(fh)
                meta = {k: (json.loads(v) if k == "avro.schema" else v) for k, v in reader.metadata.items()}
                files[group] = (meta, reader.codec, list(reader))
        # Read as landing's own Spark readers read it (time types as their numbers: Spark has none).
        readable = json.dumps(spark_readable(avro_schemas.landing_schema(writer)))
        spark_rows = spark.read.format("avro").option("avroSchema", readable).load(store.location(f"staging/schema_id={sid}")) \
            .drop("_kl_hour", "_kl_chunk", "_kl_table", "_kl_part").orderBy("_kafka_partition", "_kafka_offset")
        out[splice] = {"files": files, "spark": [canon(r.asDict(recursive=True)) for r in spark_rows.collect()],
                       "avro-tools": tools}
    return out


def canon(v):
    """A value in a form that compares as Avro means it: map entries in any order (Spark's writer
    keeps them in a hash map's order, the splice writer in the producer's), every other value by
    its repr (NaN equals NaN, -0.0 differs from 0.0, Decimal('5.0') from Decimal('5.00'))."""
    if isinstance(v, dict):
        return sorted((k, canon(x)) for k, x in v.items())
    if isinstance(v, list):
        return [canon(x) for x in v]
    return repr(v)


def assert_same(both: dict, landed: int, same_bytes: bool = True) -> None:
    """`same_bytes`: the values were produced in Avro's shortest encoding (avro-tools shows a
    decimal's bytes, not its value)."""
    spliced, encoded = both[True], both[False]
    assert sorted(spliced["files"]) == sorted(encoded["files"]), "the same files, by hour, task, table and partition"
    records = 0
    for group, (meta, codec, recs) in encoded["files"].items():
        s_meta, s_codec, s_recs = spliced["files"][group]
        assert s_meta == meta and s_codec == codec, f"{group}: header {s_meta} {s_codec}, Spark's {meta} {codec}"
        assert len(s_recs) == len(recs), f"{group}: {len(s_recs)} records spliced, {len(recs)} re-encoded"
        for i, (a, b) in enumerate(zip(s_recs, recs)):
            differ = {k: (a.get(k), b.get(k)) for k in {*a, *b} if canon(a.get(k)) != canon(b.get(k))}
            assert not differ, f"{group} record {i}, (spliced, re-encoded) by field: {differ}"
        records += len(recs)
    assert records == landed, f"{records} records written, {landed} expected to land"
    assert spliced["spark"] == encoded["spark"], "Spark's Avro reader reads both the same"
    if same_bytes:
        assert spliced["avro-tools"] == encoded["avro-tools"], "avro-tools reads both the same"


KEYS = st.one_of(st.none(), st.sampled_from([b"", b"\x00", b"k\xff"]), st.binary(max_size=6))
HEADERS = st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["", "h", "𝄞é"]),
                                                  st.one_of(st.none(), st.binary(max_size=4))), max_size=3))
TIMESTAMPS = st.one_of(st.sampled_from([-1, 0, 1, 2**41, 253_402_300_799_999]), st.integers(0, 2**42))


def _both_ways_of_a_drawn_case(case, data, spark, tmp_path, avro_tools: bool = False) -> None:
    schema, records = case
    sid = 7
    rows = [("t", data.draw(st.integers(0, 2)), offset, data.draw(TIMESTAMPS), data.draw(KEYS), data.draw(HEADERS),
             frame(sid, body(schema, r))) for offset, r in enumerate(records)]
    both = written_both_ways(spark, tmp_path, schema, sid, rows, avro_tools)
    # Records whose values cannot land (dates past 9999 ...) are dead letters either way, not written.
    landed = sum(len(f[2]) for f in both[False]["files"].values())
    assert landed > 0 or not records
    assert_same(both, landed)


SETTINGS = dict(deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@settings(max_examples=25, **SETTINGS)
@given(case=schema_and_records(), data=st.data())
def test_spliced_files_hold_the_records_spark_writes_for_every_type_and_edge_value(case, data, spark, tmp_path):
    _both_ways_of_a_drawn_case(case, data, spark, tmp_path)


@settings(max_examples=2, **SETTINGS)  # a JVM per file read
@given(case=schema_and_records(), data=st.data())
def test_avro_tools_reads_spliced_files_as_it_reads_spark_s(case, data, spark, tmp_path):
    _both_ways_of_a_drawn_case(case, data, spark, tmp_path, avro_tools=True)


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        b, z = z & 0x7F, z >> 7
        if not z:
            return out + bytes([b])
        out += bytes([b | 0x80])


def test_bodies_a_reencoder_would_normalise_land_as_the_records_they_hold(spark, tmp_path):
    """A long may take more bytes than it needs, an array may come in blocks carrying their byte
    size, a decimal's bytes may carry sign padding: the files hold the same records either way.
    Bytes after the record are no part of it for Avro's reader, but the strict walk refuses them (a
    body lands whole or not at all): that one is a dead letter, never cut."""
    writer = record_schema("Odd", [
        {"name": "n", "type": "long"},
        {"name": "xs", "type": {"type": "array", "items": "long"}},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "s", "type": "string"},
    ])
    minimal = _varint(1) + _varint(2) + _varint(5) + _varint(6) + _varint(0) + _varint(1) + b"\x05" + _varint(2) + b"ok"
    items = _varint(5) + _varint(6)
    bodies = [
        minimal,
        minimal + b"\x01\x02trailing",  # bytes after the record
        b"\x82\x80\x00" + minimal[1:],  # n = 1 in three bytes
        _varint(1) + _varint(-2) + _varint(len(items)) + items + _varint(0) + minimal[-5:],  # a sized block
        minimal[:-5] + _varint(3) + b"\x00\x00\x05" + _varint(2) + b"ok",  # 0.05 with two bytes of sign padding
        minimal[:-5] + _varint(2) + b"\xff\xfb" + _varint(2) + b"ok",  # -0.05, one byte of padding
    ]
    rows = [("t", 0, i, 1_700_000_000_000 + i, None, None, frame(3, b)) for i, b in enumerate(bodies)]
    both = written_both_ways(spark, tmp_path, writer, 3, rows, avro_tools=True)
    assert_same(both, len(bodies) - 1, same_bytes=False)
    (read,) = both[True]["avro-tools"].values()
    # avro-tools shows a decimal's bytes as they are (sign padding kept), one character per byte.
    assert [(r["_kafka_offset"], r["n"], r["xs"], int.from_bytes(r["d"].encode("latin-1"), "big", signed=True), r["s"])
            for r in map(json.loads, read)] == [(o, 1, [5, 6], 5, "ok") for o in (0, 2, 3, 4)] + [(5, 1, [5, 6], -5, "ok")]
    (_meta, _codec, recs), = both[True]["files"].values()
    assert [(r["n"], r["xs"], r["d"], r["s"]) for r in recs] == \
        [(1, [5, 6], Decimal("0.05"), "ok")] * 4 + [(1, [5, 6], Decimal("-0.05"), "ok")]


def test_a_landing_schema_that_does_not_extend_the_writer_schema_is_refused_before_any_task(spark, tmp_path):
    writer = record_schema("W", [{"name": "n", "type": "long"}])
    other = record_schema("W", [{"name": "n", "type": "int"}])
    classified = classify(decode_checked(frame_columns(raw_frame(spark, [("t", 0, 0, 0, None, None,
                                                                          frame(1, _varint(1)))])), 1, writer, "t"),
                          topic_cfg("t"), "t", 1, writer, [])
    store = LocalStore(str(tmp_path))
    good = classified.select("_body", *avro_schemas.META_COLUMNS)
    with pytest.raises(Exception, match="is not the writer schema's field n"):
        (good.write.format(SPLICE_FORMAT).option("avroSchema", json.dumps(avro_schemas.landing_schema(other)))
         .option("writerSchema", json.dumps(writer)).save(store.location("bad")))
    assert not store.walk("bad", ".avro")


def test_the_header_says_which_spark_wrote_it_as_spark_s_writer_does(spark, tmp_path):
    writer = record_schema("V", [{"name": "x", "type": "double"}])
    rows = [("t", 0, 0, 0, None, None, frame(2, struct.pack("<d", float("nan"))))]
    both = written_both_ways(spark, tmp_path, writer, 2, rows)
    (meta, codec, recs), = both[True]["files"].values()
    assert codec == "snappy" and meta["org.apache.spark.version"] == spark.version
    assert repr(recs[0]["x"]) == "nan"
    assert_same(both, 1)


def test_each_record_is_decoded_once_whatever_the_checks_read_of_it(spark):
    """The value checks read many fields of the decoded record, and the write reads none of them
    (it writes the body): the decode must stay one expression, evaluated once per record, not be
    copied into every check (Spark 4.2 folds `rand() >= 0`, which once kept it apart: the ~1 KB
    case decoded each record 15 times)."""
    writer = record_schema("Many", [
        {"name": "a", "type": "string"}, {"name": "b", "type": "string"},
        {"name": "c", "type": {"type": "array", "items": {"type": "record", "name": "I", "fields": [
            {"name": "d", "type": "string"}, {"name": "e", "type": "string"}]}}},
        {"name": "f", "type": {"type": "map", "values": "string"}}])
    # Rows from a range, not a local relation: the optimiser would evaluate the plan over those itself.
    raw = spark.range(1000).select(
        F.lit("t").alias("topic"), F.lit(0).alias("partition"), F.col("id").alias("offset"),
        F.col("id").alias("_kl_ms"), F.lit(None).cast("binary").alias("key"),
        F.lit(None).cast(RAW["headers"].dataType).alias("headers"),
        # field a: one digit of the offset, so no part of the plan is a constant the optimiser folds
        F.concat(F.lit(frame(1, _varint(1))), (F.col("id") % 10).cast("string").cast("binary"),
                 F.lit(_varint(1) + b"b" + _varint(0) + _varint(0))).alias("value"),
        F.lit(HOUR).alias("_kl_hour"), F.lit(0).alias("_kl_hour_ix"), F.lit(0).cast("long").alias("_kl_chunk"))
    classified = classify(decode_checked(frame_columns(raw), 1, writer, "t"), topic_cfg("t"), "t", 1, writer, [])
    good = classified.where(F.col("_reason").isNull()).select("_body", *avro_schemas.META_COLUMNS)
    physical = good._explain_string(mode="simple").split("== Physical Plan ==")[-1]
    assert physical.count("from_avro(") == 1, physical


def test_a_write_that_fails_in_its_tasks_says_why_not_that_there_was_nothing_to_write(spark, tmp_path):
    """A task that fails (here: a record with no body, which no landing hands the writer) fails the
    write with its own message. Only the committer's own complaint on a bucket (its `_temporary`
    folder never made, because no task wrote anything) means there was nothing to write."""
    writer = record_schema("W", [{"name": "n", "type": "long"}])
    rows = [("t", 0, 0, 1_700_000_000_000, None, None, None)]  # a null value: no body
    unchecked = frame_columns(raw_frame(spark, rows)).withColumn("_kl_table", F.lit("t")).withColumn("_reason", F.lit(None))
    with pytest.raises(Exception) as failed:
        write_good(unchecked, topic_cfg("t"), 3, writer, LocalStore(str(tmp_path)), "staging")
    assert not isinstance(failed.value, NothingWritten), failed.value
    # Spark Connect hands back the task's failure without its cause (that is in the server's log);
    # a classic session's message carries the splice writer's own.
    message = str(failed.value)
    assert "TASK_WRITE_FAILED" in message or "has no body" in message, message[:2000]
