"""The warehouse as a Dagster resource: one base class the assets, checks and the
sensor are typed on, one subclass per backend, so choosing BigQuery over Parquet
is configuration and changes no asset."""

from __future__ import annotations

import os

from dagster import ConfigurableResource
from dagster_gcp import BigQueryResource
from pydantic import Field

from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.load import Warehouse


class WarehouseResource(ConfigurableResource):
    """Where the landed hours are loaded. Use a subclass."""

    def backend(self, store: LandingStore) -> Warehouse:
        """The backend; `store` is the landing root (where loads are recorded, for backends
        that keep that record outside the warehouse)."""
        raise NotImplementedError(f"{type(self).__name__} is not a warehouse backend: use ParquetWarehouseResource "
                                  "or BigQueryWarehouseResource")


class ParquetWarehouseResource(WarehouseResource):
    """The embedded default: a local Parquet table per destination, loaded with Spark."""

    root: str = Field(description="Folder of the Parquet tables: <root>/<dataset>/<table>/hour=<H>/data.parquet.")

    def backend(self, store: LandingStore) -> Warehouse:
        from kafka_landing.warehouse.parquet import ParquetWarehouse

        return ParquetWarehouse(self.root)


class BigQueryWarehouseResource(WarehouseResource):
    """Production: BigQuery tables partitioned by ingestion hour, each hour replaced by one free
    load job from the hour's gs:// files. Needs a gs:// landing root; no Spark."""

    bigquery: BigQueryResource = Field(description="dagster-gcp's BigQuery resource: project, location, and "
                                                   "credentials (gcp_credentials only through an EnvVar).")

    def backend(self, store: LandingStore) -> Warehouse:
        from kafka_landing.warehouse.bigquery import BigQueryWarehouse

        if os.environ.get("BIGQUERY_EMULATOR_HOST"):
            # An emulator or a test double of the REST API (the client itself sends every call
            # there): no Google credentials exist or are wanted.
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import bigquery

            client = bigquery.Client(project=self.bigquery.project, location=self.bigquery.location,
                                     credentials=AnonymousCredentials())
        else:
            with self.bigquery.get_client() as client:  # credentials are read when the client is made
                pass
        return BigQueryWarehouse(client, ledger=store, project=client.project, location=self.bigquery.location)
