"""What the sensors say of a tick, from its plan alone: one warning per table given up on (with an
example, why, and what to do), the units a tick left for later, and why nothing is requested."""

from __future__ import annotations

from kafka_landing.handoff.units import event_unit, hour_unit
from kafka_landing.warehouse.queue import messages
from kafka_landing.warehouse.queue.runs import MAX_ATTEMPTS
from kafka_landing.warehouse.queue.tick import TickPlan

H13, H14 = hour_unit("shop", "t", "2026-01-31T13"), hour_unit("shop", "t", "2026-01-31T14")
DAY = event_unit("shop", "t", "2026-01-31")


def test_the_done_file_sensor_warns_once_per_table_and_says_what_to_do():
    plan = TickPlan(given_up={"shop.t": [H13, H14]}, given_up_why={"shop.t": (H13, "the table refuses it")},
                    not_taken={"shop.t": [(H14, "not a partition")]}, gone={"shop.t": [H13]},
                    refused=[(H13, "refused until 2026-02-01T00:00:00+00:00: quota")], waiting=2)
    said = messages.landing(plan, 7, {("shop", "t"): "shop/t"})
    assert said.warnings == [
        f"shop.t: 2 hour(s) not loaded and not requested again (2026-01-31T13 to 2026-01-31T14), e.g. {H13.done_file}: "
        "the table refuses it. Fix the cause, then materialise those hours or re-land them: either clears them "
        "(why for each: pending_loads/_given_up/).",
        f"shop.t: 1 hour(s) pending but not loaded, e.g. {H14.done_file}: hour {H14.partition_key} is not a partition "
        "of shop/t (before its topic's first hour, or not ended yet)",
        f"shop.t: 1 pending load(s) whose done file is gone, e.g. {H13.done_file}: nothing to load; marker(s) removed"]
    assert said.infos == [f"{H13}: refused until 2026-02-01T00:00:00+00:00: quota"]
    assert said.skip == ("nothing to request: 2 load(s) in flight; 0 moved aside this tick, 2 given up in all "
                         "(pending_loads/_given_up/); 1 not a partition; 7 done files reconciled")


def test_what_a_tick_left_for_later_is_told_as_infos():
    plan = TickPlan(stopped_early=True, examined=5, candidates=9, left_to_move=2, more_ready=3)
    assert messages.events(plan).infos == [
        "5 of 9 pending loads examined this tick; the rest on later ticks",
        "2 load(s) not asked for again are moved aside on later ticks",
        "3 more load runs ready; requested on later ticks (oldest first)"]
    assert messages.landing(TickPlan(), 0, {}).infos == []


def test_the_retired_sensor_names_the_job_and_config_that_empty_what_it_gave_up_on():
    hours = TickPlan(moved=[(H13, "refused", "it failed")], examined=1)
    events = TickPlan(refused=[(DAY, "a refusal")], examined=4, waiting=1)
    said = messages.retired(hours, events, "retire_hours")
    assert said.warnings == [
        f"{H13}: not emptied and not requested again: it failed. Fix the cause, then launch retire_hours with "
        f"{{'done_files': ['{H13.done_file}'], 'event_partitions': []}}, or drop it by hand.",
        f"{DAY}: not emptied and not requested again until a landing hour changes it: a refusal"]
    assert said.skip == ("nothing retired to empty: 1 hour(s) and 4 event partition(s) of tables in no topic config "
                         "examined, 1 in flight, 1 moved aside")


def test_the_event_sensor_names_an_event_partition_by_name():
    plan = TickPlan(given_up={DAY.name: [DAY]}, given_up_why={DAY.name: (DAY, "it failed")})
    (warning,) = messages.events(plan).warnings
    assert warning.startswith(f"{DAY.name}: 1 event partition(s) not loaded and not requested again "
                              f"(2026-01-31 to 2026-01-31), e.g. {DAY}: it failed. They failed {MAX_ATTEMPTS} times")
    assert messages.events(plan).skip == f"no event partition to load: 0 in flight, 0 refused, 1 given up after " \
                                         f"{MAX_ATTEMPTS} attempts"


def test_what_the_done_file_sensor_finds_before_its_tick_is_told_only_when_there_is_some():
    assert messages.not_configured([("shop", "t")], {("shop", "t")}, "retired_hours_sensor") is None
    assert messages.not_configured([("shop", "t"), ("web", "x")], {("shop", "t")}, "retired_hours_sensor") == (
        "done files for tables not in the topic config, not loaded by any asset: ['web.x'] (hours a routing change "
        "retired are emptied by retired_hours_sensor)")
    assert messages.reconciled([]) is None
    assert messages.reconciled([H13, H14]) == (
        f"reconciliation found 2 done file(s) not loaded and not marked pending, e.g. {H13.done_file}: marked")
