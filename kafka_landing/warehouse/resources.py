"""The warehouse as a Dagster resource: one base class the assets, checks and the
sensor are typed on, one subclass per backend, so choosing BigQuery over Iceberg
is configuration and changes no asset."""

from __future__ import annotations

import json
import os
from typing import ClassVar

from dagster import ConfigurableResource
from pydantic import Field

from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import Warehouse


class WarehouseResource(ConfigurableResource):
    """Where the landed hours are loaded. Use a subclass; it says what its loads need."""

    #: the backend's name (KAFKA_LANDING_WAREHOUSE); whether its loads start Spark (their runs then
    #: take a Spark slot); the kinds shown in the UI
    backend_kind: ClassVar[str] = ""
    needs_spark: ClassVar[bool] = False
    kinds: ClassVar[frozenset[str]] = frozenset()

    def backend(self, store: LandingStore) -> Warehouse:
        """The backend; `store` is the landing root (where loads are recorded, for backends
        that keep that record outside the warehouse)."""
        raise NotImplementedError(f"{type(self).__name__} is not a warehouse backend: use IcebergWarehouseResource "
                                  "or BigQueryWarehouseResource")


class IcebergWarehouseResource(WarehouseResource):
    """The embedded default: Apache Iceberg tables in a SQL or REST catalog, partitioned by landing
    hour. Spark writes each hour's Parquet files, one Iceberg commit swaps them in. Read by Spark,
    Trino, DuckDB, pandas, pyiceberg, and BigQuery through the BigLake metastore."""

    root: str = Field(description="Folder of the tables (<root>/<dataset>/<table>/), a local path or "
                                  "gs://bucket/prefix, and, by default, of the catalog: a SQLite file "
                                  "<root>/_catalog.db, nothing to start (a local root only).")
    catalog_uri: str | None = Field(default=None, description="The catalog: its database as a SQLAlchemy URL, e.g. "
                                    "postgresql+psycopg2://user:password@host/db, only through an EnvVar (it holds "
                                    "a password), or a REST catalog's http(s):// URL; unset: SQLite under `root`, "
                                    "which a gs:// root cannot hold.")
    catalog_warehouse: str | None = Field(default=None, description="A REST catalog's warehouse, as the server names "
                                          "it (BigLake metastore: gs://bucket).")
    catalog_credential: str | None = Field(default=None, description="A REST catalog's OAuth2 client credentials "
                                           "(client_id:client_secret), only through an EnvVar.")
    catalog_token: str | None = Field(default=None, description="A REST catalog's bearer token, only through an "
                                      "EnvVar.")
    catalog_auth: str | None = Field(default=None, description="google: sign in to a REST catalog with Google's "
                                     "Application Default Credentials (the BigLake metastore).")
    catalog_properties: dict[str, str] = Field(default_factory=dict, description="Other pyiceberg catalog "
                                               "properties of a REST catalog, e.g. header.x-goog-user-project.")

    backend_kind: ClassVar[str] = "iceberg"
    needs_spark: ClassVar[bool] = True
    kinds: ClassVar[frozenset[str]] = frozenset({"iceberg", "spark"})

    def backend(self, store: LandingStore) -> Warehouse:
        from kafka_landing.warehouse.iceberg import IcebergWarehouse

        return IcebergWarehouse(self.root, self.catalog())

    def catalog(self):
        from kafka_landing.warehouse.iceberg.catalogs import CatalogConfig

        return CatalogConfig(self.catalog_uri, self.catalog_warehouse, self.catalog_credential, self.catalog_token,
                             self.catalog_auth, tuple(sorted(self.catalog_properties.items())))  # hashable


class BigQueryWarehouseResource(WarehouseResource):
    """Production: BigQuery tables partitioned by ingestion hour, each hour replaced by one free
    load job from the hour's gs:// files. Needs a gs:// landing root; no Spark. Its client comes
    from dagster-gcp's `BigQueryResource`, imported only here: the BigQuery client and pandas
    cost every run of an Iceberg warehouse about 1.5 s of imports otherwise."""

    project: str = Field(description="The project that runs the load jobs and holds the datasets.")
    location: str | None = Field(default=None, description="Where the datasets and jobs live, e.g. EU or "
                                                           "us-central1; the bucket should be in the same one.")
    gcp_credentials: str | None = Field(default=None, description="A service-account key's JSON, base64-encoded, "
                                        "only through an EnvVar; unset: Application Default Credentials.")

    backend_kind: ClassVar[str] = "bigquery"
    kinds: ClassVar[frozenset[str]] = frozenset({"bigquery"})

    def backend(self, store: LandingStore) -> Warehouse:
        from kafka_landing.warehouse.bigquery import BigQueryWarehouse

        if os.environ.get("BIGQUERY_EMULATOR_HOST"):
            # An emulator or a test double of the REST API (the client itself sends every call
            # there): no Google credentials exist or are wanted.
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import bigquery

            client = bigquery.Client(project=self.project, location=self.location, credentials=AnonymousCredentials())
        else:
            from dagster_gcp import BigQueryResource

            bigquery = BigQueryResource(project=self.project, location=self.location,
                                        gcp_credentials=self.gcp_credentials)
            with bigquery.get_client() as client:  # credentials are read when the client is made
                pass
        return BigQueryWarehouse(client, ledger=store, project=client.project, location=self.location)


def parse_properties(text: str | None) -> dict[str, str]:
    """KAFKA_LANDING_ICEBERG_PROPERTIES: a JSON object of strings, as pyiceberg's catalog properties."""
    if not text:
        return {}
    try:
        props = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"KAFKA_LANDING_ICEBERG_PROPERTIES is not JSON ({exc}): give an object of strings, e.g. "
                         '{"header.x-goog-user-project": "my-project"}') from None
    if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise ValueError("KAFKA_LANDING_ICEBERG_PROPERTIES must be a JSON object of strings, e.g. "
                         '{"header.x-goog-user-project": "my-project"}')
    return props
