"""The warehouse resources: choosing BigQuery is configuration, an Iceberg warehouse's runs never
pay for the BigQuery client, and the Parquet warehouse of earlier releases is refused, naming the
command that moves it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from dagster import EnvVar

from kafka_landing.definitions import build_warehouse
from kafka_landing.warehouse.resources import BigQueryWarehouseResource


def test_the_code_location_of_the_embedded_warehouse_imports_no_bigquery_client():
    """dagster-gcp brings the BigQuery client and pandas, about 1.5 s of every run's start."""
    probe = ("import sys, kafka_landing.definitions as d\n"
             "d.build_resources()\n"
             "print(sorted(m for m in ('dagster_gcp', 'google.cloud.bigquery') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "KAFKA_LANDING_FIRST_HOUR": "2026-01-01-00:00"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_bigquery_is_chosen_by_configuration_with_its_key_only_through_an_env_var(monkeypatch):
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "bigquery")
    monkeypatch.setenv("KAFKA_LANDING_BIGQUERY_PROJECT", "p1")
    monkeypatch.setenv("KAFKA_LANDING_BIGQUERY_LOCATION", "EU")
    monkeypatch.setenv("KAFKA_LANDING_GCP_CREDENTIALS", "c2VjcmV0")
    warehouse = build_warehouse()
    assert isinstance(warehouse, BigQueryWarehouseResource)
    assert (warehouse.project, warehouse.location) == ("p1", "EU")
    assert warehouse.gcp_credentials == EnvVar("KAFKA_LANDING_GCP_CREDENTIALS")
    assert "c2VjcmV0" not in repr(warehouse)


def test_bigquery_without_a_project_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "bigquery")
    monkeypatch.delenv("KAFKA_LANDING_BIGQUERY_PROJECT", raising=False)
    with pytest.raises(ValueError, match="KAFKA_LANDING_BIGQUERY_PROJECT"):
        build_warehouse()


def test_iceberg_is_the_default_and_the_parquet_warehouse_is_refused_naming_the_reload(monkeypatch, tmp_path):
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    monkeypatch.delenv("KAFKA_LANDING_WAREHOUSE", raising=False)
    monkeypatch.delenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", raising=False)
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(tmp_path))
    warehouse = build_warehouse()
    assert isinstance(warehouse, IcebergWarehouseResource) and warehouse.root == str(tmp_path)
    assert warehouse.catalog_uri is None
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "parquet")
    with pytest.raises(ValueError, match="Parquet warehouse is gone") as err:
        build_warehouse()
    assert "python -m kafka_landing reload" in str(err.value) and "KAFKA_LANDING_WAREHOUSE_ROOT" in str(err.value)


def test_an_iceberg_warehouse_in_a_bucket_without_a_catalog_database_is_refused_when_the_code_loads(monkeypatch):
    """A bucket cannot hold the SQLite catalog: the location fails to load, saying what to set."""
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "iceberg")
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", "gs://bucket/warehouse")
    monkeypatch.delenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", raising=False)
    with pytest.raises(ValueError, match="gs://bucket/warehouse.*KAFKA_LANDING_ICEBERG_CATALOG_URI"):
        build_warehouse()
    monkeypatch.setenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", "postgresql+psycopg2://u:s3cret@db/ice")
    warehouse = build_warehouse()
    assert isinstance(warehouse, IcebergWarehouseResource) and warehouse.root == "gs://bucket/warehouse"


def test_an_iceberg_backend_in_a_bucket_without_a_catalog_database_fails_terminally_before_any_request():
    """check_writable says what to set, and no retry can help; no client is made (none could be here)."""
    from kafka_landing.warehouse.backend import LoadError
    from kafka_landing.warehouse.iceberg import IcebergWarehouse

    wh = IcebergWarehouse("gs://bucket/warehouse")
    with pytest.raises(LoadError, match="KAFKA_LANDING_ICEBERG_CATALOG_URI") as err:
        wh.check_writable()
    assert not err.value.transient and "gs://bucket/warehouse" in str(err.value)
    assert "store" not in vars(wh.tables)  # refused before the bucket was asked anything


def test_iceberg_is_chosen_by_configuration_with_its_catalog_url_only_through_an_env_var(monkeypatch, tmp_path):
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "iceberg")
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", str(tmp_path))
    monkeypatch.setenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", "postgresql+psycopg2://u:s3cret@db/ice")
    warehouse = build_warehouse()
    assert isinstance(warehouse, IcebergWarehouseResource) and warehouse.root == str(tmp_path)
    assert warehouse.catalog_uri == EnvVar("KAFKA_LANDING_ICEBERG_CATALOG_URI")
    assert "s3cret" not in repr(warehouse)
    assert warehouse.kinds == {"iceberg", "spark"} and warehouse.needs_spark

