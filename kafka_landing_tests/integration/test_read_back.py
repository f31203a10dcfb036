"""What used to fail a landing after it had written everything (review 2026-11-28 S3, S6; issue 46),
both ways, on the real broker, registry and Spark: the read-back that names each written file
never fails on a value the landing chose to land, a Kafka timestamp outside years 1-9999 is a dead
letter every reader can read, and a writer schema whose decimal fastavro refuses makes its records
dead letters instead of failing every hour of its id."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import fastavro
from pyspark.sql import functions as F

from kafka_landing.avro_landing.framing import frame
from kafka_landing.avro_landing.route import EPOCH_MS_YEAR_1, EPOCH_MS_YEAR_10000
from kafka_landing.naming import to_millis
from kafka_landing_tests.integration.test_decode import HOUR, avro_body, record_schema, register, topic_cfg
from kafka_landing_tests.integration.test_decode import sr  # noqa: F401 - a fixture
from kafka_landing_tests.integration.test_direct_landing import assert_same_landing, landed_both_ways
from kafka_landing_tests.integration.test_splice_writer import avro_tools_records
from kafka_landing_tools.demo.generate import produce


def produced_and_landed(bootstrap, spark, kafka, registry, tmp_path, topic: str, sid: int, values: list[bytes],
                        stamps: list[int] | None = None, **cfg) -> dict[bool, tuple]:
    """`values` produced to `topic`, a second apart in HOUR unless `stamps` says, then the frozen
    HOUR landed each way (test_direct_landing.landed_both_ways), the likely id `sid`."""
    stamps = stamps or [to_millis(HOUR + timedelta(seconds=i + 1)) for i in range(len(values))]
    produce(bootstrap, [(topic, 0, ts, None, v, None, None, None, None) for ts, v in zip(stamps, values)])
    return landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic, **cfg), sid)


def test_a_time_of_day_past_24_h_in_the_first_and_last_block_never_fails_the_read_back(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """The review's s_time_of_day.py: one record of time-millis 90,000,000 ("25:00") between two
    good ones, all in one block. It lands or is a dead letter (the body check's call); either way
    the hour publishes, and no message blames Spark for what fastavro could not read."""
    writer = record_schema("S3", [{"name": "n", "type": "long"},
                                  {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}}])
    raw = record_schema("S3", [{"name": "n", "type": "long"}, {"name": "at", "type": "int"}])
    topic = make_topic()
    sid = register(sr, topic, writer)
    values = [frame(sid, avro_body(raw, {"n": n, "at": at})) for n, at in ((0, 3_600_000), (1, 90_000_000),
                                                                         (2, 7_200_000))]
    both = produced_and_landed(bootstrap, spark, kafka, registry, tmp_path, topic, sid, values)  # each published
    assert assert_same_landing(both) + both[True][0].dead_letters.rows == 3


FAR = [EPOCH_MS_YEAR_10000 - 1, EPOCH_MS_YEAR_10000, EPOCH_MS_YEAR_10000 + 1, EPOCH_MS_YEAR_1 - 1]


def test_a_kafka_timestamp_outside_years_1_to_9999_is_a_dead_letter_and_its_hour_publishes(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """The review's s_kafka_timestamp_e2e.py: records stamped 9999-12-31T23:59:59.999, one and two
    milliseconds later, and one millisecond before year 1, each between records of a closed hour.
    Planning refuses the far-future ones by default and advises `on_future_timestamp: land`; with
    it the hour publishes, the same both ways: the last millisecond of 9999 lands, the others are
    dead letters whose reason gives Kafka's milliseconds (Spark's Kafka source moves a timestamp
    before 1582 by days: the reason's are Kafka's), and whose `timestamp` column is null, which
    fastavro, Spark and avro-tools all read."""
    topic = make_topic(config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    writer = record_schema("S6", [{"name": "n", "type": "long"}])
    sid = register(sr, topic, writer)
    in_hour = [to_millis(HOUR + timedelta(seconds=i + 1)) for i in range(len(FAR) + 1)]
    stamps = [ts for pair in zip(in_hour, FAR) for ts in pair] + in_hour[-1:]  # offsets 1, 3, 5, 7: FAR
    values = [frame(sid, avro_body(writer, {"n": i})) for i in range(len(stamps))]
    both = produced_and_landed(bootstrap, spark, kafka, registry, tmp_path, topic, sid, values, stamps,
                               on_future_timestamp="land")
    assert assert_same_landing(both) == len(stamps) - 3
    result, store, _ = both[False]
    assert result.dead_letters.by_reason == {
        f"Kafka timestamp {ms} ms is out of range (before year 1 or after 9999)": 1 for ms in FAR[1:]}
    [dead_file] = result.dead_letters.files
    path = store.location(dead_file.path)
    with open(Path(path), "rb") as f:
        dead = list(fastavro.reader(f))
    assert [(r["offset"], r["timestamp"]) for r in dead] == [(3, None), (5, None), (7, None)]
    read_by_spark = spark.read.format("avro").load(path).select("offset", F.col("timestamp").isNull().alias("null"))
    assert sorted(tuple(r) for r in read_by_spark.collect()) == [(3, True), (5, True), (7, True)]
    assert ['"timestamp": null' in r for r in avro_tools_records(path)] == [True, True, True]


def test_a_writer_schema_whose_decimal_fastavro_refuses_makes_its_records_dead_letters_and_the_hour_publishes(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """A decimal whose scale exceeds its precision: the registry takes it (Avro's Java parser
    ignores the decimal), fastavro refuses the schema, so a landing file of it failed the read-back
    of every hour of the id for good. Its records are dead letters naming the field; another id's
    records in the same hour land."""
    bad = record_schema("Price", [{"name": "n", "type": "long"},
                                  {"name": "p", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4,
                                                         "scale": 6}}])
    good = record_schema("Plain", [{"name": "n", "type": "long"}])
    topic = make_topic()
    bad_sid, good_sid = register(sr, topic, bad), register(sr, topic, good)
    raw = record_schema("Price", [{"name": "n", "type": "long"}, {"name": "p", "type": "bytes"}])
    values = [frame(bad_sid, avro_body(raw, {"n": i, "p": b"\x01\x02"})) for i in range(2)]
    values.append(frame(good_sid, avro_body(good, {"n": 9})))
    both = produced_and_landed(bootstrap, spark, kafka, registry, tmp_path, topic, bad_sid, values)
    assert assert_same_landing(both) == 1
    assert both[True][0].dead_letters.by_reason == {
        f"schema id {bad_sid} has an invalid decimal: field 'p' scale 6 is greater than its precision 4 (Avro's Java "
        "parser ignores the decimal, fastavro refuses the schema): fix the producer's schema": 2}


YEAR_1000_MS = -30_610_224_000_000  # 1000-01-01T00:00Z
BEFORE_GREGORIAN_MS = -12_219_292_800_001  # 1582-10-14T23:59:59.999Z: Julian 1582-10-04, the calendar's last


def test_a_kafka_timestamp_before_1582_lands_as_kafka_has_it_both_ways(
        make_topic, bootstrap, sr, registry, kafka, spark, tmp_path):
    """Spark's Kafka source reads a timestamp through java.sql.Timestamp, whose calendar is Julian
    before 1582-10-15: the decoding way landed 1000-01-01 as 0999-12-27, while the direct way
    landed Kafka's milliseconds. Both land Kafka's now."""
    topic = make_topic()
    writer = record_schema("Old", [{"name": "n", "type": "long"}])
    sid = register(sr, topic, writer)
    old = [YEAR_1000_MS, EPOCH_MS_YEAR_1, BEFORE_GREGORIAN_MS]
    in_hour = [to_millis(HOUR + timedelta(seconds=i + 1)) for i in range(len(old) + 1)]
    stamps = [ts for pair in zip(in_hour, old) for ts in pair] + in_hour[-1:]  # offsets 1, 3, 5: old
    values = [frame(sid, avro_body(writer, {"n": i})) for i in range(len(stamps))]
    both = produced_and_landed(bootstrap, spark, kafka, registry, tmp_path, topic, sid, values, stamps)
    assert assert_same_landing(both) == len(stamps)
    result, store, _ = both[False]
    landed = {r["_kafka_offset"]: r["_kafka_timestamp"] for f in result.done["t"].files
              for r in fastavro.reader(open(Path(store.location(f.path)), "rb"))}
    assert [landed[o] for o in (1, 3, 5)] == [datetime(1000, 1, 1, tzinfo=timezone.utc),
                                              datetime(1, 1, 1, tzinfo=timezone.utc),
                                              datetime(1582, 10, 14, 23, 59, 59, 999000, tzinfo=timezone.utc)]
