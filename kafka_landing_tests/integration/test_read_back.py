"""What used to fail a landing after it had written everything (review 2026-11-28 S3; issue 46),
both ways, on the real broker, registry and Spark: the read-back that names each written file
never fails on a value the landing chose to land."""

from __future__ import annotations

from datetime import timedelta

from kafka_landing.avro_landing.framing import frame
from kafka_landing.naming import to_millis
from kafka_landing_tests.integration.test_decode import HOUR, avro_body, record_schema, register, topic_cfg
from kafka_landing_tests.integration.test_decode import sr  # noqa: F401 - a fixture
from kafka_landing_tests.integration.test_direct_landing import assert_same_landing, landed_both_ways
from kafka_landing_tools.demo.generate import produce


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
    bodies = [avro_body(raw, {"n": n, "at": at}) for n, at in ((0, 3_600_000), (1, 90_000_000), (2, 7_200_000))]
    produce(bootstrap, [(topic, 0, to_millis(HOUR + timedelta(seconds=1)), b"k", frame(sid, b), None, None, None, None)
                        for b in bodies])
    both = landed_both_ways(spark, kafka, registry, tmp_path, topic_cfg(topic), sid)  # each published
    assert assert_same_landing(both) + both[True][0].dead_letters.rows == 3
