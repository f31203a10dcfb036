"""An hour whose landing loses the Spark engine twice on one schema id is refused for good (a
record that kills the engine every topic shares must not have its hour retried until a person
looks), and says which hour, which schema id and what to do; the run's other hours go on, and
an hour that lands forgets its losses."""

from __future__ import annotations

import pytest

from kafka_landing.avro_landing import engine_losses, job
from kafka_landing.avro_landing.job import HoursToLand, LandingResult, Sources, land_hours
from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError, spark_server_gone
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan, SliceTask
from kafka_landing.naming import Hour, engine_losses_path
from kafka_landing.store.local import LocalStore

POISONED, CLEAN = "2026-11-20T13", "2026-11-20T14"
CFG = TopicConfig("web", "w", table="events")


def plan(hour: str, records: int) -> SlicePlan:
    """A slice of `records` offsets of partition 0 in one frozen task (none: it publishes unread)."""
    part = PartitionSlice(0, 5, 5 + records, 0, 5 + records, "timestamp", "timestamp")
    return SlicePlan("web", hour, "x", 0, 10, (part,), (SliceTask(0, 5, 5 + records),) if records else ())


class ServerGone(Exception):
    """What pyspark raises when the Connect server restarted under the session (errors.spark_server_gone)."""

    def getCondition(self):  # noqa: N802 - pyspark's name
        return "NO_ACTIVE_SESSION"


class Session:
    client = None


def no_schema(sid: int) -> None:
    return None


def test_two_losses_on_one_schema_id_refuse_the_hour_for_good_and_a_landing_clears_them(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path))
    spark_asked: list[int] = []

    def factory():
        spark_asked.append(1)
        return Session()

    def dies_writing_schema_7(run, spark, kafka_options, tasks, framed, likely_ids):
        run.step = "7"
        run.seen.ids_by_hour = {7: {POISONED}}
        raise ServerGone("the engine went away")

    monkeypatch.setattr(job.LandingRun, "read", lambda run, spark, options, tasks: None)
    monkeypatch.setattr(job.LandingRun, "land_directly", dies_writing_schema_7)
    for attempt in ("a1", "a2"):
        with pytest.raises(ServerGone) as lost:
            land_hours(Sources(factory, {}, no_schema), store,
                       HoursToLand(CFG, [plan(POISONED, 3), plan(CLEAN, 0)], attempt))
        assert spark_server_gone(lost.value)  # a server away, which the step retries (errors.is_transient)
    assert store.read_json(engine_losses_path("web", Hour(POISONED))) == {"7": 2}
    assert not store.exists(engine_losses_path("web", Hour(CLEAN))), "the other hour held no record of schema id 7"

    spark_asked.clear()
    out = land_hours(Sources(factory, {}, no_schema), store,
                     HoursToLand(CFG, [plan(POISONED, 3), plan(CLEAN, 0)], "a3"))
    refused = out[POISONED]
    assert isinstance(refused, LandingError) and not refused.transient
    assert "web 2026-11-20T13: refused" in str(refused) and "schema id 7" in str(refused)
    assert store.location(engine_losses_path("web", Hour(POISONED))) in str(refused), "it says what to delete"
    assert isinstance(out[CLEAN], LandingResult), "the run's other hour lands"
    assert spark_asked == [], "no Spark job ran for the refused hour"

    # A person found the record and cleared the losses: the hour lands, and its losses are gone.
    store.delete(engine_losses_path("web", Hour(POISONED)))
    engine_losses.record(store, "web", [POISONED], "7")  # one loss is not a refusal
    out = land_hours(Sources(factory, {}, no_schema), store, HoursToLand(CFG, [plan(POISONED, 0)], "a4"))
    assert isinstance(out[POISONED], LandingResult)
    assert not store.exists(engine_losses_path("web", Hour(POISONED)))


def test_a_loss_outside_any_schema_ids_write_counts_for_nothing(tmp_path, monkeypatch):
    """Reading alone (no schema id's write running) says nothing about a record."""
    store = LocalStore(str(tmp_path))

    def dies_reading(run, spark, options, tasks):
        raise ServerGone("the engine went away")

    monkeypatch.setattr(job.LandingRun, "read", dies_reading)
    for attempt in ("a1", "a2", "a3"):
        with pytest.raises(ServerGone):
            land_hours(Sources(Session, {}, no_schema), store, HoursToLand(CFG, [plan(POISONED, 3)], attempt))
    assert not store.exists(engine_losses_path("web", Hour(POISONED)))
