"""Event partitions made one data file each once they are over, so a table stays as fast to read
after years as after a week.

A load writes one file per landing hour of each event partition it changes: a day that records
reached over 30 landing hours (late ones too) holds 30 files, a year about ten thousand, and a
reader's plan of one day then reads manifests of thousands of entries. Once the partition ended
`after` ago (a day, by default), upkeep rewrites its files as one (one Spark job for every due
partition of the table) and commits the swap: the same rows, the old files dropped, the new one
added, in one commit, conditional on the snapshot it read and under the table's lock, so it never
races a load (a load that committed meanwhile wins: the compaction gives way until the next
upkeep). A late record later adds a file of its landing hour, and the next upkeep compacts the day
again. The event tables are partitioned by the event column alone (`hour` is a column, not a
partition), which is what lets one file hold the day; a table made before that is given the spec
here. Landing-hour tables keep one file per hour: what lets a load replace exactly that hour.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from kafka_landing.naming import EVENT_TABLE_SUFFIX, UNKNOWN_EVENT
from kafka_landing.warehouse.backend import LoadError, SparkFactory
from kafka_landing.warehouse.iceberg.tables import HOUR_COLUMN, Tables, snapshot_id

COMPACT_AFTER = timedelta(hours=24)  # an event partition is compacted once it ended this long ago
COMPACTION = "kafka-landing.compaction"  # on a compaction's snapshot: its id (what `send` looks for)


@dataclass(frozen=True)
class Compacted:
    partitions: int  # event partitions made one file each
    files: int  # the files they held before


def ended(partition: str, column: str) -> datetime | None:
    """When an event partition is over: the end of its day (or hour), or of the landing day of an
    `__unknown__<day>` partition; None for a value that names no time."""
    from datetime import timezone

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
    """An event table made when its spec was (event partition, hour), given the spec of the event
    partition alone: files already written keep theirs; new ones, a compacted day's among them,
    may hold every landing hour of the partition."""
    if not any(f.name == HOUR_COLUMN for f in t.spec().fields):
        return t
    with t.update_spec() as spec:
        spec.remove_field(HOUR_COLUMN)
    return tables.table(*ident)


def compact(tables: Tables, ident: tuple[str, str], spark: SparkFactory, now: datetime,
            after: timedelta = COMPACT_AFTER) -> Compacted | None:
    """The table's due event partitions (`due`) made one file each in one Spark job and one commit;
    None if none was due, or a load committed while they were written (the next upkeep tries again)."""
    from pyiceberg.expressions import In

    from kafka_landing.warehouse.iceberg.commits import Commits
    from kafka_landing.warehouse.iceberg.files import write_compacted

    column = tables.column
    t = tables.table(*ident)
    if column == HOUR_COLUMN or t is None or t.current_snapshot() is None:
        return None
    tasks = list(t.scan().plan_files())
    files: dict[str, list] = {}
    for task in tasks:
        files.setdefault(_value(t, task.file, column), []).append(task.file)
    todo = due({p: len(fs) for p, fs in files.items()}, column, now, after)
    if not todo:
        return None
    where = f"{'.'.join(ident)}: compacting {len(todo)} {column} partition(s) {todo[0]}..{todo[-1]}"
    old = [f for p in todo for f in files[p]]
    target = tables.rel(*ident, "data", f"_compact-{uuid.uuid4().hex}")
    try:
        paths = write_compacted(tables, t.scan(row_filter=In(column, todo)), [f.file_path for f in old], spark, target)
        got, want = tables.rows_in(paths), sum(f.record_count for f in old)
        if got != want or len(paths) != len(todo):
            raise LoadError(f"{where}: wrote {got} rows in {len(paths)} files, the partitions hold {want} rows; nothing "
                            f"was committed. Look at {tables.location(target)}")
    except BaseException:
        tables.store.delete(target)
        raise
    props = {COMPACTION: uuid.uuid4().hex, "kafka-landing.column": column}
    with tables.lock(*ident) as held:
        now_t = tables.table(*ident)
        if snapshot_id(now_t) != snapshot_id(t):
            tables.store.delete(target)  # a load committed since: its day may have changed; next time
            return None
        held.fence()
        tx = now_t.transaction()
        tx.delete(In(column, todo), snapshot_properties=props)
        tx.add_files(paths, snapshot_properties=props, check_duplicate_files=False)
        if not Commits(tables).send(tx, ident, now_t, props, where, [target]):
            tables.store.delete(target)
            return None
    return Compacted(len(todo), len(old))


def _value(t, data_file, column: str) -> str:
    """The event partition a data file belongs to, from its partition record under its own spec."""
    spec = t.specs()[data_file.spec_id]
    names = [f.name for f in spec.fields]
    return data_file.partition[names.index(column)]
