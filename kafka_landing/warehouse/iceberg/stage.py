"""The landing hours of a run loaded together, ahead of their own loads: per table, one Spark job
writes them all and one metadata commit adds each as a snapshot of its own kind (its properties
as its own load would have made them, in `kafka-landing.loads`). Each hour's load is then handed
the `StagedRun` and finds its content committed, and only records it: a day costs one job and one
commit, not 24 of each.

An hour joins only where its rows would be written as they are here, under the schema the table
will have after it; the others, and every hour staged whose commit fails, load alone (from the
staged files where their content and schema still match). Files of a stage never committed are
removed by `upkeep` after a day, as a killed load's are.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kafka_landing.crash_points import crash_point
from kafka_landing.handoff.manifests import Manifest
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError, SparkFactory, StagedRun, verify_files
from kafka_landing.warehouse.iceberg.commits import Commits, Lineage, Written, hour_keys, load_props, needs_rewrite
from kafka_landing.warehouse.iceberg.files import only_hours, read_together, write_parquet
from kafka_landing.warehouse.iceberg.tables import HOUR_COLUMN, Tables, schema_of
from kafka_landing.warehouse.schema_evolution import merge_schemas

Load = tuple[Manifest, str | None, str | None]  # (manifest, its done file, the done file's hash)


@dataclass(frozen=True)
class StagedHour:
    """A landing hour `stage` wrote and did not commit: its own load may commit these files."""

    keys: dict[str, str]  # its content (`hour_keys`): a load of other content writes its own
    hour_schema: dict  # the hour's own schema, as its read merged it
    schema: dict  # the schema its files were written under
    folder: str  # its files: <folder>/part-*.parquet (the `_kl_hour=<hour>` folder of the stage), in the root


def stage(tables: Tables, store: LandingStore, loads: list[Load], spark: SparkFactory) -> StagedRun:
    """The run's landing hours, staged table by table (the module says how): what each hour's own
    load is to be handed. Only landing-hour tables stage; an event partition loads alone."""
    if tables.column != HOUR_COLUMN:
        return StagedRun()
    by_table: dict[tuple[str, str], list[Load]] = {}
    for load in loads:
        by_table.setdefault((load[0].dataset, load[0].target), []).append(load)
    committed, written = {}, {}
    for ident, group in sorted(by_table.items()):
        done, left = _stage_table(tables, store, ident, group, spark)
        committed.update(done)
        written.update(left)
    return StagedRun(committed, written)


def _stage_table(tables: Tables, store: LandingStore, ident: tuple[str, str], group: list[Load],
                 spark: SparkFactory) -> tuple[dict, dict]:
    """One table's hours of the run: ({key: columns added} committed, {key: StagedHour} written)."""
    where = f"{ident[0]}.{ident[1]} hours {group[0][0].partition}..{group[-1][0].partition} (loaded together)"
    t = tables.table(*ident)
    table_schema, lineage = schema_of(t), Lineage(t, tables.column)
    todo = [load for load in group if load[0].rows and _whole(store, load[0])
            and (lineage.newest(load[0].partition) or {}).get("sha256") != load[2]]
    if len(todo) < 2:
        return {}, {}
    reads, schemas = read_together(store, [m for m, _, _ in todo], spark, where)
    schema = table_schema
    for hour_schema in schemas.values():
        schema, _ = merge_schemas(schema, hour_schema, where)
    # The table's schema after each hour's own load must be the run's: else that hour loads alone.
    alike = [ld for ld in todo if merge_schemas(table_schema, schemas[ld[0].partition], where)[0] == schema]
    if len(alike) < 2 or (table_schema is not None and needs_rewrite(table_schema, schema)):
        return {}, {}
    folder = tables.rel(*ident, "data", f"_stage-{uuid.uuid4().hex}")
    if len(alike) < len(todo):
        reads = only_hours(reads, sorted(m.partition for m, _, _ in alike))
    write_parquet(tables, reads, schema, tables.location(folder))
    staged, props, files = _written_hours(tables, ident, alike, schemas, schema, folder)
    crash_point("warehouse:staged")
    # An error (it may have committed) hands nothing out: each hour loads alone, from files of its own.
    if not Commits(tables).commit_together(ident, t, Written(folder, files, schema, table_schema), props, where):
        return {}, staged
    _, added = merge_schemas(table_schema, schema, where)
    crash_point("warehouse:swapped")
    return {key: tuple(added) if n == 0 else () for n, key in enumerate(staged)}, {}  # the first added the columns


def _written_hours(tables: Tables, ident: tuple[str, str], alike: list[Load], schemas: dict, schema: dict,
                   folder: str) -> tuple[dict, dict, list[str]]:
    """The hours the stage's Spark job wrote whole: ({key: StagedHour}, {hour: its load's
    properties}, their files). An hour whose files hold other rows than its manifest loads alone."""
    staged, props, files = {}, {}, []
    for m, done_file, sha in alike:
        keys = hour_keys(m)
        hour_dir = f"{folder}/_kl_hour={m.partition}"
        mine = [tables.location(r) for r in tables.store.list(hour_dir, "part-*.parquet")]
        if tables.rows_in(mine) != m.rows:
            tables.store.delete(hour_dir)  # it loads alone, and says what it finds
            continue
        staged[(*ident, m.partition)] = StagedHour(keys, schemas[m.partition], schema, hour_dir)
        files += mine
        props[m.partition] = {k[len("kafka-landing."):]: v
                              for k, v in load_props(m, tables.column, done_file, sha, keys, keys).items()}
    return staged, props, files


def _whole(store: LandingStore, manifest: Manifest) -> bool:
    """Every file the manifest lists is there with its rows; if not, its hour loads alone and says so."""
    try:
        verify_files(store, manifest)
    except LoadError:
        return False
    return True
