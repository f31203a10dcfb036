"""Partitions made one data file each once they are over, so a table stays as fast to read after
years as after a week.

A load writes a file per landing hour of each partition it changes: a landing-hour table's day
holds 24, an event day that records reached over 30 landing hours (late ones too) holds 30, a
year about ten thousand, and a reader's plan of one day then reads manifests of thousands of
entries. Once the partition ended `after` ago (a day, by default), upkeep rewrites its files as one
(one Spark job for every due partition of the table) and commits the swap: exactly those files
dropped, the new one added, the same rows, in one snapshot, conditional on the snapshot it read
and under the table's lock, so it never races a load (a load that committed meanwhile wins: the
compaction gives way until the next upkeep). A late record, or an hour landed again, later adds a
file of its landing hour, and the next upkeep compacts the day again.

What lets one file hold a day: the tables are partitioned by the day, not the hour
(`Tables.partition_by`): a landing-hour table by its hours' day, an event table by its event
partition alone, the landing hour a column of both. A table made with the former spec is given
today's here (`give_spec`). A compacted file's row count per hour is still exact without a scan of
the table: its row groups are sorted by hour (`Tables.partition_rows`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kafka_landing.naming import EVENT_TABLE_SUFFIX, UNKNOWN_EVENT
from kafka_landing.warehouse.backend import LoadError, SparkFactory
from kafka_landing.warehouse.iceberg.tables import DAY_CHARS, HOUR_COLUMN, Tables, snapshot_id

COMPACT_AFTER = timedelta(hours=24)  # a partition is compacted once it ended this long ago
COMPACTION = "kafka-landing.compaction"  # on a compaction's snapshot: its id (what `send` looks for)
# Partitions swapped per commit: a commit's new files make one manifest, so a backlog (a year, on
# the first upkeep after an upgrade) compacted in one commit would leave a manifest of 365 entries
# for every day's plan to read; a month per commit keeps them small and in time order.
BATCH = 31


@dataclass(frozen=True)
class Compacted:
    partitions: int  # partitions (landing or event days) made one file each
    files: int  # the files they held before


def ended(partition: str, column: str) -> datetime | None:
    """When an event partition is over: the end of its day (or hour), or of the landing day of an
    `__unknown__<day>` partition; None for a value that names no time."""
    value = partition[len(UNKNOWN_EVENT):] if partition.startswith(UNKNOWN_EVENT) else partition
    hourly = column == "event_hour" and not partition.startswith(UNKNOWN_EVENT)
    try:
        start = datetime.strptime(value, "%Y-%m-%dT%H" if hourly else "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return start + (timedelta(hours=1) if hourly else timedelta(days=1))


def due(files_by_partition: dict[str, int], column: str, now: datetime, after: timedelta = COMPACT_AFTER) -> list[str]:
    """The partitions to compact: more than one file, and over for `after`."""
    out = []
    for partition, files in files_by_partition.items():
        end = ended(partition, column)
        if files > 1 and end is not None and end + after <= now:
            out.append(partition)
    return sorted(out)


def event_column(t, table: str) -> str | None:
    """The event column an event-time table is partitioned by (event_day / event_hour); None for a
    landing-hour table, whatever its records' fields are named: by its name and its spec."""
    if not table.endswith(EVENT_TABLE_SUFFIX):
        return None
    first = next(iter(t.spec().fields), None)
    return first.name if first is not None and first.name in ("event_day", "event_hour") else None


def give_spec(tables: Tables, t, ident: tuple[str, str]):
    """A table made with a former spec given today's (`Tables.partition_by`): an event table's
    (event partition, hour) becomes the event partition alone, a landing-hour table's hour becomes
    its day. Files already written keep theirs; new ones, a compacted day's among them, may hold
    every landing hour of the day."""
    if not any(f.name == HOUR_COLUMN for f in t.spec().fields):
        return t
    with t.update_spec() as spec:
        spec.remove_field(HOUR_COLUMN)
        if tables.column == HOUR_COLUMN:
            tables.partition_by(spec)
    return tables.table(*ident)


def compact(tables: Tables, ident: tuple[str, str], t, spark: SparkFactory, now: datetime,
            after: timedelta = COMPACT_AFTER) -> Compacted | None:
    """Table `t`'s due partitions (`due`: landing days, or event partitions) made one file each in
    one Spark job, swapped in a commit per `BATCH` of them; None if none was due, or a load
    committed while they were written (the next upkeep tries again)."""
    from kafka_landing.warehouse.iceberg.files import write_compacted

    column = tables.column
    if t is None or t.current_snapshot() is None:
        return None
    files: dict[str, list] = {}
    for task in t.scan().plan_files():
        files.setdefault(_key(t, task.file, column), []).append(task.file)
    todo = due({p: len(fs) for p, fs in files.items()}, column, now, after)
    if not todo:
        return None
    kind = "landing day" if column == HOUR_COLUMN else f"{column} partition"
    where = f"{'.'.join(ident)}: compacting {len(todo)} {kind}(s) {todo[0]}..{todo[-1]}"
    old = [f for p in todo for f in files[p]]
    target = tables.rel(*ident, "data", f"_compact-{uuid.uuid4().hex}")
    try:
        paths = write_compacted(tables, t.schema(), [f.file_path for f in old], spark, target)
        made = _checked(tables, {p: files[p] for p in todo}, paths, where, target)
    except BaseException:
        tables.store.delete(target)
        raise
    done, base = 0, snapshot_id(t)
    for start in range(0, len(todo), BATCH):
        batch = todo[start:start + BATCH]
        committed, base = _swap(tables, ident, base, [f for p in batch for f in files[p]], [made[p] for p in batch],
                                f"{where} ({batch[0]}..{batch[-1]})")
        done += len(batch) if committed else 0
        if base is None:  # another writer committed: its partitions may have changed; the rest next time
            break
    if not done:
        tables.store.delete(target)
        return None
    # Files of batches not committed stay under `target` beside the committed ones: upkeep removes
    # them a day later, as it does every file no snapshot lists.
    return Compacted(done, sum(len(files[p]) for p in todo[:done]))


def _checked(tables: Tables, old: dict[str, list], paths: list[str], where: str, target: str) -> dict[str, str]:
    """Each partition's new file, once its footer holds the rows its old files' metadata counts."""
    from urllib.parse import unquote

    made = {unquote(p.rsplit("/", 2)[-2].split("=", 1)[1]): p for p in paths}
    for partition, fs in old.items():
        want = sum(f.record_count for f in fs)
        got = tables.rows_in([made[partition]]) if partition in made else None
        if got != want:
            raise LoadError(f"{where}: partition {partition}'s new file holds {got} rows, its {len(fs)} files {want}; "
                            f"nothing was committed. Look at {tables.location(target)}")
    if len(made) != len(old):
        raise LoadError(f"{where}: {len(made)} files were written for {len(old)} partitions; nothing was committed. "
                        f"Look at {tables.location(target)}")
    return made


def _swap(tables: Tables, ident: tuple[str, str], base: int | None, old: list, paths: list[str],
          where: str) -> tuple[bool, int | None]:
    """One commit, under the table's lock, if the table is still at snapshot `base`: exactly the
    `old` data files dropped and the new ones added, in one snapshot. (Whether it committed; the
    snapshot the next batch may commit on: this commit's own, not the table's current one, which
    another writer may have moved since; None if there is none to go on from.)"""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from kafka_landing.warehouse.iceberg.commits import Commits

    props = {COMPACTION: uuid.uuid4().hex, "kafka-landing.column": tables.column}
    with tables.lock(*ident) as held:
        now_t = tables.table(*ident)
        if snapshot_id(now_t) != base:
            return False, None
        held.fence()
        tx = now_t.transaction()
        # An overwrite snapshot: pyiceberg 0.12 makes no `replace` one (Iceberg's operation for a
        # compaction); `COMPACTION` in its summary tells an incremental reader it changed no row.
        with tx.update_snapshot(snapshot_properties=props).overwrite() as swap:
            for data_file in old:
                swap.delete_data_file(data_file)
            for path in paths:
                swap.append_data_file(parquet_file_to_data_file(now_t.io, tx.table_metadata, path))
        # pyiceberg's overwrite carries every earlier manifest that lists only removed files (a
        # batch's 744 entries, 130 KB), and a day's plan then reads them; an append, even of
        # nothing, leaves them out, as Iceberg Java does. Same transaction: one commit.
        with tx.update_snapshot(snapshot_properties=props).fast_append():
            pass
        if not Commits(tables).send(tx, ident, now_t, props, where, []):
            return False, None
    mine = snapshot_id(now_t)  # the commit updates the table it was made from; a lost answer found later does not
    return True, (mine if mine != base else None)


def _key(t, data_file, column: str) -> str:
    """The partition a data file is compacted in, from its partition record under its own spec: its
    event partition, or its landing hour's day (an hour under the former spec, a day under today's)."""
    spec = t.specs()[data_file.spec_id]
    source = t.schema().find_field(column).field_id
    value = data_file.partition[next(i for i, f in enumerate(spec.fields) if f.source_id == source)]
    return value[:DAY_CHARS] if column == HOUR_COLUMN else value
