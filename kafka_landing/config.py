"""The topic config: which topic lands in which table, and how.

A YAML file, its path from $KAFKA_LANDING_TOPICS_CONFIG (the demo config in
the package by default). It is checked whole at load time, so a mistake fails
the code location with a message naming the file, the topic and the field,
not an hour's run halfway through. Pure: no Dagster, no Spark.

    defaults:                 # optional, applies to every topic
      grace_minutes: 10
      rows_per_task: 500000
      dead_letter_limit: 0.01  # fraction of an hour's records
      max_future_minutes: 60   # a record stamped further past a boundary is an outlier...
      on_future_timestamp: fail  # ...that fails planning, or `land` (where it sits, recorded)
    topics:
      orders:
        dataset: shop
        table: orders
        event_time_field: created_at   # optional: files also split by event hour
      clicks:
        dataset: web
        route:
          field: type                  # a top-level field of the record
          tables: {page_view: page_views, click: clicks}
          default: other_events
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kafka_landing.kafka_slices.plan import FUTURE_POLICIES
from kafka_landing.naming import NameError_, check_identifier, check_topic

ENV_VAR = "KAFKA_LANDING_TOPICS_CONFIG"
DEMO_CONFIG = Path(__file__).parent / "demo" / "topics.yaml"

_OPTION_DEFAULTS = {
    "grace_minutes": 10, "rows_per_task": 500_000, "dead_letter_limit": 0.01,
    "max_future_minutes": 60, "on_future_timestamp": "fail",
}
_TOPIC_KEYS = {"dataset", "table", "route", "event_time_field", *_OPTION_DEFAULTS}
_ROUTE_KEYS = {"field", "tables", "default"}


class TopicConfigError(ValueError):
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

    @property
    def tables(self) -> list[str]:
        """Every destination table of this topic, in a stable order."""
        if self.route is None:
            return [self.table]  # type: ignore[list-item]
        return sorted({*self.route.tables.values(), self.route.default})


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
    if key == "dead_letter_limit":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _err(source, topic, shown, f"must be a fraction between 0 and 1, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "grace_minutes" else 1):
        kind = "non-negative" if key == "grace_minutes" else "positive"
        raise _err(source, topic, shown, f"must be a {kind} integer, got {value!r}")
    return value


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
    defaults = dict(_OPTION_DEFAULTS)
    for key, value in (data.get("defaults") or {}).items():
        if key not in _OPTION_DEFAULTS:
            raise _err(source, None, f"defaults.{key}", f"unknown key; allowed: {sorted(_OPTION_DEFAULTS)}")
        defaults[key] = _option(source, None, key, value, shown=f"defaults.{key}")
    topics_raw = data.get("topics")
    if not isinstance(topics_raw, dict) or not topics_raw:
        raise _err(source, None, "topics", "must map at least one topic to its destination")

    topics: dict[str, TopicConfig] = {}
    fed_by: dict[tuple[str, str], str] = {}
    for topic, spec in topics_raw.items():
        try:
            check_topic(topic)
        except NameError_ as exc:
            raise _err(source, str(topic), "topics", str(exc)) from None
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
        cfg = TopicConfig(topic=topic, dataset=dataset, table=table, route=route, event_time_field=etf, **options)
        for t in cfg.tables:
            other = fed_by.setdefault((dataset, t), topic)
            if other != topic:
                raise _err(source, topic, "table", f"{dataset}.{t} is already fed by topic {other!r}; a table has one source topic")
        topics[topic] = cfg
    return LandingConfig(topics=topics, source=source)


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
