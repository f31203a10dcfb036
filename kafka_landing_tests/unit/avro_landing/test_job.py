"""A storage error late in a one-pass range (publishing one hour, or removing the pass's
staging) concerns that hour, or nothing: hours already published stay published (N14)."""

from __future__ import annotations

from kafka_landing.avro_landing.job import HoursToLand, LandingResult, Sources, land_hours
from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan
from kafka_landing.naming import done_file_path, hour_from_tag
from kafka_landing.store.local import LocalStore

HOURS = ["2026-11-20T13", "2026-11-20T14", "2026-11-20T15"]
CFG = TopicConfig("web", "w", table="events")
NOWHERE = Sources(lambda: None, {}, lambda sid: None)  # the hours hold no offset: nothing is read


def empty_plan(hour: str) -> SlicePlan:
    """An hour whose slice holds no offset: it publishes without Spark reading anything."""
    return SlicePlan("web", hour, "x", 0, 10, (PartitionSlice(0, 5, 5, 0, 5, "timestamp", "timestamp"),), ())


class FlakyBucket(LocalStore):
    """A bucket answering 503 to the done file of one hour and to the staging delete."""

    def __init__(self, root: str, failing_done: str):
        super().__init__(root)
        self.failing_done = failing_done

    def write_atomic(self, rel: str, data: bytes) -> None:
        if rel == self.failing_done:
            raise ConnectionError(f"503 Service Unavailable writing {rel}")
        super().write_atomic(rel, data)

    def delete(self, rel: str) -> None:
        if rel.startswith("staging/"):
            raise ConnectionError(f"503 Service Unavailable deleting {rel}")
        super().delete(rel)


def test_a_storage_error_fails_only_its_hour_and_published_hours_stay_published(tmp_path):
    store = FlakyBucket(str(tmp_path), done_file_path("w", "events", hour_from_tag(HOURS[1])))
    logged: list[str] = []
    out = land_hours(NOWHERE, store, HoursToLand(CFG, [empty_plan(h) for h in HOURS], "att-1"), log=logged.append)
    assert sorted(out) == HOURS
    assert isinstance(out[HOURS[0]], LandingResult) and isinstance(out[HOURS[2]], LandingResult)
    failed = out[HOURS[1]]
    assert isinstance(failed, LandingError) and failed.transient
    assert "web 2026-11-20T14" in str(failed) and "503" in str(failed)
    assert store.exists(done_file_path("w", "events", hour_from_tag(HOURS[0])))
    assert any("staging/web/hour=2026-11-20T13/att-1" in m and "swept" in m for m in logged), logged


def test_a_check_that_cannot_read_the_files_fails_and_says_why(tmp_path):
    """The hour is published: its checks must not turn a storage error into no materialisation."""
    from kafka_landing.avro_landing.checks import landing_checks

    store = LocalStore(str(tmp_path))
    plan = empty_plan(HOURS[0])
    result = land_hours(NOWHERE, store, HoursToLand(CFG, [plan], "att-2"))[HOURS[0]]
    assert [c.passed for c in landing_checks(result, store, CFG, plan)] == [True, True, True]

    class Away(LocalStore):
        def read_json(self, rel):
            raise ConnectionError("503 Service Unavailable")

    checks = {c.check_name: c for c in landing_checks(result, Away(str(tmp_path)), CFG, plan)}
    assert not checks["conservation"].passed
    assert "could not re-count web 2026-11-20T13" in checks["conservation"].description
    assert checks["conservation"].metadata["transient"].value is True
