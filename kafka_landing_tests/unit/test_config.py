"""Config mistakes fail at load time, naming the file, the topic and the field."""

from __future__ import annotations

import pytest
import yaml

from kafka_landing.config import (
    DEMO_CONFIG,
    TopicConfigError,
    load_config,
    parse_config,
)


def write(tmp_path, data) -> str:
    p = tmp_path / "topics.yaml"
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(p)


def good_topic(**extra):
    return {"dataset": "shop", "table": "orders", **extra}


def test_demo_config_loads():
    cfg = load_config(DEMO_CONFIG)
    assert cfg.topic("demo.web_events").tables == ["clicks", "other_events", "page_views"]
    assert cfg.topic("demo.orders").event_time_field == "created_at"
    assert ("web", "clicks", "demo.web_events") in cfg.destinations()


def test_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", write(tmp_path, {"topics": {"a": good_topic()}}))
    assert list(load_config().topics) == ["a"]


@pytest.mark.parametrize(
    "data, topic, field, problem",
    [
        ({"topics": {"a": good_topic(colour="red")}}, "a", "colour", "unknown key"),
        ({"topics": {"a": good_topic()}, "extra": 1}, None, "extra", "unknown key"),
        ({"topics": {"a": {"table": "t"}}}, "a", "dataset", "is required"),
        ({"topics": {"a": {"dataset": "d"}}}, "a", "table", "exactly one of"),
        ({"topics": {"a": {"dataset": "d", "table": "t", "route": {}}}}, "a", "table", "exactly one of"),
        ({"topics": {"a": good_topic(table="../../etc/passwd")}}, "a", "table", "not allowed"),
        ({"topics": {"a": good_topic(table="t; DROP TABLE x")}}, "a", "table", "not allowed"),
        ({"topics": {"a": good_topic(dataset="my-set")}}, "a", "dataset", "not allowed"),
        ({"topics": {"bad/topic": good_topic()}}, "bad/topic", "topics", "legal Kafka topic"),
        ({"topics": {"a": good_topic(grace_minutes=-1)}}, "a", "grace_minutes", "non-negative integer"),
        ({"topics": {"a": good_topic(rows_per_task=0)}}, "a", "rows_per_task", "positive integer"),
        ({"topics": {"a": good_topic(dead_letter_limit=2)}}, "a", "dead_letter_limit", "between 0 and 1"),
        ({"topics": {"a": good_topic(read_stall_seconds=0)}}, "a", "read_stall_seconds", "positive integer"),
        ({"defaults": {"read_stall_seconds": 1.5}, "topics": {"a": good_topic()}}, None,
         "defaults.read_stall_seconds", "positive integer"),
        ({"defaults": {"speed": 3}, "topics": {"a": good_topic()}}, None, "defaults.speed", "unknown key"),
        ({"topics": {"a": {"dataset": "d", "route": {"field": "type", "tables": {"x": "t"}}}}}, "a", "route.default", "is required"),
        ({"topics": {"a": {"dataset": "d", "route": {"field": "type", "tables": {"x": "a.b"}, "default": "o"}}}}, "a", "route.tables.x", "not allowed"),
        ({"topics": {"a": {"dataset": "d", "route": {"field": "ty pe", "tables": {"x": "t"}, "default": "o"}}}}, "a", "route.field", "not allowed"),
        ({"topics": {"a": {"dataset": "d", "route": {"field": "t", "tables": {}, "default": "o"}}}}, "a", "route.tables", "must map"),
        ({"topics": {"a": good_topic(), "b": good_topic()}}, "b", "table", "already fed by topic 'a'"),
        ({"topics": {}}, None, "topics", "at least one topic"),
    ],
)
def test_mistakes_name_file_topic_and_field(tmp_path, data, topic, field, problem):
    path = write(tmp_path, data)
    with pytest.raises(TopicConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert msg.startswith(path)
    if topic:
        assert f"topic {topic!r}" in msg
    assert f"field {field!r}" in msg
    assert problem in msg


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(TopicConfigError, match="cannot read the topic config"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(TopicConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "topics: [unclosed"))
    with pytest.raises(TopicConfigError, match="must be a mapping"):
        parse_config(["a list"])


def test_how_long_a_landing_waits_for_kafka_is_set_per_topic_or_for_all():
    """The direct landing's no-progress timeout (read_stall_seconds): 120 s unless configured."""
    cfg = parse_config({"defaults": {"read_stall_seconds": 300},
                        "topics": {"a": good_topic(), "b": good_topic(table="b", read_stall_seconds=30),
                                   "c": {"dataset": "d", "table": "c"}}})
    assert [cfg.topic(t).read_stall_seconds for t in "abc"] == [300, 30, 300]
    assert parse_config({"topics": {"a": good_topic()}}).topic("a").read_stall_seconds == 120


def test_the_landing_shape_changes_with_the_routing_and_event_time_only():
    from dataclasses import replace

    from kafka_landing.config import Route, TopicConfig

    SHAPED = TopicConfig(topic="t", dataset="ds", table="tbl")
    routed = replace(SHAPED, table=None, route=Route("type", {"a": "x"}, "rest"))
    shapes = {SHAPED.landing_shape, routed.landing_shape,
              replace(routed, route=Route("type", {"a": "y"}, "rest")).landing_shape,
              replace(SHAPED, event_time_field="ts").landing_shape, replace(SHAPED, dataset="other").landing_shape}
    assert len(shapes) == 5
    assert replace(SHAPED, rows_per_task=7, dead_letter_limit=0.5, grace_minutes=30).landing_shape == SHAPED.landing_shape
