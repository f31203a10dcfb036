"""Upkeep of the root's tables: their finished days compacted (`compact`), old
snapshots expired, and the files no kept snapshot lists removed.

What the checks and loads need is the current snapshot (they read it) and the load records; older
snapshots are for time travel and for a load killed between its commit and its record, which the
queue asks for again at once. So a week is kept (`jobs.iceberg_upkeep`), not forever: each commit
rewrites the table's metadata with every kept snapshot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from kafka_landing.naming import IDENTIFIER
from kafka_landing.store.base import STAGING_MAX_AGE_SECONDS
from kafka_landing.warehouse.backend import SparkFactory
from kafka_landing.warehouse.iceberg.compact import COMPACT_AFTER, compact, event_column, give_spec
from kafka_landing.warehouse.iceberg.tables import PARTITION_COLUMNS, Tables, table_properties

if TYPE_CHECKING:
    from kafka_landing.warehouse.iceberg.warehouse import IcebergWarehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upkept:
    """What one table's upkeep did."""

    table: str  # dataset.table
    snapshots_expired: int
    snapshots_kept: int
    files_removed: int  # data and manifest files no kept snapshot lists any more
    bytes_removed: int
    partitions_compacted: int = 0  # partitions (landing or event days) made one file each (`compact`)
    files_compacted: int = 0  # the files they held before


def upkeep(warehouse: IcebergWarehouse, keep: timedelta, now: datetime | None = None,
           tables: list[tuple[str, str]] | None = None, spark: SparkFactory | None = None,
           compact_after: timedelta = COMPACT_AFTER) -> list[Upkept]:
    """Compact the tables' days (landing or event) over for `compact_after` (with `spark`: `compact`),
    expire every table's snapshots older than `keep` (never the current one), then remove the
    files no kept snapshot lists, and that are older than a day: a load's files are on disk before
    its commit lists them, and no load runs for a day."""
    now = now or datetime.now(timezone.utc)
    root = warehouse.tables
    loaded = _ours(root) if tables is None else {ident: None for ident in tables}
    out = []
    for (dataset, table), t in sorted(loaded.items()):
        t = t or root.table(dataset, table)
        if t is None:
            continue
        t = _with_our_properties(root, t, (dataset, table))
        column = event_column(t, table)
        kind = root if column is None else Tables(root.root, root.config, column)
        t = give_spec(kind, t, (dataset, table))
        compacted = compact(kind, (dataset, table), t, spark, now, compact_after) if spark is not None else None
        if compacted is not None:
            t = root.table(dataset, table)
        current = t.current_snapshot()
        old = [snap.snapshot_id for snap in t.metadata.snapshots
               if datetime.fromtimestamp(snap.timestamp_ms / 1000, timezone.utc) < now - keep
               and (current is None or snap.snapshot_id != current.snapshot_id)]
        if old:
            t.maintenance.expire_snapshots().by_ids(old).commit()
            t = root.table(dataset, table)
        removed, removed_bytes = _remove_unlisted(root, t, (dataset, table), now.timestamp() - STAGING_MAX_AGE_SECONDS)
        out.append(Upkept(f"{dataset}.{table}", len(old), len(t.metadata.snapshots), removed, removed_bytes,
                          *((compacted.partitions, compacted.files) if compacted else ())))
    return out


def _ours(root: Tables) -> dict[tuple[str, str], object]:
    """The catalog's tables this root keeps, each as loaded: a catalog shared by deployments lists
    others' too, whose snapshots and files are theirs to keep."""
    from pyiceberg.exceptions import NoSuchTableError

    found = {}
    for ns in root.catalog.list_namespaces():
        for ident in root.catalog.list_tables(ns):
            dataset, table = ident[-2:]
            if not (IDENTIFIER.match(dataset) and IDENTIFIER.match(table)):
                continue
            try:
                t = root.catalog.load_table(ident)
            except NoSuchTableError as exc:  # listed, but its metadata is gone: nothing upkeep can do
                log.warning("upkeep skips %s.%s: the catalog lists it but cannot load it (%s)", dataset, table, exc)
                continue
            if root.ours(t, dataset, table):
                found[(dataset, table)] = t
    return found


def _with_our_properties(root: Tables, t, ident: tuple[str, str]):
    """The table, given the properties every table of ours has (`table_properties`) if it was made
    before one was ours."""
    names = {f.name for f in t.schema().fields}
    ours = table_properties(c for c in PARTITION_COLUMNS if c in names)
    missing = {k: v for k, v in ours.items() if k != "format-version" and t.properties.get(k) != v}
    if not missing:
        return t
    with t.transaction() as tx:
        tx.set_properties(missing)
    return root.table(*ident)


def _remove_unlisted(root: Tables, t, ident: tuple[str, str], cutoff: float) -> tuple[int, int]:
    """Remove the table's data and manifest files no kept snapshot lists, written before `cutoff`:
    (how many, their bytes). On a gs:// root the listing gives each object's size and time."""
    listed = set()
    for snap in t.metadata.snapshots:
        listed.add(_local(snap.manifest_list))
        for m in snap.manifests(t.io):
            listed.add(_local(m.manifest_path))
            listed.update(_local(e.data_file.file_path) for e in m.fetch_manifest_entry(t.io))
    removed = removed_bytes = 0
    for rel, size, written in [*root.store.walk_stats(root.rel(*ident, "data"), ".parquet"),
                               *root.store.walk_stats(root.rel(*ident, "metadata"), ".avro")]:
        if root.store.location(rel) not in listed and written < cutoff:
            root.store.delete(rel)
            removed, removed_bytes = removed + 1, removed_bytes + size
    return removed, removed_bytes


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri
