"""The Iceberg catalog chosen by configuration: a SQL database or a REST catalog, its secrets only
through environment variables, and settings that cannot work refused before any load."""

from __future__ import annotations

import pytest
from dagster import EnvVar

from kafka_landing.definitions import build_warehouse
from kafka_landing.errors import is_transient
from kafka_landing.warehouse.backend import LoadError
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing.warehouse.iceberg.catalogs import CatalogConfig
from kafka_landing.warehouse.resources import parse_properties

REST_ENV = ("KAFKA_LANDING_ICEBERG_WAREHOUSE", "KAFKA_LANDING_ICEBERG_CREDENTIAL", "KAFKA_LANDING_ICEBERG_TOKEN",
            "KAFKA_LANDING_ICEBERG_AUTH", "KAFKA_LANDING_ICEBERG_PROPERTIES")


@pytest.fixture
def iceberg_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "iceberg")
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", "gs://bucket/warehouse")
    for name in REST_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_uri_s_scheme_chooses_the_catalog():
    assert not CatalogConfig.of(None).rest and CatalogConfig.of(None).uri is None
    assert not CatalogConfig.of("postgresql+psycopg2://u:p@db/ice").rest
    assert CatalogConfig.of("https://biglake.googleapis.com/iceberg/v1/restcatalog").rest
    assert CatalogConfig.of("http://127.0.0.1:18181").rest
    config = CatalogConfig(uri="http://x")
    assert CatalogConfig.of(config) is config


def test_a_rest_catalog_from_the_environment_keeps_its_secrets_in_env_vars(iceberg_env):
    iceberg_env.setenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", "https://biglake.googleapis.com/iceberg/v1/restcatalog")
    iceberg_env.setenv("KAFKA_LANDING_ICEBERG_WAREHOUSE", "gs://bucket")
    iceberg_env.setenv("KAFKA_LANDING_ICEBERG_CREDENTIAL", "client:s3cret")
    iceberg_env.setenv("KAFKA_LANDING_ICEBERG_TOKEN", "t0ken")
    iceberg_env.setenv("KAFKA_LANDING_ICEBERG_AUTH", "google")
    iceberg_env.setenv("KAFKA_LANDING_ICEBERG_PROPERTIES", '{"header.x-goog-user-project": "proj"}')
    resource = build_warehouse()
    assert resource.catalog_credential == EnvVar("KAFKA_LANDING_ICEBERG_CREDENTIAL")
    assert resource.catalog_token == EnvVar("KAFKA_LANDING_ICEBERG_TOKEN")
    assert resource.catalog_uri == EnvVar("KAFKA_LANDING_ICEBERG_CATALOG_URI")
    assert (resource.catalog_warehouse, resource.catalog_auth) == ("gs://bucket", "google")
    assert resource.catalog_properties == {"header.x-goog-user-project": "proj"}
    assert "s3cret" not in repr(resource) and "t0ken" not in repr(resource)
    config = CatalogConfig("https://x", "gs://bucket", "client:s3cret", "t0ken", "google", (("a", "b"),))
    assert "s3cret" not in repr(config) and "t0ken" not in repr(config)


def test_a_resource_hands_its_settings_to_the_backend_s_catalog():
    from kafka_landing.warehouse.resources import IcebergWarehouseResource

    resource = IcebergWarehouseResource(root="/tmp/wh", catalog_uri="http://127.0.0.1:1", catalog_warehouse="w",
                                        catalog_token="t", catalog_properties={"b": "2", "a": "1"})
    assert resource.catalog() == CatalogConfig("http://127.0.0.1:1", "w", None, "t", None, (("a", "1"), ("b", "2")))


@pytest.mark.parametrize("config, says", [
    (CatalogConfig("https://x", auth="kerberos"), "KAFKA_LANDING_ICEBERG_AUTH='kerberos'"),
    (CatalogConfig("postgresql://u:p@db/ice", token="t"), "REST catalog's settings"),
    (CatalogConfig(None, warehouse="gs://b"), "REST catalog's settings"),
])
def test_settings_that_cannot_work_fail_terminally_before_any_request(config, says, tmp_path):
    wh = IcebergWarehouse(str(tmp_path / "wh"), config)
    with pytest.raises(LoadError, match=says) as err:
        wh.check_writable()
    assert not err.value.transient and not is_transient(err.value)
    assert "p@db" not in str(err.value)


def test_catalog_properties_are_a_json_object_of_strings():
    assert parse_properties(None) == {} and parse_properties("") == {}
    assert parse_properties('{"b": "2", "a": "1"}') == {"a": "1", "b": "2"}
    for bad in ("{", '["a"]', '{"a": 1}'):
        with pytest.raises(ValueError, match="KAFKA_LANDING_ICEBERG_PROPERTIES"):
            parse_properties(bad)


def test_a_rest_catalog_away_or_busy_is_transient_and_a_refusal_terminal():
    from pyiceberg import exceptions as ice

    for away in (ice.ServerError("503"), ice.ServiceUnavailableError("down"), ice.TooManyRequestsError("slow"),
                 ice.CommitStateUnknownException("lost")):
        assert is_transient(away), type(away).__name__
    for refused in (ice.UnauthorizedError("401"), ice.ForbiddenError("403"), ice.BadRequestError("400"),
                    ice.NoSuchTableError("t"), ice.CommitFailedException("moved")):
        assert not is_transient(refused), type(refused).__name__


def test_an_unreachable_rest_catalog_is_transient_and_named(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wh = IcebergWarehouse(str(tmp_path / "wh"), f"http://127.0.0.1:{port}")
    with pytest.raises(LoadError, match=f"REST catalog at http://127.0.0.1:{port}") as err:
        wh.check_writable()
    assert err.value.transient


def test_loads_that_open_a_new_sqlite_catalog_at_once_all_open_it(tmp_path):
    """Each finds no catalog tables and makes them; all but one used to fail with `table
    iceberg_tables already exists` (nine rounds in ten, eight loads at once)."""
    import threading

    from kafka_landing.warehouse.iceberg.catalogs import open_catalog

    failed = []
    for round_ in range(5):
        root, start = str(tmp_path / f"root{round_}"), threading.Barrier(8)

        def open_it(root=root, start=start):
            start.wait()
            try:
                open_catalog(root, CatalogConfig(), ()).list_namespaces()
            except Exception as exc:  # noqa: BLE001 - what the test counts
                failed.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failed == []
