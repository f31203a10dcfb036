"""The SASL credentials reach Spark's Kafka source as a JAAS line that reads back as written,
whatever characters the password holds (review #20)."""

from __future__ import annotations

import re

import pytest

from kafka_landing.kafka_slices.resources import KafkaResource, jaas_quote


def _jaas_values(line: str) -> dict[str, str]:
    """Option values of a JAAS line as Java's ConfigFile reads them (a StreamTokenizer whose
    quoted strings take backslash escapes)."""
    return {k: re.sub(r"\\(.)", r"\1", v) for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line)}


@pytest.mark.parametrize("password", ['a\\"b\\\\', 'plain', '"', "\\", 'ends with \\', 'x"; evil="y', ""])
def test_a_password_reads_back_as_written_from_the_jaas_line(password):
    opts = KafkaResource(bootstrap_servers="b:9092", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                         sasl_username='us"er', sasl_password=password).spark_options()
    line = opts["kafka.sasl.jaas.config"]
    assert line.startswith("org.apache.kafka.common.security.scram.ScramLoginModule required ") and line.endswith(";")
    assert _jaas_values(line) == {"username": 'us"er', "password": password}


def test_backslashes_are_escaped_before_quotes():
    assert jaas_quote('a\\"b') == 'a\\\\\\"b'
