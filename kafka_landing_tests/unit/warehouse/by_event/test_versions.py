"""Event partitions: versions made from the done files as they stand, late landing hours amending
a partition as a new version, re-lands re-versioning exactly the partitions whose files changed,
records with no event time (or a sentinel one) in the unknown partition of their landing day, only
the newest versions kept, and nothing lost on the way. A local landing root, no Spark: the
versioning is pure."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_landing.handoff import markers
from kafka_landing.handoff.units import EVENT, event_unit
from kafka_landing.naming import done_file_path, event_lock_path, event_pending_path
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.by_event.versions import (
    EVENT_MANIFEST_FORMAT,
    EventManifest,
    EventPartitionError,
    VersionFile,
    latest_manifest,
    newest_versions,
    next_manifest,
    read_done,
    versions,
)
from kafka_landing_tests.helpers import write_event_hour

DS, T = "shop", "orders"
SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}]}
NOW = datetime(2026, 2, 10, tzinfo=timezone.utc)


def recs(*ids: str) -> list[dict]:
    return [{"order_id": i} for i in ids]


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path)


def pending_partitions(store, dataset: str, table: str) -> dict[str, dict[str, str | None]]:
    """{partition: {landing hour: hash its marker names}} of every event partition with a marker."""
    return {u.partition: dict(markers.marks_of(store, u).by_hour)
            for u in markers.list_units(store, EVENT, [(dataset, table)])}


def clear_event_pending(store, dataset: str, table: str, partition: str, seen: dict[str, str | None]) -> int:
    return markers.clear(store, event_unit(dataset, table, partition), seen)


def version(store, partition: str, granularity: str = "day", now: datetime = NOW):
    with store.lock(event_lock_path(DS, T, partition)) as held:
        manifest, new, seen = next_manifest(store, held, event_unit(DS, T, partition), granularity, now)
    clear_event_pending(store, DS, T, partition, seen)
    return manifest, new


def ids_in(store, manifest) -> list[str]:
    import io

    import fastavro

    out = []
    for f in manifest.files:
        out += [r["order_id"] for r in fastavro.reader(io.BytesIO(store.read_bytes(f["path"])))]
    return sorted(out)


def test_a_late_landing_hour_amends_the_day_as_a_new_version(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a", "b")}, SCHEMA)
    write_event_hour(store, DS, T, "2026-01-31T14", {"2026-01-31T13": recs("c"), "2026-01-31T14": recs("d")}, SCHEMA)
    assert set(pending_partitions(store, DS, T)) == {"2026-01-31"}

    v1, new = version(store, "2026-01-31")
    assert new and v1.version == 1 and v1.rows == 4 and sorted(v1.hours) == ["2026-01-31T13", "2026-01-31T14"]
    assert ids_in(store, v1) == ["a", "b", "c", "d"]
    assert pending_partitions(store, DS, T) == {}  # the markers it saw are satisfied

    # Three days later a landing hour brings a record of that day: version 2, the late hour named.
    write_event_hour(store, DS, T, "2026-02-03T09", {"2026-01-31T23": recs("late"), "2026-02-03T09": recs("e")}, SCHEMA)
    assert set(pending_partitions(store, DS, T)) == {"2026-01-31", "2026-02-03"}
    later = NOW + timedelta(hours=1)
    v2, new = version(store, "2026-01-31", now=later)
    assert new and (v2.version, v2.rows, v2.changed_hours) == (2, 5, ("2026-02-03T09",))
    assert v2.previous_sha256 == v1.sha256 and v2.amended_at == later.isoformat(timespec="seconds")
    assert v2.created_at == v1.created_at
    assert ids_in(store, v2) == ["a", "b", "c", "d", "late"]
    assert versions(store, DS, T, "2026-01-31") == [1, 2]
    assert latest_manifest(store, DS, T, "2026-01-31") == v2

    # Versioned again with nothing changed: the same version, amended since its first all the same.
    again, new = version(store, "2026-01-31")
    assert not new and again == v2
    assert (v1.amended, v2.amended, again.amended) == (False, True, True)


def test_a_version_is_written_and_read_in_the_format_of_before(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a")}, SCHEMA)
    v1, _ = version(store, "2026-01-31")
    written = json.loads(store.read_bytes(v1.path))
    assert written["format"] == EVENT_MANIFEST_FORMAT == 1 and written["version"] == 1
    # One written before `format` and `previous_amended_at` were: read as it was.
    older = {k: v for k, v in written.items() if k not in {"format", "previous_amended_at"}}
    assert EventManifest.from_dict(older) == v1


def test_a_version_is_read_by_a_backend_as_a_done_file_is(store):
    """What a warehouse backend reads of a version (`handoff.manifests.Manifest`): the event-time table,
    the partition, exactly the files of that partition, their rows and schema ids, and `v<N>`."""
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-30T10": recs("x"), "2026-01-31T13": recs("a", "b")},
                     SCHEMA)
    v1, _ = version(store, "2026-01-31")
    done, _ = read_done(store, DS, T, "2026-01-31T13")
    assert (v1.dataset, v1.target, v1.partition, v1.attempt) == (DS, "orders__by_event", "2026-01-31", "v1")
    assert (done.dataset, done.target, done.partition) == (DS, T, "2026-01-31T13")
    mine = sorted((f for f in done.files if f.event_hour == "2026-01-31T13"), key=lambda f: f.path)
    assert len(mine) == 1 and list(v1.landed_files) == mine
    assert v1.rows == sum(f.rows for f in v1.landed_files) == 2
    assert v1.schema_ids == done.schema_ids == (mine[0].schema_id,)


def test_a_reland_re_versions_exactly_the_partitions_whose_files_changed(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-30T10": recs("x"), "2026-01-31T13": recs("a", "b")}, SCHEMA)
    write_event_hour(store, DS, T, "2026-01-31T14", {"2026-01-29T01": recs("y")}, SCHEMA)
    for p in ("2026-01-29", "2026-01-30", "2026-01-31"):
        version(store, p)

    # Same records, same files: no partition changes.
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-30T10": recs("x"), "2026-01-31T13": recs("a", "b")}, SCHEMA)
    assert {p: version(store, p)[1] for p in ("2026-01-30", "2026-01-31")} == {"2026-01-30": False, "2026-01-31": False}

    # Event times corrected: b moves to Feb 1 and x is gone from Jan 30; Jan 29 is not touched.
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a"), "2026-02-01T00": recs("b")}, SCHEMA,
                     first=2000)
    assert set(pending_partitions(store, DS, T)) == {"2026-01-30", "2026-01-31", "2026-02-01"}
    got = {p: version(store, p) for p in ("2026-01-29", "2026-01-30", "2026-01-31", "2026-02-01")}
    assert {p: (m.version, new) for p, (m, new) in got.items()} == {
        "2026-01-29": (1, False), "2026-01-30": (2, True), "2026-01-31": (2, True), "2026-02-01": (1, True)}
    assert got["2026-01-30"][0].rows == 0 and got["2026-01-30"][0].changed_hours == ("2026-01-31T13",)
    assert [ids_in(store, got[p][0]) for p in ("2026-01-31", "2026-02-01")] == [["a"], ["b"]]


def test_records_with_no_event_time_have_a_partition_of_each_landing_day(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {None: recs("n1", "n2"), "2026-01-31T13": recs("a")}, SCHEMA)
    write_event_hour(store, DS, T, "2026-01-31T14", {None: recs("n3")}, SCHEMA, first=2000)
    write_event_hour(store, DS, T, "2026-02-01T00", {None: recs("n4")}, SCHEMA, first=3000)
    assert set(pending_partitions(store, DS, T)) == {"__unknown__2026-01-31", "__unknown__2026-02-01", "2026-01-31"}
    jan31, _ = version(store, "__unknown__2026-01-31")
    feb1, _ = version(store, "__unknown__2026-02-01")
    version(store, "2026-01-31")
    assert (jan31.rows, ids_in(store, jan31), sorted(jan31.hours)) == (3, ["n1", "n2", "n3"],
                                                                      ["2026-01-31T13", "2026-01-31T14"])
    assert (feb1.rows, ids_in(store, feb1), jan31.no_event_time_rows, jan31.sentinel_rows) == (1, ["n4"], 3, {})
    # A re-land of a landing hour of Jan 31 re-versions Jan 31's partition, not Feb 1's.
    write_event_hour(store, DS, T, "2026-01-31T14", {None: recs("n3", "n3b")}, SCHEMA, first=2000)
    assert set(pending_partitions(store, DS, T)) == {"__unknown__2026-01-31"}


SENTINELS = ["0001-01-01T00", "1900-01-01T00", "1959-12-31T23", "1969-12-31T23", "1970-01-01T00", "2160-01-01T00",
             "9999-12-31T23"]


def test_sentinel_event_times_go_with_the_records_with_no_event_time_counted_by_event_hour(store):
    """Event times no event partition is cut by (before 1970-01-02 or after 2159-12-31: what BigQuery
    cannot partition, and timestamp zero) are in the unknown partition of their landing day, counted
    apart from the records with no event time; the landing-hour files are as landed."""
    spread = {None: recs("none"), "1970-01-02T00": recs("first"), "2159-12-31T23": recs("last"),
              **{s: recs(f"s-{s}") for s in SENTINELS}}
    write_event_hour(store, DS, T, "2026-01-31T13", spread, SCHEMA)
    assert set(pending_partitions(store, DS, T)) == {"__unknown__2026-01-31", "1970-01-02", "2159-12-31"}
    unknown, _ = version(store, "__unknown__2026-01-31")
    assert ids_in(store, unknown) == sorted(["none", *(f"s-{s}" for s in SENTINELS)])
    assert unknown.no_event_time_rows == 1 and unknown.sentinel_rows == {s: 1 for s in SENTINELS}
    assert ids_in(store, version(store, "1970-01-02")[0]) == ["first"]
    done, _ = read_done(store, DS, T, "2026-01-31T13")  # the landing hour lists its files as landed
    assert sorted(f.event_hour or "" for f in done.files) == sorted(["", "1970-01-02T00", "2159-12-31T23", *SENTINELS])


def test_only_the_newest_two_versions_are_kept(store):
    for n in range(5):
        write_event_hour(store, DS, T, f"2026-01-31T{10 + n:02d}", {"2026-01-31T09": recs(f"x{n}")}, SCHEMA,
                         first=1000 * (n + 1))
        m, new = version(store, "2026-01-31", now=NOW + timedelta(hours=n))
        assert new and m.version == n + 1
        assert versions(store, DS, T, "2026-01-31") == list(range(max(1, n), n + 2))
    assert m.previous_amended_at == (NOW + timedelta(hours=3)).isoformat(timespec="seconds")


def test_the_versions_a_partition_kept_before_are_removed_by_its_next_versioning_changed_or_not(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T09": recs("a")}, SCHEMA)
    m, _ = version(store, "2026-01-31")
    for v in range(2, 301):  # what 300 landing hours left before versions were removed
        store.write_atomic(m.path.replace("v=000001", f"v={v:06d}"), json.dumps({**json.loads(m.to_bytes()),
                                                                                  "version": v}).encode())
    again, new = version(store, "2026-01-31")
    assert (new, again.version, versions(store, DS, T, "2026-01-31")) == (False, 300, [299, 300])


def test_each_partitions_newest_version_and_its_write_time_are_one_listing_of_the_table():
    from kafka_landing_tests.mem_store import MemStore

    mem = MemStore()
    mem.clock = lambda: NOW.timestamp()
    for n, (hour, day) in enumerate((("2026-01-31T13", "2026-01-31T09"), ("2026-02-01T13", "2026-02-01T09"),
                                     ("2026-02-02T13", "2026-01-31T10"))):  # the last one late
        write_event_hour(mem, DS, T, hour, {day: recs(hour)}, SCHEMA)
        mem.clock = lambda n=n: NOW.timestamp() + n
        version(mem, day[:10])
    mem.write_atomic(f"event_partitions/{DS}/{T}/2026-02-01/v=notes.json", b"{}")  # not a version
    mem.calls.clear()
    assert newest_versions(mem, DS, T) == [VersionFile("2026-01-31", 2, NOW.timestamp() + 2),
                                           VersionFile("2026-02-01", 1, NOW.timestamp() + 1)]
    assert dict(mem.calls) == {"list": 1}  # the index entries beside them are not read either
    assert newest_versions(mem, DS, "other") == []


def test_hour_granularity(store):
    write_event_hour(store, DS, T, "2026-01-31T14", {"2026-01-31T13": recs("a"), "2026-01-31T14": recs("b")}, SCHEMA,
                     granularity="hour")
    assert set(pending_partitions(store, DS, T)) == {"2026-01-31T13", "2026-01-31T14"}
    m, _ = version(store, "2026-01-31T13", granularity="hour")
    assert ids_in(store, m) == ["a"]


def test_a_gone_done_file_stops_the_next_version_naming_the_hour(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a")}, SCHEMA)
    version(store, "2026-01-31")
    store.delete(done_file_path(DS, T, "2026-01-31T13"))
    with pytest.raises(EventPartitionError, match=r"landing hours \['2026-01-31T13'\] are in its version 1"):
        version(store, "2026-01-31")
    assert versions(store, DS, T, "2026-01-31") == [1]


def test_an_unreadable_done_file_stops_the_version_naming_it(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a")}, SCHEMA)
    store.write_atomic(done_file_path(DS, T, "2026-01-31T13"), b"{not json")
    with pytest.raises(EventPartitionError, match=r"done file of landing hour 2026-01-31T13.*re-land the hour"):
        version(store, "2026-01-31")


def test_a_marker_naming_newer_content_stays(store):
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a")}, SCHEMA)
    with store.lock(event_lock_path(DS, T, "2026-01-31")) as held:
        seen = next_manifest(store, held, event_unit(DS, T, "2026-01-31"), "day", NOW).seen
    # A re-land marks the partition again before the versioning clears what it saw.
    write_event_hour(store, DS, T, "2026-01-31T13", {"2026-01-31T13": recs("a", "b")}, SCHEMA)
    assert clear_event_pending(store, DS, T, "2026-01-31", seen) == 0
    assert store.exists(event_pending_path(DS, T, "2026-01-31", "2026-01-31T13"))
    m, new = version(store, "2026-01-31")
    assert new and m.rows == 2 and pending_partitions(store, DS, T) == {}


@contextmanager
def fresh_store(tmp_path_factory):
    yield LocalStore(tmp_path_factory.mktemp("events"))


LANDING_HOURS = [f"2026-01-{d:02d}T{h:02d}" for d in (30, 31) for h in (0, 12)]
EVENT_HOURS = [None, "1900-01-01T00", "2026-01-29T05", "2026-01-30T00", "2026-01-30T23", "2026-01-31T12"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(LANDING_HOURS),
                          st.dictionaries(st.sampled_from(EVENT_HOURS), st.integers(1, 3), max_size=3)),
                min_size=1, max_size=8),
       st.sampled_from(["day", "hour"]))
def test_every_landed_record_is_in_exactly_one_event_partition_whatever_lands_and_relands(
        tmp_path_factory, landings, granularity):
    """Landing hours landed and re-landed in any order, each versioning every pending partition:
    every landed offset is in exactly one newest version, no other, and a version is made only
    when the partition's content changed."""
    with fresh_store(tmp_path_factory) as store:
        for n, (hour, spread) in enumerate(landings):
            by_event = {e: recs(*(f"{hour}/{n}/{e}/{i}" for i in range(k))) for e, k in spread.items()}
            write_event_hour(store, DS, T, hour, by_event, SCHEMA, granularity=granularity, first=1000 * (n + 1))
            for p in sorted(pending_partitions(store, DS, T)):
                before = latest_manifest(store, DS, T, p)
                m, new = version(store, p, granularity)
                assert new == (before is None or before.sha256 != m.sha256)
        assert pending_partitions(store, DS, T) == {}
        where: dict[tuple[str, int], list[str]] = {}
        for p in store.subdirs(f"event_partitions/{DS}/{T}"):
            m = latest_manifest(store, DS, T, p)
            for f in m.files:
                for off in range(f["first_offset"], f["last_offset"] + 1):
                    where.setdefault((f["hour"], off), []).append(p)
        landed = {}
        for hour, _ in landings:
            done, _ = read_done(store, DS, T, hour)
            landed.update({(hour, off): 1 for f in done.files for off in range(f.first_offset, f.last_offset + 1)})
        assert {k: len(v) for k, v in where.items()} == landed
