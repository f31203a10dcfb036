"""Resources, declared once: Kafka, the schema registry, the landing root, Spark (the warehouse's
are in warehouse/resources.py).

Secrets (SASL passwords, registry credentials) come only from environment
variables through `dagster.EnvVar` in definitions.py, and are never logged.
"""

from __future__ import annotations

from typing import Optional

from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from kafka_landing.config import LandingConfig, load_config
from kafka_landing.kafka_slices.kafka_log import KafkaLogView
from kafka_landing.spark_setup import open_session
from kafka_landing.store import open_store
from kafka_landing.store.base import LandingStore


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

    landing_root: str = Field(description="A local folder, or gs://bucket[/prefix] in production.")
    topics_config: Optional[str] = Field(
        default=None, description="Path of the topic config YAML; $KAFKA_LANDING_TOPICS_CONFIG or the demo's if unset.")
    gcp_credentials: Optional[str] = Field(
        default=None, description="For a gs:// root: a service-account key (JSON, or base64 of it), only through "
        "an EnvVar. Unset: Application Default Credentials.")

    def store(self) -> LandingStore:
        return open_store(self.landing_root, self.gcp_credentials)

    def config(self) -> LandingConfig:
        return load_config(self.topics_config)


class SparkResource(ConfigurableResource):
    """The run's Spark session, started on first use and shared by every hour of the run: a
    session on a warm Spark Connect server (`remote`), or a classic session the run starts.
    The same shape as dagster-pyspark's LazyPySparkResource (`spark_session`), whose session is
    always classic, so assets do not care which it is. A remote that does not answer fails the
    run as transient; it never falls back to a local JVM, which would hide the outage and could
    exhaust a worker sized for a client."""

    remote: Optional[str] = Field(
        default=None, description="A Spark Connect URL, sc://host:port[/;token=...] (a standing cluster, Dataproc, "
        "Databricks or `make stack-up`'s local server), only through an EnvVar when it holds a token. "
        "Unset: a classic session this run starts from spark_config.")
    spark_config: dict = Field(
        default_factory=dict, description="The classic session's settings; on a Connect server only the session's "
        "own (spark.sql.*) apply, the server was started with the rest.")
    _spark_session = PrivateAttr(default=None)

    @property
    def spark_session(self):
        if self._spark_session is None:
            self._spark_session = open_session(self.remote, self.spark_config)
        return self._spark_session

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._spark_session is not None and self.remote:  # give the server its session back
            self._spark_session.stop()
            self._spark_session = None
