"""The code location: every layer's assets, sensors, checks and schedules, and
the resources they share, assembled from the topic config."""

from __future__ import annotations

import os

from dagster import Definitions, EnvVar
from dagster_pyspark import LazyPySparkResource

from kafka_landing import devstack
from kafka_landing.avro_landing.assets import build_landing_assets
from kafka_landing.kafka_slices.assets import build_slice_assets
from kafka_landing.resources import KafkaResource, LandingResource, SchemaRegistryResource
from kafka_landing.spark_setup import spark_config
from kafka_landing.topic_config import load_config

DEFAULT_LANDING_ROOT = str(devstack.ROOT / ".local" / "landing")


def _secret(name: str):
    """An EnvVar when the variable is set, else None: secrets never sit in code or config."""
    return EnvVar(name) if os.environ.get(name) else None


def build_resources() -> dict:
    return {
        "kafka": KafkaResource(
            bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", devstack.BOOTSTRAP),
            security_protocol=os.environ.get("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_mechanism=os.environ.get("KAFKA_SASL_MECHANISM"),
            sasl_username=_secret("KAFKA_SASL_USERNAME"),
            sasl_password=_secret("KAFKA_SASL_PASSWORD"),
            ssl_ca_location=os.environ.get("KAFKA_SSL_CA_LOCATION"),
        ),
        "registry": SchemaRegistryResource(
            url=os.environ.get("SCHEMA_REGISTRY_URL", devstack.REGISTRY_URL),
            basic_auth_user_info=_secret("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"),
        ),
        "landing": LandingResource(
            landing_root=os.environ.get("KAFKA_LANDING_ROOT", DEFAULT_LANDING_ROOT),
            topics_config=os.environ.get("KAFKA_LANDING_TOPICS_CONFIG"),
        ),
        # Created on first use and shared by every hour of a run.
        "pyspark": LazyPySparkResource(spark_config=spark_config()),
    }


def build_definitions() -> Definitions:
    config = load_config()
    return Definitions(
        assets=[*build_slice_assets(config), *build_landing_assets(config)],
        resources=build_resources(),
    )


defs = build_definitions()
