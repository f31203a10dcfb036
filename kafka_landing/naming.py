"""Names and paths of everything kafka_landing writes under the landing root: slices,
staging, landing files, done files, dead letters, the hand-off's pending markers, locks and
the BigQuery load ledger. No other module builds a landing-root path.

Every name that reaches a path or a table comes through `check_identifier` or
`check_topic`, so nothing from a config file or a record can escape the
landing root or inject into a table name. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from kafka_landing.errors import KafkaLandingError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
HOUR_KEY_FORMAT = "%Y-%m-%d-%H:%M"  # Dagster's hourly partition key format
HOUR_TAG_FORMAT = "%Y-%m-%dT%H"  # what appears in paths


class NameError_(KafkaLandingError, ValueError):
    """A name that may not be used as a dataset, table or topic."""


def check_identifier(name: object, what: str = "name") -> str:
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise NameError_(
            f"{what} {name!r} is not allowed: use letters, digits and '_', "
            "starting with a letter or '_', at most 128 characters"
        )
    return name


def check_topic(name: object) -> str:
    if not isinstance(name, str) or not TOPIC.match(name) or name in (".", ".."):
        raise NameError_(f"topic {name!r} is not a legal Kafka topic name")
    return name


def asset_safe(topic: str) -> str:
    """Dagster asset key parts allow [A-Za-z0-9_]; Kafka topics may also hold '.' and '-'."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic)


# --- hours -------------------------------------------------------------------

HOUR_TAG_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}")
ONE_HOUR = timedelta(hours=1)


class Hour(str):
    """One UTC hour, the value every layer names an hour by. It is its tag (`2026-01-31T13`), the
    form paths, manifests, markers and run tags hold, so it sorts, compares, hashes and serialises
    as the tag; every other form is one method here, not a conversion at each use.

    `Hour(x)` takes an Hour, a tag or an aware datetime (the hour that holds it)."""

    __slots__ = ()

    def __new__(cls, value: Hour | str | datetime) -> Hour:
        if type(value) is cls:
            return value
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise NameError_(f"{value!r} has no time zone: an hour is a UTC hour")
            return super().__new__(cls, value.astimezone(timezone.utc).strftime(HOUR_TAG_FORMAT))
        if isinstance(value, str) and HOUR_TAG_RE.fullmatch(value):
            try:
                datetime.strptime(value, HOUR_TAG_FORMAT)
            except ValueError:
                pass
            else:
                return super().__new__(cls, value)
        raise NameError_(f"{value!r} is not an hour tag like 2026-01-31T13")

    @classmethod
    def from_key(cls, key: str) -> Hour:
        """From a Dagster hourly partition key (`2026-01-31-13:00`)."""
        return cls(hour_from_key(key))

    @property
    def start(self) -> datetime:
        """When it begins (aware, UTC)."""
        return datetime.strptime(self, HOUR_TAG_FORMAT).replace(tzinfo=timezone.utc)

    @property
    def key(self) -> str:
        """Its Dagster hourly partition key: 2026-01-31-13:00."""
        return self.start.strftime(HOUR_KEY_FORMAT)

    @property
    def day(self) -> str:
        """Its UTC day: 2026-01-31."""
        return self[:10]

    @property
    def number(self) -> int:
        """Hours since the epoch: consecutive hours differ by one."""
        return int(self.start.timestamp()) // 3600

    def decorator(self, by_day: bool = False) -> str:
        """Its BigQuery partition id: 2026013113, or its day's, 20260131."""
        return self.day.replace("-", "") if by_day else self.replace("-", "").replace("T", "")

    def plus(self, hours: int) -> Hour:
        return Hour(self.start + timedelta(hours=hours))

    def closes(self, grace_minutes: int) -> datetime:
        """When it is closed: its end plus the topic's grace (records stamped in it may still arrive until then)."""
        return hour_closes(self.start, grace_minutes)

    def __repr__(self) -> str:
        return f"Hour({str(self)!r})"


def hour_from_key(key: str) -> datetime:
    try:
        return datetime.strptime(key, HOUR_KEY_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise ValueError(f"{key!r} is not an hourly partition key like 2026-01-31-13:00") from exc


def hour_key(hour: datetime) -> str:
    return hour.astimezone(timezone.utc).strftime(HOUR_KEY_FORMAT)


def hour_tag(hour: datetime) -> str:
    return hour.astimezone(timezone.utc).strftime(HOUR_TAG_FORMAT)


def hour_from_tag(tag: str) -> datetime:
    return datetime.strptime(tag, HOUR_TAG_FORMAT).replace(tzinfo=timezone.utc)


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def to_millis(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def hour_closes(hour: datetime, grace_minutes: int) -> datetime:
    """When an hour is closed: its end plus the topic's grace (records stamped in it may still arrive until then)."""
    return hour + ONE_HOUR + timedelta(minutes=grace_minutes)


def last_closed_hour(now: datetime, grace_minutes: int) -> datetime:
    """The newest hour H closed at `now` (`hour_closes(H) <= now`)."""
    return floor_hour(now - timedelta(minutes=grace_minutes)) - ONE_HOUR


# --- landing layout (relative to the landing root) ----------------------------
# Every builder takes an `Hour` (a tag, checked; a datetime is taken as its hour).


def _check_attempt(attempt: str) -> str:
    if not isinstance(attempt, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,128}", attempt):
        raise NameError_(f"landing attempt {attempt!r} is not allowed in a path: letters, digits, '_' and '-'")
    return attempt


def hour_folder_tag(name: str) -> Hour | None:
    """The hour of a folder or file named `hour=<tag>[.json]`; None for any other name."""
    m = re.fullmatch(r"hour=(\d{4}-\d{2}-\d{2}T\d{2})(?:\.json)?", name)
    try:
        return Hour(m[1]) if m else None
    except NameError_:
        return None


def slice_manifest_path(topic: str, hour: Hour) -> str:
    return f"slices/{check_topic(topic)}/hour={Hour(hour)}.json"


def slice_dir(topic: str) -> str:
    return f"slices/{check_topic(topic)}"


def plan_lock_path(topic: str) -> str:
    """One planner of a topic at a time (freezing reads its neighbours' manifests)."""
    return f"{slice_dir(topic)}/.plan.lock"


def staging_dir(topic: str) -> str:
    return f"staging/{check_topic(topic)}"


STAGING_GLOB = "hour=*/*"  # an attempt's folder under staging_dir, what the sweep ages


def staging_path(topic: str, first_hour: Hour, attempt: str) -> str:
    """A landing attempt's private folder: never listed by readers, swept when old."""
    return f"{staging_dir(topic)}/hour={Hour(first_hour)}/{_check_attempt(attempt)}"


def engine_losses_path(topic: str, hour: Hour) -> str:
    """How often landing the hour lost the Spark engine, per schema id (avro_landing/engine_losses.py)."""
    return f"engine_losses/{check_topic(topic)}/hour={Hour(hour)}.json"


def publish_lock_path(topic: str, hour: Hour) -> str:
    """One publisher of a topic's hour at a time."""
    return f"locks/{check_topic(topic)}/hour={Hour(hour)}.lock"


TABLES_DIR = "tables"


def dataset_dir(dataset: str) -> str:
    return f"{TABLES_DIR}/{check_identifier(dataset, 'dataset')}"


def table_dir(dataset: str, table: str) -> str:
    return f"{dataset_dir(dataset)}/{check_identifier(table, 'table')}"


def table_hour_dir(dataset: str, table: str, hour: Hour) -> str:
    return f"{table_dir(dataset, table)}/hour={Hour(hour)}"


def reader_schema_path(dataset: str, table: str, sha256: str) -> str:
    """A zero-record Avro file holding a BigQuery load's reader schema, named by the schema's hash
    (written once, never changed; `_` keeps it out of the table's hour folders)."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise NameError_(f"{sha256!r} is not a sha256 hex digest")
    return f"{table_dir(dataset, table)}/_reader_schemas/{sha256}.avro"


def done_file_path(dataset: str, table: str, hour: Hour) -> str:
    return f"{table_hour_dir(dataset, table, hour)}/_DONE.json"


def done_file_glob(dataset: str, table: str) -> str:
    """Every done file of a table: a listing by prefix, never the files beside them."""
    return f"{table_dir(dataset, table)}/hour=*/_DONE.json"


DONE_FILE_RE = re.compile(
    r"^tables/(?P<dataset>[A-Za-z_][A-Za-z0-9_]*)/(?P<table>[A-Za-z_][A-Za-z0-9_]*)"
    r"/hour=(?P<hour>\d{4}-\d{2}-\d{2}T\d{2})/_DONE\.json$"
)


# --- event partitions: a table's records by event time (`event_partitions`) ----------

EVENT_TABLE_SUFFIX = "__by_event"
UNKNOWN_EVENT = "__unknown__"  # the prefix of the partitions of records with no usable event time
EVENT_PARTITION_RE = re.compile(r"\d{4}-\d{2}-\d{2}(?:T\d{2})?|__unknown__(?:\d{4}-\d{2}-\d{2})?")
EVENTS_DIR = "event_partitions"
EVENT_PENDING_DIR = "pending_event_loads"
# The event hours an event partition is cut by: outside them an event time is a sentinel (0001-01-01,
# 1900-01-01, timestamp zero or -1 on 1969-12-31/1970-01-01, 9999-12-31), not a time to file the
# record by. BigQuery partitions 1960-01-01 to 2159-12-31 only; the epoch's day is where a producer's
# missing time (0) lands, and a day fed by every landing hour would grow with history.
EVENT_TIME_FROM = "1970-01-02T00"
EVENT_TIME_UNTIL = "2159-12-31T23"


def event_table(table: str) -> str:
    """The event-time table beside a table: shop.orders -> shop.orders__by_event."""
    return f"{check_identifier(table, 'table')}{EVENT_TABLE_SUFFIX}"


def placeable(event_hour: Hour | str) -> bool:
    """Whether an event hour files its records by event time (EVENT_TIME_FROM..EVENT_TIME_UNTIL)."""
    return EVENT_TIME_FROM <= Hour(event_hour) <= EVENT_TIME_UNTIL


def unknown_partition(landing_hour: Hour) -> str:
    """The event partition of the records a landing hour brought with no usable event time (none,
    or a sentinel outside EVENT_TIME_FROM..EVENT_TIME_UNTIL): one per landing day, so it is fed by
    at most that day's 24 landing hours (__unknown__2026-01-31)."""
    return f"{UNKNOWN_EVENT}{Hour(landing_hour).day}"


def is_unknown(partition: str) -> bool:
    """An unknown partition: of a landing day, or the single one of before (`UNKNOWN_EVENT`)."""
    return partition.startswith(UNKNOWN_EVENT)


def unknown_day(partition: str) -> str | None:
    """The landing day of an unknown partition (2026-01-31); None for the single one of before."""
    if not is_unknown(partition):
        return None
    return partition[len(UNKNOWN_EVENT):] or None


def superseded(partition: str) -> bool:
    """A partition no landed file is cut into any more (each landing hour's records in it now belong
    to the unknown partition of its landing day): the single __unknown__ of before, and event days or
    hours outside EVENT_TIME_FROM..EVENT_TIME_UNTIL. `event_load` hands them over once."""
    if partition == UNKNOWN_EVENT:
        return True
    if is_unknown(partition):
        return False
    return not placeable(partition[:10] + "T00") or not placeable(partition[:10] + "T23")


def event_partition(event_hour: Hour | None, granularity: str, landing_hour: Hour) -> str:
    """The event partition of a file of landing hour `landing_hour` whose records are of
    `event_hour`: its day (2026-01-31) or hour (2026-01-31T13), or, for records with no event time
    or a sentinel one (outside EVENT_TIME_FROM..EVENT_TIME_UNTIL), the unknown partition of the
    landing day (__unknown__2026-02-03)."""
    if granularity not in ("day", "hour"):
        raise ValueError(f"event partitions are by 'day' or 'hour', not {granularity!r}")
    if event_hour is None or not placeable(event_hour):
        return unknown_partition(landing_hour)
    return Hour(event_hour).day if granularity == "day" else Hour(event_hour)


def check_event_partition(partition: object) -> str:
    try:
        if not isinstance(partition, str) or not EVENT_PARTITION_RE.fullmatch(partition):
            raise NameError_(partition)
        if partition != UNKNOWN_EVENT:  # a real day (or hour)
            when = unknown_day(partition) or partition
            Hour(when if len(when) == 13 else f"{when}T00")
    except NameError_:
        raise NameError_(f"{partition!r} is not an event partition like 2026-01-31, 2026-01-31T13 or "
                         f"{UNKNOWN_EVENT}2026-01-31 (the records with no usable event time landed that day)"
                         ) from None
    return partition


def event_partition_dir(dataset: str, table: str, partition: str) -> str:
    return f"{EVENTS_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}/" \
           f"{check_event_partition(partition)}"


def event_source_path(dataset: str, table: str, partition: str, hour: Hour) -> str:
    """Says that landing hour H's done file may list files of the partition (the index; never removed)."""
    return f"{event_partition_dir(dataset, table, partition)}/from/hour={Hour(hour)}.json"


def event_manifest_path(dataset: str, table: str, partition: str, version: int) -> str:
    return f"{event_partition_dir(dataset, table, partition)}/v={int(version):06d}.json"


def event_pending_dir(dataset: str, table: str, partition: str | None = None) -> str:
    base = f"{EVENT_PENDING_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}"
    return base if partition is None else f"{base}/{check_event_partition(partition)}"


def event_pending_path(dataset: str, table: str, partition: str, hour: Hour) -> str:
    """Landing hour H changed what the partition holds: load it again."""
    return f"{event_pending_dir(dataset, table, partition)}/hour={Hour(hour)}.json"


def event_handover_path(dataset: str, table: str) -> str:
    """The record that a table's superseded event partitions were handed over (`naming.superseded`)."""
    return f"{EVENTS_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}/_handed_over.json"


def event_handover_lock_path(dataset: str, table: str) -> str:
    return f"locks/{EVENTS_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}/" \
           "_handed_over.lock"


def event_lock_path(dataset: str, table: str, partition: str | None = None) -> str:
    """One versioning of a partition at a time (None: the lock of the table's pending markers)."""
    if partition is None:
        return f"locks/{event_pending_dir(dataset, table)}.lock"
    return f"locks/{event_partition_dir(dataset, table, partition)}.lock"


def dead_letter_dir(topic: str, hour: Hour) -> str:
    return f"dead_letters/{check_topic(topic)}/hour={Hour(hour)}"


def dead_letter_manifest_path(topic: str, hour: Hour) -> str:
    return f"{dead_letter_dir(topic, hour)}/_MANIFEST.json"


def rejected_dead_letter_dir(topic: str, hour: Hour, attempt: str) -> str:
    """Dead letters of an attempt over its limit: beside the hour's published ones, never over them."""
    return f"{dead_letter_dir(topic, hour)}/rejected/{_check_attempt(attempt)}"


# --- the hand-off to the warehouse, and the warehouse's own records ----------------

PENDING_DIR = "pending_loads"
GIVEN_UP_DIR = f"{PENDING_DIR}/_given_up"  # list_pending skips folders starting with "_"


def pending_dir(given_up: bool = False, dataset: str | None = None, table: str | None = None) -> str:
    """The markers' folder: all of them, a dataset's or a table's (given up on: `given_up`)."""
    parts = [GIVEN_UP_DIR if given_up else PENDING_DIR]
    if dataset is not None:
        parts.append(check_identifier(dataset, "dataset"))
        if table is not None:
            parts.append(check_identifier(table, "table"))
    return "/".join(parts)


def pending_marker_path(dataset: str, table: str, hour: Hour, given_up: bool = False) -> str:
    """The marker saying (table, hour) waits for a load (or was given up on: `given_up`)."""
    return f"{pending_dir(given_up, dataset, table)}/hour={Hour(hour)}.json"


def pending_lock_path(dataset: str, table: str) -> str:
    return f"locks/{PENDING_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}.lock"


# A unit's refusal (its load failed for good, or until `heals_at`) and, for an event partition, the
# record that the queue gave up on it: beside the unit's markers, in one format for every unit.
REFUSED_DIR = "_refused"
EVENT_GIVEN_UP_DIR = f"{EVENT_PENDING_DIR}/_given_up"


def refusal_path(kind: str, dataset: str, table: str, partition: str) -> str:
    if kind == "event":
        return f"{event_pending_dir(dataset, table, partition)}/{REFUSED_DIR}.json"
    return f"{pending_dir(False, dataset, table)}/{REFUSED_DIR}/hour={Hour(partition)}.json"


def event_given_up_path(dataset: str, table: str, partition: str) -> str:
    return f"{EVENT_GIVEN_UP_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}/" \
           f"{check_event_partition(partition)}.json"


LOAD_LEDGER_DIR = "warehouse_loads/bigquery"  # BigQuery's loads, recorded beside the landing files


def load_ledger_dir(dataset: str, table: str) -> str:
    return f"{LOAD_LEDGER_DIR}/{check_identifier(dataset, 'dataset')}/{check_identifier(table, 'table')}"


def load_ledger_path(dataset: str, table: str, hour: Hour) -> str:
    return f"{load_ledger_dir(dataset, table)}/hour={Hour(hour)}.json"


def load_lock_path(dataset: str, table: str, hour: Hour) -> str:
    """One load of a table's hour at a time."""
    return f"locks/{load_ledger_dir(dataset, table)}/hour={Hour(hour)}.lock"


# Where the jobs started into a table are counted, per kind (BigQuery's quotas per table differ):
# load jobs where they were counted before copy jobs were.
JOB_COUNT_FOLDERS = {"load": "jobs", "copy": "copy_jobs"}


def job_counts_root(dataset: str, table: str, kind: str = "load") -> str:
    if kind not in JOB_COUNT_FOLDERS:
        raise NameError_(f"{kind!r} is not a kind of job kafka_landing counts ({', '.join(JOB_COUNT_FOLDERS)})")
    return f"{load_ledger_dir(dataset, table)}/{JOB_COUNT_FOLDERS[kind]}"


def job_count_path(dataset: str, table: str, kind: str, started: datetime, job_id: str) -> str:
    """One empty object per job of `kind` started into a table, named by its start (UTC) and id:
    `day=YYYY-MM-DD/HHMMSS_<job id>`. BigQuery allows 1,500 load jobs and 1,000 copy jobs per table
    in 24 hours, failed ones included; the names say which fall in the last 24 hours."""
    utc = started.astimezone(timezone.utc)
    return f"{job_counts_root(dataset, table, kind)}/day={utc:%Y-%m-%d}/{utc:%H%M%S}_{job_id}"


def day_done_file_glob(dataset: str, table: str, hour: Hour) -> str:
    """The done files of every hour of an hour's day: one listing by prefix."""
    return f"{table_dir(dataset, table)}/hour={Hour(hour).day}T*/_DONE.json"


def event_load_ledger_path(dataset: str, table: str, partition: str) -> str:
    """The record of the last load of an event-time table's partition (BigQuery)."""
    return f"{load_ledger_dir(dataset, table)}/partition={check_event_partition(partition)}.json"


def event_load_lock_path(dataset: str, table: str, partition: str) -> str:
    return f"locks/{load_ledger_dir(dataset, table)}/partition={check_event_partition(partition)}.lock"


def load_day_ledger_path(dataset: str, table: str, hour: Hour) -> str:
    """The record of the loads of a day partition (BigQuery tables partitioned by DAY)."""
    return f"{load_ledger_dir(dataset, table)}/day={Hour(hour).day}.json"


def load_day_lock_path(dataset: str, table: str, hour: Hour) -> str:
    """One load of a table's day at a time: every hour's load replaces the whole day."""
    return f"locks/{load_ledger_dir(dataset, table)}/day={Hour(hour).day}.lock"


class OffsetRange(NamedTuple):
    """The records a landing or dead-letter file holds: offsets `first_offset` to `last_offset`, both
    included, of one partition of a topic."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int

    def offsets(self) -> str:
        """first+last, zero-padded so that files sort in log order."""
        return f"{int(self.first_offset):020d}+{int(self.last_offset):020d}"


def landing_file_name(records: OffsetRange, dataset: str, table: str, schema_id: int,
                      event_hour: Hour | None = None) -> str:
    """topic+partition+dataset.table+schema+first+last[+event hour].avro.

    '+' cannot occur in a Kafka topic or an identifier, so the name parses back.
    Offsets are zero-padded so files sort in log order.
    """
    check_topic(records.topic), check_identifier(dataset, "dataset"), check_identifier(table, "table")
    name = f"{records.topic}+{int(records.partition)}+{dataset}.{table}+{int(schema_id)}+{records.offsets()}"
    if event_hour is not None:
        name += f"+{Hour(event_hour)}"
    return name + ".avro"


def dead_letter_file_name(records: OffsetRange) -> str:
    return f"{check_topic(records.topic)}+{int(records.partition)}+dead_letters+{records.offsets()}.avro"
