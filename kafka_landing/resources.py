"""Resources, declared once: Kafka, the schema registry, the landing root, Spark.

Secrets (SASL passwords, registry credentials) come only from environment
variables through `dagster.EnvVar` in definitions.py, and are never logged.
"""

from __future__ import annotations

from typing import Optional

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from dagster import ConfigurableResource

from kafka_landing.landing_store import LandingStore
from kafka_landing.topic_config import LandingConfig, load_config


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
        opts = {"kafka.bootstrap.servers": self.bootstrap_servers, "kafka.security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            opts["kafka.sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            module = (
                "org.apache.kafka.common.security.scram.ScramLoginModule"
                if (self.sasl_mechanism or "").upper().startswith("SCRAM")
                else "org.apache.kafka.common.security.plain.PlainLoginModule"
            )
            user = self.sasl_username.replace('"', '\\"')
            pw = (self.sasl_password or "").replace('"', '\\"')
            opts["kafka.sasl.jaas.config"] = f'{module} required username="{user}" password="{pw}";'
        if self.ssl_ca_location:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = self.ssl_ca_location
        return opts

    def admin(self) -> AdminClient:
        return AdminClient(self.client_config())

    def log_view(self) -> "KafkaLogView":
        return KafkaLogView(self)


_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT}


class KafkaLogView:
    """`planning.LogView` on a real cluster, through one short-lived consumer."""

    def __init__(self, kafka: KafkaResource):
        self._timeout = kafka.timeout_seconds
        self._consumer = Consumer(
            {**kafka.client_config(), "group.id": "kafka-landing-planner", "enable.auto.commit": False}
        )

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def partitions(self, topic: str) -> list[int] | None:
        md = self._consumer.list_topics(topic, timeout=self._timeout)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return sorted(t.partitions)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        # A partition just created or moving leader answers NOT_LEADER for a moment: retry retriable errors.
        for attempt in range(10):
            try:
                return self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self._timeout, cached=False
                )
            except KafkaException as exc:
                err = exc.args[0]
                if attempt == 9 or not (err.retriable() or err.code() in _TRANSIENT):
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def offsets_for_time(self, topic: str, partitions: list[int], millis: int) -> dict[int, int | None]:
        found = self._consumer.offsets_for_times(
            [TopicPartition(topic, p, millis) for p in partitions], timeout=self._timeout
        )
        out = {}
        for tp in found:
            if tp.error:
                raise RuntimeError(f"offsets_for_times failed for {topic}[{tp.partition}]: {tp.error}")
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out


class SchemaRegistryResource(ConfigurableResource):
    """Any Confluent-API-compatible registry; writer schemas are fetched by id."""

    url: str
    basic_auth_user_info: Optional[str] = None  # "user:password", from an EnvVar

    def client(self) -> SchemaRegistryClient:
        conf = {"url": self.url}
        if self.basic_auth_user_info:
            conf["basic.auth.user.info"] = self.basic_auth_user_info
        return SchemaRegistryClient(conf)


class LandingResource(ConfigurableResource):
    """The landing root and the topic config that says what lands where."""

    landing_root: str
    topics_config: Optional[str] = None  # a path; $KAFKA_LANDING_TOPICS_CONFIG or the demo config if unset

    def store(self) -> LandingStore:
        return LandingStore(self.landing_root)

    def config(self) -> LandingConfig:
        return load_config(self.topics_config)
