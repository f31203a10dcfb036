"""Every commit to the root's tables, and the ledger the commits keep in the tables themselves.

A commit holds the table's lock (`Tables.lock`) for the moment it takes; a load that rewrites
the table holds it for its rewrite too, so the table's other loads wait for it rather than make
it start over. The catalog's commit is also conditional on the snapshot it was made on: a load
that loses to a writer outside commits again. Schema widening, the replaced rows' delete and the
new files' add go in one transaction: a reader sees the old partition or the new one.

A commit whose answer is lost (the catalog's database committed, then the connection dropped) may
have gone through: its files are removed only when the commit is known not to have happened. Else
the load looks for its own snapshot (its summary) in the table, and if it is there, it is loaded.

Each load's snapshots carry `kafka-landing.<key>` (`SNAPSHOT_KEYS`): what it loaded, and which
landing hours it replaced; a run's hours committed together carry them all in
`kafka-landing.loads`. `Lineage` reads them back from the current snapshot's parent chain, as
far as asked, never by sorting the table's history.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from kafka_landing.crash_points import crash_point
from kafka_landing.errors import is_transient
from kafka_landing.handoff.manifests import Manifest, content_sha
from kafka_landing.warehouse.backend import LoadError, SparkFactory
from kafka_landing.warehouse.iceberg.files import arrow_schema, rewrite_table, write_compacted
from kafka_landing.warehouse.iceberg.tables import (
    HOUR_COLUMN,
    SCHEMA_PROPERTY,
    Replaced,
    Tables,
    schema_of,
    snapshot_id,
    spans_hours,
    table_properties,
)
from kafka_landing.warehouse.spark_types import KEY, Path, iceberg_path, kind, zip_types

log = logging.getLogger(__name__)

# kafka-landing.<key> on every load's snapshots: what it loaded, and which landing hours it replaced
SNAPSHOT_KEYS = ("partition", "done-file", "sha256", "rows", "attempt", "landing-hours", "hours")
COMMIT_ATTEMPTS = 8  # commits lost to a concurrent writer of the same table before the load gives up (transient)


def prop(key: str) -> str:
    return f"kafka-landing.{key}"


def hour_keys(manifest: Manifest) -> dict[str, str]:
    """What each landing hour gives a partition: its files, rows and schema ids, hashed (the
    snapshots' `kafka-landing.hours`): a landing hour whose key is unchanged is not loaded again."""
    return {h: content_sha(json.dumps(sorted([f.path, f.rows, f.schema_id] for f in fs)).encode())
            for h, fs in manifest.by_landing_hour().items()}


def load_props(manifest: Manifest, column: str, done_file: str | None, sha: str | None, changed, keys: dict) -> dict:
    """What a load's snapshots say (`SNAPSHOT_KEYS`, each `kafka-landing.<key>`): `Lineage` reads them."""
    return {prop("partition"): manifest.partition, prop("column"): column,
            prop("done-file"): done_file or "", prop("sha256"): sha or "",
            prop("rows"): str(manifest.rows), prop("attempt"): str(manifest.attempt),
            prop("landing-hours"): ",".join(sorted(changed)), prop("hours"): json.dumps(keys)}


class Lineage:
    """A table's loads as its snapshots say them, newest first: the current snapshot's parent chain,
    walked once and only as far as asked (a recent hour is near the top). Cost per step, not per
    history: pyiceberg finds a snapshot by id by scanning them all, so parents are looked up in an
    index filled from the newest end of the table's list, where a parent sits just before its child."""

    def __init__(self, t, column: str):
        self._snapshots = t.metadata.snapshots if t is not None else []
        self._current = self._next = t.current_snapshot() if t is not None else None
        self._column = column
        self._by_id: dict[int, object] = {}
        self._unread = len(self._snapshots)
        self._found: dict[str, dict] = {}

    def walk(self):
        """The snapshots from the current one back along its parents."""
        snap = self._current
        while snap is not None:
            yield snap
            snap = self._snapshot(snap.parent_snapshot_id)

    def newest(self, partition: str) -> dict | None:
        """The summary of the newest snapshot that loaded `partition` ({key: value} of `SNAPSHOT_KEYS`
        and its snapshot_id), as the table itself records it; None if no kept snapshot did."""
        while partition not in self._found and self._next is not None:
            snap, self._next = self._next, self._snapshot(self._next.parent_snapshot_id)
            self._take(snap)
        return self._found.get(partition)

    def _snapshot(self, snapshot_id: int | None):
        while snapshot_id is not None and snapshot_id not in self._by_id and self._unread:
            self._unread -= 1
            snap = self._snapshots[self._unread]
            self._by_id[snap.snapshot_id] = snap
        return self._by_id.get(snapshot_id)

    def _take(self, snap) -> None:
        """Note what `snap` loaded, for each partition no newer snapshot loaded."""
        summary = snap.summary
        props = summary.additional_properties if summary else {}
        if props.get(prop("column"), HOUR_COLUMN) != self._column:
            return
        if prop("partition") in props:
            loads = {props[prop("partition")]: {k: props.get(prop(k)) for k in SNAPSHOT_KEYS}}
        elif props.get(prop("loads")):  # the hours of a run committed together (`stage`)
            loads = json.loads(props[prop("loads")])
        else:
            return
        for partition, load in loads.items():
            self._found.setdefault(partition, {k: load.get(k) for k in SNAPSHOT_KEYS}
                                   | {"snapshot_id": snap.snapshot_id, "committed_at": committed_at(snap)})


def committed_at(snap) -> str:
    """When a snapshot was committed, in UTC: from then on every reader of the table sees it."""
    return datetime.fromtimestamp(snap.timestamp_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Written:
    """Parquet files a load wrote for one commit."""

    folder: str  # relative to the root: only this commit lists its files; removed if it never happens
    files: list[str]  # their locations
    schema: dict  # the table's schema after the commit
    base: dict | None  # the table's schema they were written on (None: no table yet)


class Commits:
    """The commits to the tables of one root (`Tables`)."""

    def __init__(self, tables: Tables):
        self.tables = tables

    def replaced(self, partition: str, hours: list[str] | None) -> Replaced:
        """The rows a load replaces: the whole partition, or these landing hours' part of it."""
        if hours is None or self.tables.column == HOUR_COLUMN:
            return Replaced.of(**{self.tables.column: [partition]})
        return Replaced.of(**{self.tables.column: [partition], HOUR_COLUMN: hours})

    def _drop(self, tx, t, replaced: Replaced, spark: SparkFactory, props: dict, where: str) -> str | None:
        """The replaced rows dropped in transaction `tx`: the files that hold only them in metadata;
        a compacted file that holds other hours too written again without them, by Spark, and
        swapped. (The folder of those new files, to remove if the commit loses.)"""
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        expr = replaced.expression()
        files = [task.file for task in t.scan(row_filter=expr).plan_files()] if t.current_snapshot() else []
        mixed = [f for f in files if spans_hours(t, f)]
        target = None
        if mixed:
            target = self.tables.rel(*t.name()[-2:], "data", f"_amend-{uuid.uuid4().hex}")
            kept = write_compacted(self.tables, t.schema(), [f.file_path for f in mixed], spark, target, replaced)
            want = sum(f.record_count - self.tables.rows_of(f, replaced) for f in mixed)
            if (got := self.tables.rows_in(kept)) != want:
                raise LoadError(f"{where}: writing {len(mixed)} compacted file(s) again without the replaced rows "
                                f"gave {got} rows, not the {want} they keep; nothing was committed. Look at "
                                f"{self.tables.location(target)}")
            with tx.update_snapshot(snapshot_properties=props).overwrite() as swap:
                for data_file in mixed:
                    swap.delete_data_file(data_file)
                for path in kept:
                    swap.append_data_file(parquet_file_to_data_file(t.io, tx.table_metadata, path))
        if len(mixed) < len(files):
            tx.delete(expr, snapshot_properties=props)  # what is left: files of the replaced rows alone
        return target

    def commit(self, ident: tuple[str, str], written: Written, props: dict, replaced, spark: SparkFactory,
               where: str) -> bool:
        """One metadata commit, under the table's lock: the schema widened if it must be, the
        replaced rows' files dropped, the new ones added. A widening Iceberg cannot make in metadata
        rewrites the table's other files here, holding the lock, so no load of the table commits
        meanwhile and the rewrite is done once. False if the table's schema is no longer
        `written.base` (the files were written for it) or another writer committed first: the caller
        tries again. An error before the commit call removes what the load wrote; one from the call
        itself leaves what `send` decides."""
        from pyiceberg.expressions import AlwaysTrue

        with self.tables.lock(*ident) as held:
            t = self.tables.table(*ident)
            if schema_of(t) != written.base:
                return False  # widened meanwhile: the caller writes its files again under the new schema
            if t is None:
                held.fence()  # the catalog's commit is no write the store can make conditional
                return self.create(ident, written.schema, [(written.files, props)], where, (written.folder,))
            rewrite = needs_rewrite(written.base, written.schema)
            target, rewritten = None, []
            try:
                if rewrite:
                    target, rewritten = rewrite_table(self.tables, t, written.schema, spark, replaced, where)
                tx = t.transaction()
                self._widen(tx, written.base, written.schema, rewrite)
                if rewrite:
                    tx.delete(AlwaysTrue(), snapshot_properties=props)
                    if rewritten:
                        tx.add_files(rewritten, snapshot_properties=props, check_duplicate_files=False)
                else:
                    target = self._drop(tx, t, replaced, spark, props, where)
                if written.files:  # new files under fresh names: no need to scan the table for them (a year of hours)
                    tx.add_files(written.files, snapshot_properties=props, check_duplicate_files=False)
                held.fence()  # the catalog's commit is no write the store can make conditional
            except BaseException:
                self.tables.store.delete(written.folder)  # never committed: nobody references these files
                if target is not None:
                    self.tables.store.delete(target)
                raise
            if self.send(tx, ident, t, props, where, [written.folder, target]):
                return True
        if target is not None:
            self.tables.store.delete(target)  # never committed: the next attempt rewrites on the new snapshot
        return False

    def commit_together(self, ident: tuple[str, str], t, written: Written, loads: dict[str, dict], where: str) -> bool:
        """One commit of many landing hours, under the table's lock: their rows the table held dropped,
        their files added, each hour's load (`load_props`) in the snapshots' `kafka-landing.loads`.
        False if the table changed since `t`, the table `stage` planned on (its hours then load
        alone: one may have loaded newer content meanwhile)."""
        from pyiceberg.expressions import In

        if len(loads) < 2:
            return False
        props = {prop("column"): self.tables.column, prop("loads"): json.dumps(loads, sort_keys=True)}
        with self.tables.lock(*ident) as held:
            now = self.tables.table(*ident)
            if snapshot_id(now) != snapshot_id(t) or schema_of(now) != written.base:
                return False
            held.fence()  # the catalog's commit is no write the store can make conditional
            if now is None:
                return self.create(ident, written.schema, [(written.files, props)], where, (written.folder,))
            replaced = In(HOUR_COLUMN, sorted(loads))
            held_files = [task.file for task in now.scan(row_filter=replaced).plan_files()] \
                if now.current_snapshot() else []
            if any(spans_hours(now, f) for f in held_files):
                return False  # an hour of a compacted day: its own load rewrites the day's file, by Spark
            tx = now.transaction()
            self._widen(tx, written.base, written.schema, rewrite=False)
            if held_files:
                tx.delete(replaced, snapshot_properties=props)
            tx.add_files(written.files, snapshot_properties=props, check_duplicate_files=False)
            return self.send(tx, ident, now, props, where, [written.folder])

    def create(self, ident: tuple[str, str], schema: dict, adds: list[tuple[list[str], dict]], where: str | None = None,
               discard: tuple[str, ...] = ()) -> bool:
        """The table, made with its first loads' files ((files, snapshot properties) each) in one
        commit (`send`); False if another load made it first. An error before the commit removes
        `discard`, the folders of those files."""
        ident = self.tables.identifier(*ident)
        try:
            ensure_namespace(self.tables.catalog, ident[0])
            tx = self.tables.catalog.create_table_transaction(
                ident, schema=arrow_schema(schema, self.tables.columns), location=self.tables.uri(*ident),
                properties={SCHEMA_PROPERTY: json.dumps(schema), **table_properties(self.tables.columns)})
            with tx.update_spec() as spec:
                self.tables.partition_by(spec)  # a day's files compact to one (`compact`)
            for files, props in adds:
                if files:
                    tx.add_files(files, snapshot_properties=props, check_duplicate_files=False)
        except BaseException:
            for rel in discard:
                self.tables.store.delete(rel)  # never committed: nobody references these files
            raise
        return self.send(tx, ident, None, adds[-1][1], where or ".".join(ident), list(discard))

    def send(self, tx, ident: tuple[str, str], base, props: dict, where: str, discard: list[str | None]) -> bool:
        """Ask the catalog to commit `tx`, made on table `ident` as `base` (None: a new one). True if it
        committed; False if it was refused (the table changed since `base`, or another load made it):
        nothing committed. Any other error leaves the outcome unknown: the database may have
        committed and lost its answer. Then the table is read again: if a snapshot since `base` has
        this commit's `props`, it committed. If none has, `discard` (folders only this commit
        lists) is removed and the error raised as it was. If the table cannot be read, nothing is
        removed: upkeep removes after a day what no snapshot lists."""
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

        try:
            tx.commit_transaction()
            crash_point("warehouse:committing")  # inside the commit: the catalog has it, the load has no answer yet
            return True
        except (CommitFailedException, ValidationException, TableAlreadyExistsError):
            return False  # pyiceberg's word that nothing committed
        except Exception as exc:  # noqa: BLE001 - classified below, and raised as it was unless found
            lost = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            kept = [self.tables.location(rel) for rel in discard if rel]
            try:
                found = self._own_snapshot(ident, base, props)
            except Exception as looking:  # noqa: BLE001 - the database still away, most likely
                raise LoadError(f"{where}: the catalog's answer to the commit was lost ({lost}), and the table "
                                f"cannot be read to see whether the commit went through ({type(looking).__name__}: "
                                f"{looking}). Its files are kept: {kept}. The load is asked for again: it finds "
                                "the commit in the table's snapshots, or commits; files no snapshot lists are "
                                "removed by upkeep after a day", transient=is_transient(exc)) from exc
            if found is not None:
                log.warning("%s: the catalog's answer to the commit was lost (%s), but the table holds it "
                            "(snapshot %s): loaded", where, lost, found)
                return True
            for rel in discard:
                if rel:
                    self.tables.store.delete(rel)  # the table holds no snapshot of it: nobody references these files
            raise

    def _own_snapshot(self, ident: tuple[str, str], base, props: dict) -> int | None:
        """The id of a snapshot made since `base` (the table a commit was made on; None: before the
        table) whose summary has `props`, or None: the current snapshot's parent chain, walked back
        to `base`'s current snapshot, not the whole history."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            t = self.tables.catalog.load_table(ident)
        except NoSuchTableError:
            return None
        stop = snapshot_id(base)
        for snap in Lineage(t, self.tables.column).walk():
            if snap.snapshot_id == stop:
                return None
            summary = snap.summary.additional_properties if snap.summary else {}
            if all(summary.get(k) == v for k, v in props.items()):
                return snap.snapshot_id
        return None

    def _widen(self, tx, table_schema: dict, merged: dict, rewrite: bool) -> None:
        """The table's schema made `merged` in the transaction: each changed type by itself, then
        what is new (`type_changes` says why not union_by_name alone)."""
        if merged == table_schema:
            return
        with tx.update_schema(allow_incompatible_changes=rewrite) as update:
            for path, new_type in type_changes(table_schema, merged):
                update.update_column(path, field_type=_iceberg_type(new_type))
            update.union_by_name(arrow_schema(merged, self.tables.columns))
        tx.set_properties({SCHEMA_PROPERTY: json.dumps(merged)})


def needs_rewrite(old, new) -> bool:
    """True if going from Spark type `old` to `new` (a widening `merge_schemas` allowed) changes a
    column's type in a way Iceberg cannot apply in metadata: every primitive change but a decimal
    precision grown at the same scale. pyiceberg 0.12 wrongly accepts a scale change in metadata,
    which would reread old values at the new scale: that is why scale is decided here."""
    return zip_types(old, new, _rewrite_node)


def _rewrite_node(path: Path, old, new, inner: dict) -> bool:
    if old == new or old is None or new is None:  # a field only one side has: new in metadata
        return False
    if isinstance(old, str) and isinstance(new, str):
        if old.startswith("decimal(") and new.startswith("decimal("):
            return old.split(",")[1] != new.split(",")[1]
        return True
    return any(inner.values()) if kind(old) is not None and kind(old) == kind(new) else True


def type_changes(old, new) -> list[tuple[tuple[str, ...], str]]:
    """(column path, new Spark type) of every primitive whose type `merge_schemas` changed, nested
    ones by Iceberg's names (`element`, `value`). Applied one by one: pyiceberg's union_by_name
    keeps string where binary was asked (it reads binary as string) and cannot be trusted here."""
    return zip_types(old, new, _change_node)


def _change_node(path: Path, old, new, inner: dict) -> list[tuple[tuple[str, ...], str]]:
    if old == new or old is None or new is None:
        return []
    if isinstance(old, str) and isinstance(new, str):
        return [(iceberg_path(path), new)]
    return [c for step, changes in inner.items() if step != KEY for c in changes]  # a map's keys are strings


def _iceberg_type(spark_type: str):
    from pyiceberg.types import BinaryType, DecimalType, DoubleType, LongType

    simple = {"long": LongType(), "double": DoubleType(), "binary": BinaryType()}
    if spark_type in simple:
        return simple[spark_type]
    precision, scale = spark_type[len("decimal("):-1].split(",")
    return DecimalType(int(precision), int(scale))


def ensure_namespace(catalog, namespace: str) -> None:
    """The dataset's namespace, made if missing. The first loads of a dataset's tables (an hour's and
    its event day's, run at once) may race to make it: the SQL catalog's loser gets its unique key's
    error, not NamespaceAlreadyExistsError, and finds the namespace made."""
    try:
        catalog.create_namespace(namespace)
    except Exception:  # noqa: BLE001 - whichever error the catalog gives, the namespace is what counts
        if not catalog.namespace_exists(namespace):
            raise
