"""Resources, declared once: Kafka, the schema registry, the landing root, Spark.

Secrets (SASL passwords, registry credentials) come only from environment
variables through `dagster.EnvVar` in definitions.py, and are never logged.
"""

from __future__ import annotations

from typing import Optional

import time

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
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

    def log_view(self) -> "KafkaLogView":
        return KafkaLogView(self)


class KafkaUnavailable(RuntimeError):
    """The brokers did not answer: names the bootstrap servers, never credentials."""


def jaas_quote(value: str) -> str:
    """A JAAS option value between double quotes: backslash and quote escaped, in that order."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT}


class KafkaLogView:
    """`planning.LogView` on a real cluster, as a read_committed consumer sees it: the log end
    is the last stable offset, so an open transaction's records are never planned."""

    def __init__(self, kafka: KafkaResource):
        self._timeout = kafka.timeout_seconds
        self._servers = kafka.bootstrap_servers
        conf = {**kafka.client_config(), "group.id": "kafka-landing-planner", "enable.auto.commit": False,
                "isolation.level": "read_committed"}
        self._consumer = Consumer(conf)
        self._admin = AdminClient(kafka.client_config())
        self._reader: Consumer | None = None  # for the rare boundary that needs records read
        self._conf = conf

    def close(self) -> None:
        self._consumer.close()
        if self._reader is not None:
            self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def partitions(self, topic: str) -> list[int] | None:
        md = self._retry(f"reading the metadata of topic {topic!r}",
                         lambda: self._consumer.list_topics(topic, timeout=self._timeout))
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return sorted(t.partitions)

    def _retry(self, what: str, call):
        # A partition just created or moving leader answers NOT_LEADER for a moment: retry retriable errors.
        for attempt in range(10):
            try:
                return call()
            except KafkaException as exc:
                err = exc.args[0]
                if attempt == 9 or not (err.retriable() or err.code() in _TRANSIENT):
                    raise KafkaUnavailable(
                        f"Kafka brokers {self._servers}: {what} failed: {err.str()}. Check that the brokers are up "
                        "and reachable from here, and the bootstrap servers and security settings "
                        "(KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*)."
                    ) from None
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self._retry(f"reading the offsets of {topic}[{partition}]", lambda: self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=self._timeout, cached=False))

    def offsets_for_time(self, topic: str, partitions: list[int], millis: int) -> dict[int, tuple[int, int] | None]:
        def ask():
            futures = self._admin.list_offsets(
                {TopicPartition(topic, p): OffsetSpec.for_timestamp(millis) for p in partitions},
                isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self._timeout,
            )
            return {tp.partition: f.result() for tp, f in futures.items()}

        found = self._retry(f"offsets_for_times({millis}) of {topic}", ask)
        return {p: (r.offset, r.timestamp) if r.offset >= 0 else None for p, r in found.items()}

    def first_record(self, topic: str, partition: int, start: int, end: int,
                     min_millis: int | None = None) -> tuple[int, int] | None:
        if start >= end:
            return None
        if self._reader is None:
            self._reader = Consumer({**self._conf, "enable.partition.eof": True})
        reader = self._reader
        reader.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self._timeout
        try:
            while time.monotonic() < deadline:
                for msg in reader.consume(10_000, timeout=1.0):
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            return None
                        raise RuntimeError(f"Kafka at {self._servers}: reading {topic}[{partition}] from offset "
                                           f"{start} failed: {msg.error()}")
                    if msg.offset() >= end:
                        return None
                    stamped = msg.timestamp()[1]
                    if min_millis is None or stamped >= min_millis:
                        return msg.offset(), stamped
                    if msg.offset() + 1 >= end:
                        return None  # the range is read: no need to wait for the next fetch
                    deadline = time.monotonic() + self._timeout  # progress: keep reading
                position = reader.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return None
        finally:
            reader.unassign()
        raise RuntimeError(f"Kafka at {self._servers}: no answer reading {topic}[{partition}] from offset {start} "
                           f"within {self._timeout:.0f} s; check that the brokers are up and reachable")


class SchemaRegistryResource(ConfigurableResource):
    """Any Confluent-API-compatible registry; writer schemas are fetched by id."""

    url: str
    basic_auth_user_info: Optional[str] = None  # "user:password", from an EnvVar
    timeout_seconds: float = 30.0  # per request; without one, a registry that hangs hangs the run

    def client(self) -> SchemaRegistryClient:
        conf = {"url": self.url, "timeout": self.timeout_seconds}
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
