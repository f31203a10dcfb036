"""Where a BigQuery load goes: the partition one load job replaces whole (a `Target`), for each
kind of table the warehouse loads, and the landed hours a day partition holds.

Landing-hour tables (`LandingTables`), partitioned by ingestion time:

    project.dataset.table                 partitioned per DAY
    project.dataset.table$20260131        every landed hour of 2026-01-31 (UTC landing hours)
    <ledger>/warehouse_loads/bigquery/<dataset>/<table>/day=2026-01-31.json
                                          the day's last load: its content hash, job and hours
    <ledger>/warehouse_loads/bigquery/<dataset>/<table>/hour=2026-01-31T13.json
                                          what was loaded of each hour: its done file's content hash
                                          and the job

Why days: BigQuery allows 10,000 partitions per table, so a table with one
partition per hour stops loading after 417 days; by day it lasts 27 years, and
a backfill of a year is 365 load jobs, not 8,760 (BigQuery allows 1,500 per
table a day, failed ones included). The price: each hour's load reloads the
hours of its day landed before it (on average 12 hours of files for an hourly
schedule; load jobs are free, and a backfill loads each day once). Tables that
kafka_landing created per HOUR before keep that layout and load as they did
(`table$YYYYMMDDHH`), warned about when 9,000 partitions are reached. Loading
hour H of a table by DAY loads exactly the gs:// files the done files of H's day
list (`day_hours`: read under the day's lock, so a load that waited for another
sees the day as it is now).

Event-time tables (`EventTables`): `<table>__by_event` partitioned by DAY
on the event time column (an `event_time_partition: hour` table is not created:
by HOUR it would stop loading after 417 days; one made so before keeps loading,
warned as it fills), each event partition replaced whole by one load job
into its decorator (a decorator load holds only that partition's rows by
construction, and BigQuery refuses one whose rows fall outside it). Records with
no event time would be the table's NULL partition, and sentinel times (before 1960
or after 2159) its __UNPARTITIONED__ one, which no documented decorator writes:
they are the unknown partitions of their landing days (`__unknown__2026-01-31`,
`naming.event_partition`), each loaded into its day of `<table>__by_event_unknown`,
a table partitioned by DAY on ingestion time (`$20260131`), replaced whole the same
way. Loads are recorded per partition:

    <ledger>/warehouse_loads/bigquery/<dataset>/<table>__by_event/partition=2026-01-31.json
    <ledger>/warehouse_loads/bigquery/<dataset>/<table>__by_event/partition=__unknown__2026-01-31.json

The single `__unknown__` of before was `<table>__by_event_unknown` unpartitioned: its
target stays the whole table, so that its hand-over (`by_event.load.hand_over`, before
any unknown day is loaded) drops it; the first unknown day creates it again by day.

Pure: no client, no Dagster, no Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kafka_landing.handoff.manifests import DoneFileError, Manifest, content_sha, read_done_file
from kafka_landing.naming import (
    EVENT_TABLE_SUFFIX,
    UNKNOWN_EVENT,
    Hour,
    check_event_partition,
    check_identifier,
    day_done_file_glob,
    event_load_ledger_path,
    event_load_lock_path,
    hour_folder_tag,
    is_unknown,
    load_day_ledger_path,
    load_day_lock_path,
    load_ledger_path,
    load_lock_path,
    unknown_day,
)
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError

HOUR, DAY = "HOUR", "DAY"  # how a table is partitioned: new tables by DAY, tables of before by HOUR
MAX_PARTITIONS = 10_000  # per table (BigQuery's quotas): 417 days of hours, 27 years of days
UNPARTITIONED = "NONE"  # the layout of the table of records with no event time, before it was by landing day
UNKNOWN_TABLE_SUFFIX = "_unknown"


def table_id(project: str, dataset: str, table: str) -> str:
    return f"{project}.{check_identifier(dataset, 'dataset')}.{check_identifier(table, 'table')}"


def partition_id(hour: Hour, layout: str = HOUR) -> str:
    """The ingestion-time partition of a landing hour: 2026-01-31T13 -> 2026013113 in a table
    partitioned by HOUR, 20260131 in one partitioned by DAY."""
    try:
        return Hour(hour).decorator(by_day=layout != HOUR)
    except ValueError:
        raise LoadError(f"hour {hour!r} is not an hour tag like 2026-01-31T13") from None


def day_sha(hours: dict[str, str]) -> str:
    """The identity of a day's content: its hours' done-file hashes, empty hours included."""
    return content_sha(json.dumps(sorted(hours.items())).encode())


@dataclass(frozen=True)
class Target:
    """What one load job replaces whole: a landing hour's partition (a table partitioned by HOUR),
    its day's (by DAY), an event partition, or the whole table of the records with no event time;
    with the ledger record of its loads and the lock that serialises them."""

    dataset: str
    table: str  # the BigQuery table
    partition: str  # what is loaded: a landing hour (of a day: the hour whose load it is), or an event partition
    layout: str  # HOUR, DAY or UNPARTITIONED
    pid: str  # its partition's id, in the decorator and the job ids: YYYYMMDD[HH], or "unknown" (a whole table)
    location: str  # project.dataset.table$YYYYMMDD[HH], or project.dataset.table
    ledger: str
    lock: str
    where: str  # how messages name the load
    holds_hours: bool = False  # a landing day: loaded from every landed hour of it, and read back hour by hour


class LandingTables:
    """Landing-hour tables: partitioned by ingestion time, per DAY (every table created since days)
    or per HOUR (a table created so before keeps it); a table's layout is the existing table's."""

    layout: str | None = None  # None: each table's own (the existing table's; DAY for one a first load creates)
    field: str | None = None  # by ingestion time
    record_glob = "hour=*.json"
    recreate_by_day = ("Recreate it partitioned by DAY (drop it, or rename it away, and load its hours again: "
                       "kafka_landing creates new tables by DAY)")

    def target(self, project: str, dataset: str, table: str, hour: str, layout: str) -> Target:
        tid = table_id(project, dataset, table)
        pid = partition_id(hour, layout)
        if layout == HOUR:
            return Target(dataset, table, hour, HOUR, pid, f"{tid}${pid}", load_ledger_path(dataset, table, hour),
                          load_lock_path(dataset, table, hour), f"{tid} hour {hour}")
        return Target(dataset, table, hour, DAY, pid, f"{tid}${pid}", load_day_ledger_path(dataset, table, hour),
                      load_day_lock_path(dataset, table, hour), f"{tid} day {Hour(hour).day} (loading hour {hour})",
                      holds_hours=True)

    def record_path(self, dataset: str, table: str, hour: str) -> str:
        """The record of what was loaded of a landing hour (of a day too)."""
        return load_ledger_path(dataset, table, hour)

    def recorded(self, name: str) -> str | None:
        """The hour a record's file name is of."""
        return hour_folder_tag(name)

    def problem(self, ref: str, table: str, tp, layout: str | None) -> str | None:
        """Why an existing table cannot be loaded (its time partitioning `tp`): partitioned other than by
        ingestion time per HOUR or DAY, or (`layout`) other than when the load began; None if it can."""
        if tp is None or tp.type_ not in (HOUR, DAY) or tp.field or (layout and tp.type_ != layout):
            how = "not partitioned" if tp is None else f"partitioned by {tp.type_}" + (f" on {tp.field}" if tp.field
                                                                                      else "")
            return (f"table {ref} exists but is {how}: kafka_landing loads landing hours into a table partitioned by "
                    f"ingestion time, per DAY (or per HOUR for a table it created so"
                    f"{', as this one was when the load began' if layout else ''}); drop or rename it, or route the "
                    "topic elsewhere")
        return None

    def not_created(self, target: Target) -> str | None:
        """Why a load may not create the target's table (None: it may)."""
        return None


class EventTables:
    """Event-time tables, partitioned by `granularity` ("day" or "hour") on column `field` (None: the
    column the table is partitioned on now, a retired table's, whose topic's config is gone; such a
    table is never created). The unknown partitions go to `<table>_unknown`, partitioned by DAY on
    ingestion time whatever `granularity` and `field` (`by_event.load.event_backend` gives them a backend
    whose `field` is None, which the load job reads when it creates the table)."""

    record_glob = "partition=*.json"
    recreate_by_day = ("Set the topic's event_time_partition to day, then drop the event-time table and load its "
                       "event days (kafka_landing creates it partitioned by DAY on the event time column)")

    def __init__(self, granularity: str, field: str | None):
        if granularity not in ("day", "hour"):
            raise ValueError(f"event partitions are by 'day' or 'hour', not {granularity!r}")
        self.layout = DAY if granularity == "day" else HOUR
        self.field = field

    def target(self, project: str, dataset: str, table: str, partition: str, layout: str | None = None) -> Target:
        partition = check_event_partition(partition)
        ledger = event_load_ledger_path(dataset, table, partition)
        lock = event_load_lock_path(dataset, table, partition)
        if is_unknown(partition):
            unknown = check_identifier(f"{table}{UNKNOWN_TABLE_SUFFIX}", "table")
            tid = table_id(project, dataset, unknown)
            if partition == UNKNOWN_EVENT:  # the single one of before: the whole table
                return Target(dataset, unknown, partition, UNPARTITIONED, "unknown", tid, ledger, lock,
                              f"{tid} (event partition {partition}, as it was before it was split by landing day)")
            pid = unknown_day(partition).replace("-", "")
            return Target(dataset, unknown, partition, DAY, pid, f"{tid}${pid}", ledger, lock,
                          f"{tid}${pid} (event partition {partition}: the records landed on {unknown_day(partition)} "
                          "with no usable event time)")
        pid = partition.replace("-", "").replace("T", "")
        tid = table_id(project, dataset, table)
        if len(pid) != (8 if self.layout == DAY else 10):
            raise LoadError(f"{tid}: {partition!r} is not an event partition of a table partitioned by {self.layout}")
        return Target(dataset, table, partition, self.layout, pid, f"{tid}${pid}", ledger, lock,
                      f"{tid}${pid} (event partition {partition})")

    def record_path(self, dataset: str, table: str, partition: str) -> str:
        return event_load_ledger_path(dataset, table, partition)

    def recorded(self, name: str) -> str | None:
        return name[len("partition="):-len(".json")]

    def problem(self, ref: str, table: str, tp, layout: str | None) -> str | None:
        """Why an existing table cannot be loaded: the table of the records with no usable event time
        is not partitioned by DAY on ingestion time (or, for the hand-over of the single partition of
        before, is partitioned), or an event-time table is not partitioned by this layout on this
        column (on the one it has, when `field` is None); None if it can."""
        unknown = table.endswith(f"{EVENT_TABLE_SUFFIX}{UNKNOWN_TABLE_SUFFIX}")
        field = self.field or (tp.field if tp is not None else None)
        if unknown:  # by landing day; unpartitioned as before only for the hand-over (layout None: either)
            by_day = tp is not None and tp.type_ == DAY and not tp.field
            ok = {UNPARTITIONED: tp is None, DAY: by_day}.get(layout, tp is None or by_day)
        else:
            ok = tp is not None and tp.type_ == self.layout and tp.field == field
        if not ok:
            how = "not partitioned" if tp is None else f"partitioned by {tp.type_}" + (f" on {tp.field}" if tp.field
                                                                                      else " by ingestion time")
            if unknown and layout == UNPARTITIONED:
                want = "not partitioned, as the records with no event time were before they were split by landing day"
            elif unknown:
                want = ("partitioned by DAY on ingestion time (it holds the records with no usable event time by "
                        "landing day)" + (": the unpartitioned table of before is dropped when the partition "
                                          f"{UNKNOWN_EVENT} is handed over, before any day is loaded" if tp is None
                                          else ""))
            else:
                want = f"partitioned by {self.layout} on column {field or 'its event time'}"
            return (f"table {ref} exists but is {how}; kafka_landing needs it {want}: drop or rename it, or set the "
                    "topic's event_time_partition to what it is")
        return None

    def not_created(self, target: Target) -> str | None:
        if self.field is None and not is_unknown(target.partition):
            return ("the table does not exist and its event-time column is unknown (no topic's config names the table "
                    "any more), so it is not created. Route a topic to it again, or remove the partition's markers if "
                    "its records are not wanted there")
        if target.layout == HOUR:  # 10,000 partitions per table: 417 days of event hours, then every load refused
            return (f"the topic's event_time_partition is hour, and BigQuery allows {MAX_PARTITIONS:,} partitions per "
                    "table: a table partitioned by HOUR would refuse every load after 417 days of event hours, so it "
                    "is not created. Set event_time_partition: day (a table partitioned by DAY on the event time "
                    "lasts 27 years; read an hour with WHERE TIMESTAMP_TRUNC(<event time column>, HOUR) = ...), or "
                    "load this topic into the Iceberg warehouse, whose event hours have no such limit. An "
                    "event-time table made by HOUR before keeps loading, warned as it fills")
        return None


@dataclass(frozen=True)
class DayHour:
    """One landed hour of a day partition: its done file, as read under the day's lock."""

    done: Manifest
    done_file: str | None
    sha: str


def day_hours(store: LandingStore, target: Target, done: Manifest, done_file: str | None, sha: str,
              recorded: dict) -> dict[str, DayHour]:
    """Every landed hour of the target's day, read under its lock (so a load that waited for it sees
    the day as it is now), the hour being loaded (`done`) as handed over. An hour the day's last load
    (`recorded`) loaded whose done file is gone fails the load: replacing the day without it would
    drop its rows."""
    where = target.where
    hours = {done.partition: DayHour(done, done_file, sha)}
    for rel in store.glob(day_done_file_glob(target.dataset, target.table, done.partition)):
        hour = hour_folder_tag(rel.rsplit("/", 2)[-2])
        if hour is None or hour == done.partition:
            continue
        try:
            other, other_sha = read_done_file(store, rel)
        except DoneFileError as exc:
            if exc.gone:
                continue  # removed since the listing: as if never listed (checked below against the ledger)
            raise LoadError(f"{where}: the day's partition holds every landed hour of it, and the done file of "
                            f"hour {hour}, {store.location(rel)}, cannot be read ({exc}). Nothing was loaded: "
                            f"re-land hour {hour} (or fix its done file), then load again",
                            transient=exc.transient, elsewhere=True, nothing_loaded=True) from None
        hours[hour] = DayHour(other, rel, other_sha)
    gone = sorted(h for h, r in (recorded.get("hours") or {}).items() if h not in hours and r.get("rows"))
    if gone:
        raise LoadError(f"{where}: hours {gone} were loaded into {target.location} and their done files are gone; "
                        "replacing the day without them would drop their rows. Nothing was loaded: re-land those "
                        "hours (or retire them, which leaves an empty done file), then load again", elsewhere=True,
                        nothing_loaded=True)
    return dict(sorted(hours.items()))


__all__ = ["DAY", "HOUR", "MAX_PARTITIONS", "UNPARTITIONED", "DayHour", "EventTables", "LandingTables", "Target",
           "day_hours", "day_sha", "partition_id", "table_id"]
