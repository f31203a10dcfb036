"""The embedded defaults: what a checkout uses when nothing is configured. The landing
root and the Iceberg warehouse under `.local/`, the connector jars `make jvm` fetched, and
the addresses of the local dev stack (Kafka, the registry, the GCS emulator, the warm Spark,
PostgreSQL for a production-like Dagster instance) (`devstack`, a tool that imports these, never
the other way round). Production sets the environment variables the README lists instead."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout
LOCAL = ROOT / ".local"
JVM_DIR = Path(os.environ.get("KAFKA_LANDING_JVM_DIR", ROOT / ".jvm"))


@dataclass(frozen=True)
class StackPorts:
    kafka: int = int(os.environ.get("KAFKA_LANDING_STACK_KAFKA_PORT", "19092"))
    controller: int = int(os.environ.get("KAFKA_LANDING_STACK_CONTROLLER_PORT", "19093"))
    registry: int = int(os.environ.get("KAFKA_LANDING_STACK_REGISTRY_PORT", "18081"))
    registry_management: int = int(os.environ.get("KAFKA_LANDING_STACK_REGISTRY_MGMT_PORT", "19081"))
    gcs: int = int(os.environ.get("KAFKA_LANDING_STACK_GCS_PORT", "18082"))
    spark_connect: int = int(os.environ.get("KAFKA_LANDING_STACK_SPARK_CONNECT_PORT", "18015"))
    postgres: int = int(os.environ.get("KAFKA_LANDING_STACK_POSTGRES_PORT", "18432"))
    iceberg_rest: int = int(os.environ.get("KAFKA_LANDING_STACK_ICEBERG_REST_PORT", "18181"))


PORTS = StackPorts()
BOOTSTRAP = f"localhost:{PORTS.kafka}"
REGISTRY_URL = f"http://localhost:{PORTS.registry}/apis/ccompat/v7"
#: what STORAGE_EMULATOR_HOST is set to for google-cloud-storage (and the GCS connector)
GCS_EMULATOR_URL = f"http://127.0.0.1:{PORTS.gcs}"
#: the warm Spark engine: the stack's Spark Connect server
SPARK_CONNECT_URL = f"sc://localhost:{PORTS.spark_connect}"
#: the stack's Iceberg REST catalog (KAFKA_LANDING_ICEBERG_CATALOG_URI for a REST catalog)
ICEBERG_REST_URL = f"http://127.0.0.1:{PORTS.iceberg_rest}"
