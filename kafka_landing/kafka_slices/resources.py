"""Kafka as the runs reach it: where the topics live and how to authenticate, for librdkafka
(the planning's log view) and for Spark's Kafka source (the landing's read).

Secrets (SASL passwords) come only from environment variables through `dagster.EnvVar` in
definitions.py, and are never logged.
"""

from __future__ import annotations

from typing import Optional

from confluent_kafka.admin import AdminClient
from dagster import ConfigurableResource

from kafka_landing.kafka_slices.kafka_log import KafkaLogView


class KafkaResource(ConfigurableResource):
    """Where the topics live. Security settings map onto librdkafka and Spark's Kafka client."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: Optional[str] = None
    sasl_username: Optional[str] = None
    sasl_password: Optional[str] = None
    ssl_ca_location: Optional[str] = None
    timeout_seconds: float = 30.0

    def client_config(self) -> dict:
        cfg = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            cfg["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            cfg["sasl.username"] = self.sasl_username
            cfg["sasl.password"] = self.sasl_password or ""
        if self.ssl_ca_location:
            cfg["ssl.ca.location"] = self.ssl_ca_location
        return cfg

    def spark_options(self) -> dict:
        """The same settings as Spark Kafka source options (`kafka.`-prefixed)."""
        opts = {
            "kafka.bootstrap.servers": self.bootstrap_servers, "kafka.security.protocol": self.security_protocol,
            # Aborted transactions never land; markers and aborted records are offsets without a record.
            "kafka.isolation.level": "read_committed",
        }
        if self.sasl_mechanism:
            opts["kafka.sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            module = (
                "org.apache.kafka.common.security.scram.ScramLoginModule"
                if (self.sasl_mechanism or "").upper().startswith("SCRAM")
                else "org.apache.kafka.common.security.plain.PlainLoginModule"
            )
            opts["kafka.sasl.jaas.config"] = (
                f'{module} required username="{jaas_quote(self.sasl_username)}" '
                f'password="{jaas_quote(self.sasl_password or "")}";'
            )
        if self.ssl_ca_location:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = self.ssl_ca_location
        return opts

    def admin(self) -> AdminClient:
        return AdminClient(self.client_config())

    def log_view(self) -> KafkaLogView:
        return KafkaLogView(self.client_config(), self.bootstrap_servers, self.timeout_seconds)


def jaas_quote(value: str) -> str:
    """A JAAS option value between double quotes: backslash and quote escaped, in that order."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
