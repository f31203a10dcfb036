"""The catalog that names the root's tables: a SQL database (SQLite under a local root unless told
otherwise, PostgreSQL by URL) or an Iceberg REST catalog (Google's BigLake metastore, Polaris,
Unity, Glue, Lakekeeper; the local stack runs Iceberg's own REST server), chosen by the URI's
scheme. Either commits a table's change only on the snapshot it was made on: the one thing the
commits (`commits.py`) rely on, so every load, event version, upkeep and reload works on both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from kafka_landing.warehouse.backend import LoadError

REST_SCHEMES = ("http://", "https://")
AUTH_TYPES = ("google",)  # pyiceberg's auth managers a user may name; OAuth2 goes by credential or token


def on_gcs(root: str) -> bool:
    return str(root).startswith("gs://")


@dataclass(frozen=True)
class CatalogConfig:
    """Where the catalog is and how to sign in. `uri`: None for SQLite under a local root, a
    SQLAlchemy URL (a SQL catalog), or an http(s) URL (a REST catalog). The REST settings:
    `warehouse` as the server names it (BigLake: the bucket, gs://...), `credential` (OAuth2 client
    credentials, id:secret) or `token` (a bearer token), `auth` (google: Application Default
    Credentials, as BigLake wants), and any other pyiceberg catalog property in `properties`
    (header.x-goog-user-project, oauth2-server-uri, scope, ...). Secrets never show in its repr."""

    uri: str | None = field(default=None, repr=False)  # a SQL URL holds the database's password
    warehouse: str | None = None
    credential: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    auth: str | None = None
    properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, catalog: CatalogConfig | str | None) -> CatalogConfig:
        """A config from a config, a URI, or None (SQLite under the root)."""
        return catalog if isinstance(catalog, CatalogConfig) else cls(uri=catalog or None)

    @property
    def rest(self) -> bool:
        return bool(self.uri) and self.uri.startswith(REST_SCHEMES)

    def named(self) -> str:
        """The catalog as messages name it, without a password."""
        if self.rest:
            return f"the Iceberg REST catalog at {self.uri}"
        return "the Iceberg SQL catalog (KAFKA_LANDING_ICEBERG_CATALOG_URI)" if self.uri else "the Iceberg SQL catalog"

    def check(self) -> None:
        """Settings that cannot work, refused before any load: terminal, as config is."""
        if self.auth is not None and self.auth not in AUTH_TYPES:
            raise LoadError(f"KAFKA_LANDING_ICEBERG_AUTH={self.auth!r}: choose one of {', '.join(AUTH_TYPES)}, or "
                            "leave it unset and give KAFKA_LANDING_ICEBERG_CREDENTIAL or KAFKA_LANDING_ICEBERG_TOKEN",
                            transient=False)
        if not self.rest and (self.warehouse or self.credential or self.token or self.auth or self.properties):
            raise LoadError("KAFKA_LANDING_ICEBERG_WAREHOUSE, _CREDENTIAL, _TOKEN, _AUTH and _PROPERTIES are a REST "
                            "catalog's settings: set KAFKA_LANDING_ICEBERG_CATALOG_URI to its http(s):// URL, or unset "
                            "them for the SQL catalog", transient=False)


def sql_uri(root: str, uri: str | None) -> str:
    """The SQL catalog's database: `uri`, else SQLite in a local root. A bucket cannot hold SQLite (no
    locks, no partial writes), so a gs:// root without one is refused: terminal, as config is."""
    if uri:
        return uri
    if on_gcs(root):
        raise LoadError(f"the Iceberg warehouse root {root} is a bucket, which cannot hold the SQLite catalog: set "
                        "KAFKA_LANDING_ICEBERG_CATALOG_URI to the catalog's database (PostgreSQL in production, "
                        "e.g. postgresql+psycopg2://user:password@host/db; or a local sqlite:////path/catalog.db) "
                        "or to a REST catalog's https:// URL", transient=False)
    from sqlalchemy.engine import URL

    # Built, not formatted: a root's %, # or ? would be read as URL syntax (`per%20cent` as `per cent`).
    return URL.create("sqlite", database=str(Path(root).expanduser().resolve() / "_catalog.db")).render_as_string()


@functools.lru_cache(maxsize=8)
def open_catalog(root: str, config: CatalogConfig, io: tuple[tuple[str, str], ...]):
    """One catalog per (root, config, FileIO properties: the emulator's endpoint among them)."""
    config.check()
    if config.rest:
        from pyiceberg.catalog.rest import RestCatalog

        props: dict = {"uri": config.uri, **dict(io), **dict(config.properties)}
        for key, value in (("warehouse", config.warehouse), ("credential", config.credential),
                           ("token", config.token)):
            if value:
                props[key] = value
        if config.auth:
            props["auth"] = {"type": config.auth}
        return RestCatalog("kafka_landing", **props)
    uri = sql_uri(root, config.uri)
    if on_gcs(root):
        return _sql_catalog(uri=uri, warehouse=root.rstrip("/"), **dict(io))
    base = Path(root).expanduser().resolve()
    base.mkdir(parents=True, exist_ok=True)
    return _sql_catalog(uri=uri, warehouse=str(base))  # a plain path: `Tables.uri` says why


def _sql_catalog(**props):
    """pyiceberg's SQL catalog, which makes its tables in the database if it finds none. Loads that
    open a new catalog at once (a run's first hours) all find none, and all but one fail to make
    them: those open it again, finding them made."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    try:
        return SqlCatalog("kafka_landing", **props)
    except (OperationalError, ProgrammingError, IntegrityError) as exc:  # SQLite's, PostgreSQL's (two ways)
        if "already exists" not in str(exc) and "duplicate key" not in str(exc):
            raise
        return SqlCatalog("kafka_landing", **props)
