"""Each topic's first hour: where its partitions start, from the topic config, the
defaults, $KAFKA_LANDING_FIRST_HOUR or the earliest frozen slice; mistakes fail at
load time naming the file, the topic and the field."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.config import (
    TopicConfigError,
    env_first_hour,
    load_config,
    parse_config,
    with_first_hours,
)
from kafka_landing.hours import history, topic_hours

H = datetime(2026, 11, 20, 13, tzinfo=timezone.utc)


def config(defaults=None, **topics):
    return parse_config({"defaults": defaults or {}, "topics": {
        name: {"dataset": "d", "table": name.replace(".", "_"), **extra} for name, extra in topics.items()}}, "t.yaml")


@pytest.mark.parametrize("value", ["2026-11-20-13:00", "2026-11-20T13", " 2026-11-20-13:00 ",
                                   datetime(2026, 11, 20, 13), datetime(2026, 11, 20, 14, tzinfo=timezone(timedelta(hours=1)))])
def test_valid_first_hours_are_utc_hours(value):
    assert config(a={"first_hour": value}).topic("a").first_hour == H


def test_yaml_dates_and_timestamps_are_hours_too(tmp_path):
    p = tmp_path / "topics.yaml"
    p.write_text("defaults: {first_hour: 2026-11-20}\n"
                 "topics:\n  a: {dataset: d, table: a, first_hour: 2026-11-20T13:00:00Z}\n  b: {dataset: d, table: b}\n")
    cfg = load_config(p)
    assert cfg.topic("a").first_hour == H
    assert cfg.topic("b").first_hour == datetime(2026, 11, 20, tzinfo=timezone.utc)


@pytest.mark.parametrize("spec, field, problem", [
    ({"topic": "2026-11-20 13:00"}, "first_hour", "is not an hour; write it like 2026-11-20-13:00"),
    ({"topic": "yesterday"}, "first_hour", "is not an hour"),
    ({"topic": 2026}, "first_hour", "is not an hour"),
    ({"topic": "2026-11-20-13:30"}, "first_hour", "is not on the hour; partitions are whole UTC hours, e.g. 2026-11-20-13:00"),
    ({"topic": datetime(2026, 11, 20, 13, 0, 5)}, "first_hour", "is not on the hour"),
    ({"defaults": "2026-13-01-00:00"}, "defaults.first_hour", "is not an hour"),
])
def test_invalid_first_hours_name_the_file_topic_and_field(spec, field, problem):
    with pytest.raises(TopicConfigError) as exc:
        if "defaults" in spec:
            config({"first_hour": spec["defaults"]}, a={})
        else:
            config(a={"first_hour": spec["topic"]})
    msg = str(exc.value)
    assert msg.startswith("t.yaml: ") and f"field {field!r}" in msg and problem in msg
    assert ("topic 'a'" in msg) == ("defaults" not in spec)


def test_the_topics_own_hour_beats_the_defaults_which_beat_the_environment():
    cfg = with_first_hours(config({"first_hour": "2026-11-01-00:00"}, a={"first_hour": "2026-11-20-13:00"}, b={}),
                           {}, fallback=datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert (cfg.topic("a").first_hour, cfg.topic("a").first_hour_source) == (H, "first_hour of the topic")
    assert (cfg.topic("b").first_hour, cfg.topic("b").first_hour_source) == (
        datetime(2026, 11, 1, tzinfo=timezone.utc), "defaults.first_hour")
    env = with_first_hours(config(c={}), {}, fallback=H).topic("c")
    assert (env.first_hour, env.first_hour_source) == (H, "$KAFKA_LANDING_FIRST_HOUR")


def test_a_topic_with_no_first_hour_and_nothing_frozen_is_an_error_saying_what_to_set():
    with pytest.raises(TopicConfigError) as exc:
        with_first_hours(config(a={"first_hour": "2026-11-20-13:00"}, b={}), {"b": None})
    msg = str(exc.value)
    assert "t.yaml: topic 'b': field 'first_hour': is required for a topic with no frozen slice yet" in msg
    assert "first_hour: 2026-11-20-00:00" in msg and "$KAFKA_LANDING_FIRST_HOUR" in msg


def test_nothing_configured_starts_at_the_earliest_frozen_slice():
    topic = with_first_hours(config(a={}), {"a": H}).topic("a")
    assert (topic.first_hour, topic.first_hour_source) == (H, "the earliest frozen slice, no first_hour configured")
    assert history(topic) == "hours from 2026-11-20-13:00 on (the earliest frozen slice, no first_hour configured)"
    later = with_first_hours(config(a={"first_hour": "2026-11-21-00:00"}), {"a": H}).topic("a")
    assert later.first_hour_source == "the earliest frozen slice, earlier than the first hour 2026-11-21-00:00 from first_hour of the topic"


def test_the_environment_variable_is_checked_like_the_config(monkeypatch):
    monkeypatch.setenv("KAFKA_LANDING_FIRST_HOUR", "2026-11-20-13:00")
    assert env_first_hour() == H
    monkeypatch.setenv("KAFKA_LANDING_FIRST_HOUR", "2026-11-20-13:15")
    with pytest.raises(TopicConfigError, match=r"\$KAFKA_LANDING_FIRST_HOUR: '2026-11-20-13:15' is not on the hour"):
        env_first_hour()


hours = st.integers(min_value=0, max_value=24 * 400).map(lambda n: datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=n))


@given(configured=st.none() | hours, frozen=st.none() | hours, later=hours)
def test_changing_the_first_hour_never_hides_a_frozen_hour(configured, frozen, later):
    """Whatever the first hour was and is changed to, every frozen hour stays a partition; the
    history starts at the configured hour unless a frozen hour comes earlier."""
    for first in (configured, later):
        spec = {} if first is None else {"first_hour": first}
        try:
            topic = with_first_hours(config(a=spec), {"a": frozen}).topic("a")
        except TopicConfigError:
            assert first is None and frozen is None
            continue
        expected = min(h for h in (first, frozen) if h is not None)
        assert topic.first_hour == expected
        if frozen is not None:
            assert topic_hours(topic).has_partition_key(frozen.strftime("%Y-%m-%d-%H:%M")) or frozen > datetime.now(timezone.utc)
        assert ("earliest frozen slice" in topic.first_hour_source) == (frozen is not None and (first is None or frozen < first))


def test_topics_with_the_same_asset_name_are_an_error():
    with pytest.raises(TopicConfigError, match="topic 'a_b': field 'topics': its asset and job names .a_b. are those of topic 'a.b'"):
        config(**{"a.b": {}, "a_b": {}})


def test_a_written_config_with_first_hours_round_trips(tmp_path):
    p = tmp_path / "topics.yaml"
    p.write_text(yaml.safe_dump({"defaults": {"first_hour": "2026-11-20T13"}, "topics": {"a": {"dataset": "d", "table": "a"}}}))
    assert load_config(p).topic("a").first_hour == H


def demo_config(defaults=None, **topics):
    return parse_config({"defaults": defaults or {}, "topics": {
        name: {"dataset": "d", "table": name.replace(".", "_"), **extra} for name, extra in topics.items()}}, "t.yaml")


NOW = datetime(2026, 11, 20, 16, 7, tzinfo=timezone.utc)  # last closed hour 15:00: the demo's three are 13, 14, 15


def test_the_packaged_demo_config_derives_its_first_hour_when_nothing_is_set_or_frozen(monkeypatch):
    from kafka_landing.config import DEMO_CONFIG
    from kafka_landing_tools.demo.generate import demo_hours

    monkeypatch.delenv("DEMO_HOURS", raising=False)
    cfg = load_config(DEMO_CONFIG)
    assert {t.first_hour_derived_by for t in cfg.topics.values()} == {"defaults.first_hour"}
    settled = with_first_hours(cfg, {}, None, now=NOW)
    for topic in settled.topics.values():
        assert topic.first_hour == H == demo_hours(NOW, 3)[0]
        assert topic.first_hour_source.startswith("defaults.first_hour: demo, nothing frozen yet")
    monkeypatch.setenv("DEMO_HOURS", "5")
    assert with_first_hours(cfg, {}, None, now=NOW).topic("demo.orders").first_hour == H - timedelta(hours=2)


def test_a_derived_first_hour_gives_way_to_the_environment_and_to_frozen_slices():
    """Once the demo has landed, its history starts at the earliest frozen slice whenever the code
    location loads, later or earlier than the clock would say: landed hours never leave the bar."""
    cfg = demo_config(**{"demo.orders": {"first_hour": "demo"}})
    frozen = H - timedelta(days=3)
    for now in (NOW, NOW + timedelta(days=30)):
        topic = with_first_hours(cfg, {"demo.orders": frozen}, None, now=now).topic("demo.orders")
        assert (topic.first_hour, topic.first_hour_source) == (frozen, "the earliest frozen slice, as first_hour: demo derives it")
    later_frozen = with_first_hours(cfg, {"demo.orders": H + timedelta(hours=1)}, None, now=NOW).topic("demo.orders")
    assert later_frozen.first_hour == H + timedelta(hours=1)
    pinned = with_first_hours(cfg, {"demo.orders": None}, fallback=H - timedelta(hours=1), now=NOW).topic("demo.orders")
    assert (pinned.first_hour, pinned.first_hour_source) == (H - timedelta(hours=1), "$KAFKA_LANDING_FIRST_HOUR")


def test_a_topics_own_first_hour_beats_a_derived_default():
    cfg = with_first_hours(demo_config({"first_hour": "demo"}, **{"demo.orders": {"first_hour": "2026-11-01-00:00"},
                                                                   "demo.web_events": {}}), {}, now=NOW)
    assert cfg.topic("demo.orders").first_hour == datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert cfg.topic("demo.orders").first_hour_source == "first_hour of the topic"
    assert cfg.topic("demo.web_events").first_hour == H


@pytest.mark.parametrize("defaults, spec, field", [
    ({}, {"first_hour": "demo"}, "first_hour"),
    ({"first_hour": "demo"}, {}, "defaults.first_hour"),
])
def test_only_the_demo_topics_may_have_their_first_hour_derived(defaults, spec, field):
    with pytest.raises(TopicConfigError) as exc:
        demo_config(defaults, **{"demo.orders": {}, "shop.orders": spec})
    msg = str(exc.value)
    assert msg.startswith(f"t.yaml: topic 'shop.orders': field {field!r}: 'demo' is the first hour the demo derives "
                          "for its own topics (demo.orders, demo.web_events)"), msg
    assert "first_hour: 2026-11-20-00:00" in msg


def test_a_bad_demo_hours_count_names_the_variable(monkeypatch):
    monkeypatch.setenv("DEMO_HOURS", "zero")
    with pytest.raises(TopicConfigError, match=r"^t.yaml: topic 'demo.orders': field 'first_hour': demo: \$DEMO_HOURS='zero': give the number of closed hours"):
        with_first_hours(demo_config(**{"demo.orders": {"first_hour": "demo"}}), {}, now=NOW)
