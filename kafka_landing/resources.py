"""Resources the layers share, declared once: the schema registry, the landing root, Spark.
Kafka's is in kafka_slices/resources.py, beside the log view it opens; the warehouse's are in
warehouse/resources.py. Below every layer: this module imports none of them.

Secrets (registry credentials, a GCS key, a Spark Connect token) come only from environment
variables through `dagster.EnvVar` in definitions.py, and are never logged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from kafka_landing.config import LandingConfig, load_config
from kafka_landing.spark_setup import open_session
from kafka_landing.store import open_store
from kafka_landing.store.base import LandingStore

if TYPE_CHECKING:  # the client (and the HTTP and auth stack under it, 0.13 s) loads when a run asks for it
    from confluent_kafka.schema_registry import SchemaRegistryClient


class SchemaRegistryResource(ConfigurableResource):
    """Any Confluent-API-compatible registry; writer schemas are fetched by id."""

    url: str
    basic_auth_user_info: Optional[str] = None  # "user:password", from an EnvVar
    timeout_seconds: float = 30.0  # per request; without one, a registry that hangs hangs the run

    def client(self) -> SchemaRegistryClient:
        from confluent_kafka.schema_registry import SchemaRegistryClient

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
        """The run's session; on Connect, a new one when the server dropped the last (it restarted:
        pyspark closes a client whose server-side session is gone), so a retry goes on where the
        failed attempt could not."""
        if self._spark_session is not None and self.remote and self._spark_session.is_stopped:
            self._spark_session = None
        if self._spark_session is None:
            self._spark_session = open_session(self.remote, self.spark_config)
        return self._spark_session

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._spark_session is not None and self.remote:  # give the server its session back
            self._spark_session.stop()
            self._spark_session = None
