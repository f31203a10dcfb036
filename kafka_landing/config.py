"""The topic config: which topic lands in which table, and how.

A YAML file, its path from $KAFKA_LANDING_TOPICS_CONFIG (the demo config in
the package by default). It is checked whole at load time, so a mistake fails
the code location with a message naming the file, the topic and the field,
not an hour's run halfway through. Pure: no Dagster, no Spark.

    defaults:                 # optional, applies to every topic
      first_hour: 2026-11-01-00:00   # where the topic's hourly partitions start (UTC)
      grace_minutes: 10
      rows_per_task: 500000
      dead_letter_limit: 0.01  # fraction of an hour's records
      max_future_minutes: 60   # a record stamped further past a boundary is an outlier...
      on_future_timestamp: fail  # ...that fails planning, or `land` (where it sits, recorded)
      read_stall_seconds: 120  # a landing task Kafka gives no record this long fails; tried again
      transactional: false     # true: producers write in transactions, whose markers are offsets without a record
    topics:
      orders:
        dataset: shop
        table: orders
        event_time_field: created_at   # optional: files also split by event hour, and an
        event_time_partition: day      # event-time table orders__by_event per day (or hour; none: no table)
        settle_hours: 48               # an event partition unchanged this long is settled
      clicks:
        dataset: web
        route:
          field: type                  # a top-level field of the record
          tables: {page_view: page_views, click: clicks}
          default: other_events

Each topic's history starts at its own first hour: `first_hour` of the topic,
else of `defaults`, else $KAFKA_LANDING_FIRST_HOUR. If the landing root holds
frozen slices of the topic from before that hour, the history starts at the
earliest of them instead: moving `first_hour` later never hides an hour that
was frozen, and moving it earlier only adds hours (frozen ones are never
re-planned). A topic with none of these is an error: say where it starts.

The demo topics alone may say `first_hour: demo`: the demo derives it ($KAFKA_LANDING_FIRST_HOUR
if set, which `make demo` sets to the first hour it lands; else the earliest frozen slice; else the
first of the last $DEMO_HOURS closed hours, the hours `make demo` would produce and land). So the
packaged config loads on a fresh clone, and once the demo has landed its history stays put.
"""

from __future__ import annotations

import hashlib
import json

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from kafka_landing.errors import KafkaLandingError
from kafka_landing.naming import (
    HOUR_KEY_FORMAT,
    HOUR_TAG_FORMAT,
    ONE_HOUR,
    Hour,
    NameError_,
    asset_safe,
    check_identifier,
    check_topic,
    event_table,
    last_closed_hour,
)

# What planning does with a record stamped more than max_future_minutes past the
# boundary it would define (and followed by records stamped well before it).
FAIL, LAND = "fail", "land"
FUTURE_POLICIES = (FAIL, LAND)

ENV_VAR = "KAFKA_LANDING_TOPICS_CONFIG"
FIRST_HOUR_ENV = "KAFKA_LANDING_FIRST_HOUR"
DEMO_CONFIG = Path(__file__).parent / "demo_topics.yaml"  # the packaged config: the demo's topics
DERIVED_BY_DEMO = "demo"  # `first_hour: demo`, for the demo topics only
# The demo's own topics (`make demo` produces them, kafka_landing_tools/demo/) and how many closed hours it lands.
DEMO_TOPICS = ("demo.orders", "demo.web_events")
DEMO_HOURS_ENV = "DEMO_HOURS"
DEMO_GRACE_MINUTES = 5  # the packaged demo config's grace

_OPTION_DEFAULTS = {
    "grace_minutes": 10, "rows_per_task": 500_000, "dead_letter_limit": 0.01,
    "max_future_minutes": 60, "on_future_timestamp": "fail",
    "event_time_partition": "day", "settle_hours": 48, "read_stall_seconds": 120, "transactional": False,
}
_TOPIC_KEYS = {"dataset", "table", "route", "event_time_field", "first_hour", *_OPTION_DEFAULTS}
# The event-time table's partitions (`event_partitions`): a day or an hour of event time, or no table.
EVENT_TIME_PARTITIONS = ("day", "hour", "none")
_ROUTE_KEYS = {"field", "tables", "default"}


class TopicConfigError(KafkaLandingError, ValueError):
    pass


@dataclass(frozen=True)
class Route:
    field: str
    tables: dict[str, str]  # record value -> table
    default: str


@dataclass(frozen=True)
class TopicConfig:
    topic: str
    dataset: str
    table: str | None = None
    route: Route | None = None
    event_time_field: str | None = None
    grace_minutes: int = 10
    rows_per_task: int = 500_000
    dead_letter_limit: float = 0.01
    max_future_minutes: int = 60
    on_future_timestamp: str = "fail"
    event_time_partition: str = "day"  # with event_time_field: the event-time table's partitions, or "none"
    settle_hours: int = 48  # an event partition no landing hour changed for this long is settled
    # How long a landing task waits for Kafka to give it a record before it fails (a stalled broker,
    # a transaction open that long): transient, so the step tries the hour again.
    read_stall_seconds: int = 120
    # Producers write in transactions: each commit or abort marker, and each aborted record, is an
    # offset without a record. On a topic that is not, and is not compacted, such an offset is a
    # record lost, and the landing's `every_offset_has_a_record` check fails naming it.
    transactional: bool = False
    first_hour: datetime | None = None  # as configured; `with_first_hours` settles it
    first_hour_source: str = ""  # why the history starts there (shown on the assets)
    first_hour_derived_by: str | None = None  # "defaults.first_hour" or "first_hour" if it says `demo`

    @property
    def tables(self) -> list[str]:
        """Every destination table of this topic, in a stable order."""
        if self.route is None:
            return [self.table]  # type: ignore[list-item]
        return sorted({*self.route.tables.values(), self.route.default})

    @property
    def landing_shape(self) -> str:
        """What decides which table and event hour each record lands in, as a short hash: the
        dataset, the routing (or the table) and the event time. An hour landed under another shape
        is stale against the config (its records sit where the old routing put them) until it is
        landed again; a landing records it in the hour's dead-letter manifest, and it is the
        landing asset's code version, so Dagster shows such hours as changed."""
        route = None if self.route is None else [self.route.field, sorted(self.route.tables.items()), self.route.default]
        shape = [self.dataset, self.table, route, self.event_time_field, self.event_granularity]
        return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:12]

    @property
    def event_granularity(self) -> str | None:
        """"day" or "hour" when the topic's tables have event-time tables beside them, else None."""
        if not self.event_time_field or self.event_time_partition == "none":
            return None
        return self.event_time_partition


@dataclass(frozen=True)
class LandingConfig:
    topics: dict[str, TopicConfig]
    source: str = "<memory>"

    def destinations(self) -> list[tuple[str, str, str]]:
        """(dataset, table, topic) for every destination table."""
        return sorted((t.dataset, table, t.topic) for t in self.topics.values() for table in t.tables)

    def topic(self, name: str) -> TopicConfig:
        try:
            return self.topics[name]
        except KeyError:
            raise TopicConfigError(f"{self.source}: no topic {name!r} in the config; known: {sorted(self.topics)}") from None


def _err(source: str, topic: str | None, fieldname: str, problem: str) -> TopicConfigError:
    where = f"{source}: " + (f"topic {topic!r}: " if topic else "")
    return TopicConfigError(f"{where}field {fieldname!r}: {problem}")


def _option(source: str, topic: str | None, key: str, value: Any, shown: str | None = None) -> Any:
    shown = shown or key
    if key == "on_future_timestamp":
        if value not in FUTURE_POLICIES:
            raise _err(source, topic, shown, f"must be one of {list(FUTURE_POLICIES)}, got {value!r}")
        return value
    if key == "event_time_partition":
        if value not in EVENT_TIME_PARTITIONS:
            raise _err(source, topic, shown, f"must be one of {list(EVENT_TIME_PARTITIONS)}, got {value!r}")
        return value
    if key == "transactional":
        if not isinstance(value, bool):
            raise _err(source, topic, shown, f"must be true or false, got {value!r}")
        return value
    if key == "dead_letter_limit":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _err(source, topic, shown, f"must be a fraction between 0 and 1, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "grace_minutes" else 1):
        kind = "non-negative" if key == "grace_minutes" else "positive"
        raise _err(source, topic, shown, f"must be a {kind} integer, got {value!r}")
    return value


def parse_first_hour(value: Any, where: str) -> datetime:
    """An hour in UTC: 2026-11-20-13:00 (a partition key), 2026-11-20T13 (an hour tag), or a
    YAML date or timestamp. Not on the hour is an error, not rounded: the user meant something."""
    hour = None
    if isinstance(value, datetime):
        hour = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    elif isinstance(value, date):
        hour = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    elif isinstance(value, str):
        for fmt in (HOUR_KEY_FORMAT, HOUR_TAG_FORMAT):
            try:
                hour = datetime.strptime(value.strip(), fmt).replace(tzinfo=timezone.utc)
                break
            except ValueError:
                continue
    if hour is None:
        raise TopicConfigError(f"{where}: {value!r} is not an hour; write it like 2026-11-20-13:00 or 2026-11-20T13 (UTC)")
    hour = hour.astimezone(timezone.utc)
    if (hour.minute, hour.second, hour.microsecond) != (0, 0, 0):
        raise TopicConfigError(f"{where}: {value!r} is not on the hour; partitions are whole UTC hours, "
                               f"e.g. {Hour(hour).key}")
    return hour


def _first_hour(source: str, topic: str | None, value: Any, shown: str) -> datetime | str:
    if isinstance(value, str) and value.strip() == DERIVED_BY_DEMO:
        return DERIVED_BY_DEMO  # checked per topic in parse_config: the demo topics only
    where = f"{source}: " + (f"topic {topic!r}: " if topic else "") + f"field {shown!r}"
    return parse_first_hour(value, where)


def _name(source: str, topic: str, key: str, value: Any, what: str) -> str:
    try:
        return check_identifier(value, what)
    except NameError_ as exc:
        raise _err(source, topic, key, str(exc)) from None


def parse_config(data: Any, source: str = "<memory>") -> LandingConfig:
    if not isinstance(data, dict):
        raise TopicConfigError(f"{source}: the config must be a mapping with a 'topics' key")
    unknown = set(data) - {"defaults", "topics"}
    if unknown:
        raise _err(source, None, sorted(unknown)[0], "unknown key; allowed: defaults, topics")
    defaults, default_first_hour = _defaults(source, data.get("defaults") or {})
    topics_raw = data.get("topics")
    if not isinstance(topics_raw, dict) or not topics_raw:
        raise _err(source, None, "topics", "must map at least one topic to its destination")

    topics: dict[str, TopicConfig] = {}
    fed_by: dict[tuple[str, str], str] = {}
    named: dict[str, str] = {}
    for topic, spec in topics_raw.items():
        _check_topic_name(source, topic, named)
        cfg = _topic_config(source, topic, spec, defaults, default_first_hour)
        _check_tables(source, cfg, fed_by)
        topics[topic] = cfg
    return LandingConfig(topics=topics, source=source)


def _defaults(source: str, raw: dict) -> tuple[dict[str, Any], datetime | str | None]:
    """(every option as `defaults:` sets it or its default, the first hour it sets or None)."""
    defaults = dict(_OPTION_DEFAULTS)
    first_hour = None
    for key, value in raw.items():
        if key == "first_hour":
            first_hour = _first_hour(source, None, value, "defaults.first_hour")
            continue
        if key not in _OPTION_DEFAULTS:
            raise _err(source, None, f"defaults.{key}", f"unknown key; allowed: {sorted([*_OPTION_DEFAULTS, 'first_hour'])}")
        defaults[key] = _option(source, None, key, value, shown=f"defaults.{key}")
    return defaults, first_hour


def _check_topic_name(source: str, topic: Any, named: dict[str, str]) -> None:
    """A Kafka topic name, whose asset and job names (`named`: of the topics before it) are its own."""
    try:
        check_topic(topic)
    except NameError_ as exc:
        raise _err(source, str(topic), "topics", str(exc)) from None
    other = named.setdefault(asset_safe(topic), topic)
    if other != topic:
        raise _err(source, topic, "topics", f"its asset and job names ({asset_safe(topic)}) are those of topic "
                                            f"{other!r}; land one of them under another config")


def _topic_config(source: str, topic: str, spec: Any, defaults: dict[str, Any],
                  default_first_hour: datetime | str | None) -> TopicConfig:
    """One topic of the config, its fields checked in the order a reader meets them; `defaults`: the
    options of `defaults:`, or their defaults."""
    if not isinstance(spec, dict):
        raise _err(source, topic, "topics", "must be a mapping with 'dataset' and 'table' or 'route'")
    unknown = set(spec) - _TOPIC_KEYS
    if unknown:
        raise _err(source, topic, sorted(unknown)[0], f"unknown key; allowed: {sorted(_TOPIC_KEYS)}")
    if "dataset" not in spec:
        raise _err(source, topic, "dataset", "is required")
    dataset = _name(source, topic, "dataset", spec["dataset"], "dataset")
    if ("table" in spec) == ("route" in spec):
        raise _err(source, topic, "table", "give exactly one of 'table' or 'route'")
    table = _name(source, topic, "table", spec["table"], "table") if "table" in spec else None
    route = _route(source, topic, spec["route"]) if "route" in spec else None
    etf = spec.get("event_time_field")
    if etf is not None:
        etf = _name(source, topic, "event_time_field", etf, "field")
    options = {k: _option(source, topic, k, spec[k]) if k in spec else defaults[k] for k in _OPTION_DEFAULTS}
    if etf is None and "event_time_partition" in spec:
        raise _err(source, topic, "event_time_partition", "needs event_time_field: the field whose time "
                                                          "partitions the event-time table")
    first_hour, derived_by, why = _topic_first_hour(source, topic, spec, default_first_hour)
    return TopicConfig(topic=topic, dataset=dataset, table=table, route=route, event_time_field=etf,
                       first_hour=first_hour, first_hour_derived_by=derived_by, first_hour_source=why, **options)


def _topic_first_hour(source: str, topic: str, spec: dict,
                      default_first_hour: datetime | str | None) -> tuple[datetime | None, str | None, str]:
    """(the topic's first hour as configured, the key that says `demo` if it does, why it starts there)."""
    first_hour = _first_hour(source, topic, spec["first_hour"], "first_hour") if "first_hour" in spec else None
    shown = "first_hour" if first_hour else "defaults.first_hour" if default_first_hour else ""
    first_hour = first_hour or default_first_hour
    derived_by = None
    if first_hour == DERIVED_BY_DEMO:
        _only_demo_topics(source, topic, shown)
        first_hour, derived_by = None, shown
    why = "first_hour of the topic" if first_hour and shown == "first_hour" else "defaults.first_hour" if first_hour else ""
    return first_hour, derived_by, why


def _check_tables(source: str, cfg: TopicConfig, fed_by: dict[tuple[str, str], str]) -> None:
    """Each table of the topic has a valid event-time table name, and no other topic (`fed_by`:
    the tables of the topics before it) feeds it."""
    for t in cfg.tables if cfg.event_granularity else ():
        try:
            check_identifier(event_table(t), "event-time table")
        except NameError_ as exc:
            raise _err(source, cfg.topic, "event_time_partition", f"{exc}; shorten table {t!r}") from None
    for t in cfg.tables:
        other = fed_by.setdefault((cfg.dataset, t), cfg.topic)
        if other != cfg.topic:
            raise _err(source, cfg.topic, "table", f"{cfg.dataset}.{t} is already fed by topic {other!r}; a table has "
                                                   "one source topic")


def _only_demo_topics(source: str, topic: str, shown: str) -> None:
    if topic not in DEMO_TOPICS:
        raise _err(source, topic, shown, f"{DERIVED_BY_DEMO!r} is the first hour the demo derives for its own topics "
                                         f"({', '.join(DEMO_TOPICS)}), which it fills with data; this topic's history needs a "
                                         "real first hour: set it to the first hour to land, e.g. first_hour: "
                                         "2026-11-20-00:00 (UTC)")


def demo_hour_count() -> int:
    """$DEMO_HOURS, the number of last closed hours the demo produces and lands; 3 if unset."""
    value = os.environ.get(DEMO_HOURS_ENV, "3")
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise TopicConfigError(f"${DEMO_HOURS_ENV}={value!r}: give the number of closed hours the demo lands, e.g. 3")
    return count


def demo_hours(now: datetime, hours: int) -> list[datetime]:
    """The last `hours` closed hours before `now` (the demo config's grace), oldest first."""
    last = last_closed_hour(now, DEMO_GRACE_MINUTES)
    return [last - ONE_HOUR * i for i in reversed(range(hours))]


def demo_first_hour(now: datetime | None = None) -> datetime:
    """`first_hour: demo` with nothing frozen and $KAFKA_LANDING_FIRST_HOUR unset: the first of
    the last $DEMO_HOURS closed hours, the first hour `make demo` produces and lands."""
    return demo_hours(now or datetime.now(timezone.utc), demo_hour_count())[0]


def _route(source: str, topic: str, raw: Any) -> Route:
    if not isinstance(raw, dict):
        raise _err(source, topic, "route", "must be a mapping with 'field', 'tables' and 'default'")
    unknown = set(raw) - _ROUTE_KEYS
    if unknown:
        raise _err(source, topic, f"route.{sorted(unknown)[0]}", f"unknown key; allowed: {sorted(_ROUTE_KEYS)}")
    for key in sorted(_ROUTE_KEYS):
        if key not in raw:
            raise _err(source, topic, f"route.{key}", "is required")
    fieldname = _name(source, topic, "route.field", raw["field"], "field")
    if not isinstance(raw["tables"], dict) or not raw["tables"]:
        raise _err(source, topic, "route.tables", "must map record values to table names")
    tables = {}
    for value, table in raw["tables"].items():
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise _err(source, topic, "route.tables", f"value {value!r} must be a string or an integer")
        tables[str(value)] = _name(source, topic, f"route.tables.{value}", table, "table")
    default = _name(source, topic, "route.default", raw["default"], "table")
    return Route(field=fieldname, tables=tables, default=default)


def load_config(path: str | os.PathLike | None = None) -> LandingConfig:
    path = Path(path or os.environ.get(ENV_VAR) or DEMO_CONFIG)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopicConfigError(f"cannot read the topic config {path} (set ${ENV_VAR}): {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopicConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(data, source=str(path))


def env_first_hour() -> datetime | None:
    """$KAFKA_LANDING_FIRST_HOUR: the first hour of every topic that names none in the config."""
    value = os.environ.get(FIRST_HOUR_ENV)
    return parse_first_hour(value, f"${FIRST_HOUR_ENV}") if value else None


def with_first_hours(config: LandingConfig, earliest_frozen: Mapping[str, datetime | None],
                     fallback: datetime | None = None, now: datetime | None = None) -> LandingConfig:
    """Every topic with the hour its history starts at: as configured (the topic's, the
    defaults', else `fallback`), or the earliest frozen slice if that is earlier or nothing is
    configured. Frozen hours therefore always stay partitions. A demo topic whose first hour
    the demo derives (`first_hour: demo`) and which has neither starts at `demo_first_hour(now)`."""
    topics = {}
    for name, cfg in config.topics.items():
        configured, why = cfg.first_hour, cfg.first_hour_source
        if configured is None and fallback is not None:
            configured, why = fallback, f"${FIRST_HOUR_ENV}"
        frozen = earliest_frozen.get(name)
        if frozen is not None and (configured is None or frozen < configured):
            why = (f"the earliest frozen slice, earlier than the first hour {Hour(configured).key} from {why}"
                   if configured is not None else f"the earliest frozen slice, as {cfg.first_hour_derived_by}: demo derives it"
                   if cfg.first_hour_derived_by else "the earliest frozen slice, no first_hour configured")
            configured = frozen
        if configured is None and cfg.first_hour_derived_by:
            try:
                configured = demo_first_hour(now)
            except TopicConfigError as exc:
                raise _err(config.source, name, cfg.first_hour_derived_by, f"demo: {exc}") from None
            why = (f"{cfg.first_hour_derived_by}: demo, nothing frozen yet: the first of the last closed hours "
                   "the demo produces and lands")
        if configured is None:
            raise _err(config.source, name, "first_hour",
                       "is required for a topic with no frozen slice yet: set it to the first hour to land, "
                       "e.g. first_hour: 2026-11-20-00:00 (UTC), for the topic or under 'defaults' "
                       f"(or set ${FIRST_HOUR_ENV})")
        topics[name] = replace(cfg, first_hour=configured, first_hour_source=why)
    return replace(config, topics=topics)
