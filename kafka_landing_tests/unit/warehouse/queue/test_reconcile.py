"""The queue of warehouse loads: markers with compare-and-delete, loads given up on moved
aside, run keys and the retry rule, the reconciliation that finds unmarked done files
whatever their mtime without reading again what it checked, and hours behind."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_landing.handoff.manifests import landed_hours
from kafka_landing.handoff.markers import (
    Marks,
    TableHour,
    clear_pending,
    content_sha,
    give_up,
    given_up_why,
    list_pending,
    mark_pending,
    marker_path,
    marks_of,
    read_marker,
    refusal,
    refuse,
)
from kafka_landing.naming import ONE_HOUR, hour_tag, last_closed_hour
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.queue.reconcile import RECONCILE_AGAIN_AFTER, ScanPosition, hours_behind, reconcile
from kafka_landing.warehouse.queue.runs import FINISHED, MAX_ATTEMPTS, attempt_keys, decide, run_key

DONE = "tables/shop/orders/hour=2026-11-20T13/_DONE.json"
TH = TableHour("2026-11-20T13", "shop", "orders")


def marker_sha(store, th):
    return marks_of(store, th).by_hour.get(th.hour)


def give_up_pending(store, th, seen, sha, why, runs=()):
    return give_up(store, th, Marks({th.hour: seen}), sha, why, runs)


def write_done(store: LocalStore, dataset: str, table: str, hour: str, body: bytes, mtime: float | None = None):
    rel = TableHour(hour, dataset, table).done_file
    p = Path(store.location(rel))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(body)
    if mtime is not None:
        os.utime(p, (mtime, mtime))
    return rel


# --- markers -------------------------------------------------------------------

def test_a_marker_names_the_content_and_a_load_clears_only_that_content(tmp_path):
    store = LocalStore(tmp_path)
    marker = mark_pending(store, DONE, b"A")
    assert marker == "pending_loads/shop/orders/hour=2026-11-20T13.json"
    assert json.loads(store.read_bytes(marker)) | {"marked_at": None} == {
        "unit": "hour", "done_file": DONE, "sha256": content_sha(b"A"), "marked_at": None}
    assert list_pending(store) == [TH]
    mark_pending(store, DONE, b"B")  # re-landed while A was being loaded
    assert not clear_pending(store, DONE, content_sha(b"A")), "the load of A must not clear B"
    assert marker_sha(store, TH) == content_sha(b"B")
    assert clear_pending(store, DONE, content_sha(b"B"))
    assert list_pending(store) == [] and marker_sha(store, TH) is None
    assert not clear_pending(store, DONE, content_sha(b"B")), "clearing twice is a no-op"


def test_an_unreadable_marker_still_means_look_here(tmp_path):
    store = LocalStore(tmp_path)
    store.write_atomic(marker_path(TH), b"{not json")
    assert list_pending(store) == [TH] and marker_sha(store, TH) is None
    assert clear_pending(store, DONE, None)


def test_pending_lists_oldest_hour_first_and_by_table(tmp_path):
    store = LocalStore(tmp_path)
    for ds, t, h in [("web", "clicks", "2026-11-20T15"), ("shop", "orders", "2026-11-20T14"),
                     ("shop", "orders", "2026-11-19T23"), ("web", "views", "2026-11-20T14")]:
        mark_pending(store, TableHour(h, ds, t).done_file, h.encode())
    (Path(store.location("pending_loads/shop/orders")) / ".hour=x.json.1.tmp").write_text("")  # a torn write's leftover
    assert [(p.hour, p.name) for p in list_pending(store)] == [
        ("2026-11-19T23", "shop.orders"), ("2026-11-20T14", "shop.orders"), ("2026-11-20T14", "web.views"),
        ("2026-11-20T15", "web.clicks")]
    assert [p.hour for p in list_pending(store, "shop", "orders")] == ["2026-11-19T23", "2026-11-20T14"]
    assert list_pending(store, "shop", "nothing") == []


def test_a_load_given_up_on_is_moved_aside_until_re_landed_or_loaded(tmp_path):
    store = LocalStore(tmp_path)
    mark_pending(store, DONE, b"A")
    assert not give_up_pending(store, TH, content_sha(b"B"), content_sha(b"A"), "x"), "the marker names other content"
    assert give_up_pending(store, TH, content_sha(b"A"), content_sha(b"A"), "finished 3 times", ["r1"])
    assert list_pending(store) == [] and list_pending(store, given_up=True) == [TH]
    aside = read_marker(store, TH, given_up=True)
    assert aside["sha256"] == content_sha(b"A") and aside["given_up"]["runs"] == ["r1"]
    assert given_up_why(aside) == "finished 3 times"
    assert not give_up_pending(store, TH, content_sha(b"A"), content_sha(b"A"), "x"), "moved once"
    # Tried again by hand and failed for good: said beside the marker moved aside (its `_refused` record).
    refuse(store, TH, Marks({TH.hour: content_sha(b"A")}), "Cannot add required fields")
    assert refusal(store, TH, Marks({TH.hour: content_sha(b"A")})).why == "Cannot add required fields"
    # Loaded by hand: gone, whatever content it named (the done file may have been fixed by hand).
    assert clear_pending(store, DONE, content_sha(b"fixed"))
    assert list_pending(store, given_up=True) == []
    assert refusal(store, TH, Marks({TH.hour: content_sha(b"A")})) is None, "the refusal went with it"
    # Re-landed: the new content is pending, what was given up on is gone.
    mark_pending(store, DONE, b"A")
    assert give_up_pending(store, TH, content_sha(b"A"), content_sha(b"A"), "x")
    mark_pending(store, DONE, b"B")
    assert list_pending(store) == [TH] and list_pending(store, given_up=True) == []
    assert marker_sha(store, TH) == content_sha(b"B")


def test_mark_pending_refuses_a_path_off_the_layout(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="is not a done file path"):
        mark_pending(LocalStore(tmp_path), "tables/shop/orders/_DONE.json", b"x")


# --- run keys and retries -----------------------------------------------------------

def test_first_attempt_keeps_the_earlier_key_format():
    assert run_key(DONE, content_sha(b"A")) == f"{DONE}@{content_sha(b'A')[:16]}"
    assert run_key(DONE, content_sha(b"A"), 2) == f"{DONE}@{content_sha(b'A')[:16]}#attempt2"


def test_retry_rule():
    sha = content_sha(b"A")
    k1, k2, k3 = attempt_keys(DONE, sha)
    assert decide(attempt_keys(DONE, sha), {}).run_key == k1
    assert decide(attempt_keys(DONE, sha), {k1: ["QUEUED"]}).action == "wait"
    assert decide(attempt_keys(DONE, sha), {k1: ["FAILURE"]}).run_key == k2
    assert decide(attempt_keys(DONE, sha), {k1: ["FAILURE"], k2: ["STARTED"]}).action == "wait"
    assert decide(attempt_keys(DONE, sha), {k1: ["FAILURE"], k2: ["CANCELED"]}).run_key == k3
    # A success that did not leave the content loaded (the warehouse was wiped since): load again.
    assert decide(attempt_keys(DONE, sha), {k1: ["SUCCESS"]}).run_key == k2
    given_up = decide(attempt_keys(DONE, sha), {k1: ["FAILURE"], k2: ["FAILURE"], k3: ["FAILURE"]})
    assert given_up.action == "give_up" and given_up.attempt == MAX_ATTEMPTS and len(given_up.runs) == 3
    # Another content of the same done file starts over.
    assert decide(attempt_keys(DONE, content_sha(b"B")), {k1: ["FAILURE"], k2: ["FAILURE"], k3: ["FAILURE"]}).attempt == 1


STATUSES = sorted(FINISHED) + ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]


@given(st.dictionaries(st.integers(1, MAX_ATTEMPTS), st.lists(st.sampled_from(STATUSES), min_size=1, max_size=3)))
def test_a_requested_key_never_has_a_run_and_a_run_in_flight_is_never_doubled(runs_by_attempt):
    sha = content_sha(b"A")
    keys = attempt_keys(DONE, sha)
    statuses = {keys[a - 1]: s for a, s in runs_by_attempt.items()}
    d = decide(attempt_keys(DONE, sha), statuses)
    in_flight = any(s not in FINISHED for ss in statuses.values() for s in ss)
    assert (d.action == "wait") == in_flight
    if d.action == "request":
        assert d.run_key not in statuses and d.run_key in keys
        assert d.attempt > max(runs_by_attempt, default=0)
    if d.action == "give_up":
        assert MAX_ATTEMPTS in runs_by_attempt


# --- reconciliation ----------------------------------------------------------------

def test_reconciliation_finds_unmarked_done_files_whatever_their_mtime(tmp_path):
    store = LocalStore(tmp_path)
    loaded = {}
    old = datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp()
    rel_new = write_done(store, "shop", "orders", "2026-11-20T13", b"new")
    rel_old = write_done(store, "shop", "orders", "2026-11-20T12", b"copied with rsync -t", mtime=old)
    write_done(store, "shop", "orders", "2026-11-20T11", b"loaded")
    loaded[("shop", "orders", "2026-11-20T11")] = content_sha(b"loaded")
    write_done(store, "web", "other", "2026-11-20T11", b"not configured")
    pos, marked, scanned = reconcile(store, [("shop", "orders")], lambda *k: loaded.get(k), ScanPosition(), 100)
    assert pos.table is None and scanned == 3
    assert sorted(m.done_file for m in marked) == sorted([rel_new, rel_old])
    th_12, copied = TableHour("2026-11-20T12", "shop", "orders"), content_sha(b"copied with rsync -t")
    assert marker_sha(store, th_12) == copied
    # Each is marked once: starting afresh reads them again and marks nothing; going on reads nothing.
    assert reconcile(store, [("shop", "orders")], lambda *k: loaded.get(k), ScanPosition(), 100)[1:] == ([], 3)
    assert reconcile(store, [("shop", "orders")], lambda *k: loaded.get(k), pos, 100)[1:] == ([], 0)
    # Content given up on is not marked again; new content of that hour is.
    assert clear_pending(store, rel_new, content_sha(b"new"))
    assert give_up_pending(store, th_12, copied, copied, "x")
    assert reconcile(store, [("shop", "orders")], lambda *k: loaded.get(k), ScanPosition(), 100)[1] == [
        TableHour("2026-11-20T13", "shop", "orders")]
    write_done(store, "shop", "orders", "2026-11-20T12", b"fixed by hand")
    assert reconcile(store, [("shop", "orders")], lambda *k: loaded.get(k), ScanPosition(), 100)[1] == [th_12]
    assert list_pending(store, given_up=True) == []


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_reconciliation_reads_only_what_it_never_checked_until_a_day_later(tmp_path):
    """Hours never checked (a new one, or an old one copied in later) are read on the next call,
    and first; hours checked are read again only once their table's were all read a day ago,
    which finds a done file rewritten in place with nothing to say so."""
    store, clock = LocalStore(tmp_path), Clock()
    tags = [hour_tag(datetime(2026, 1, 1, tzinfo=timezone.utc) + ONE_HOUR * h) for h in range(48)]
    for t in tags[:5] + tags[6:]:  # hour 5 lands later
        write_done(store, "shop", "orders", t, t.encode())
    loaded = {("shop", "orders", t): content_sha(t.encode()) for t in tags}
    tables = [("shop", "orders")]
    reads = []
    real = store.read_bytes
    store.read_bytes = lambda rel: (reads.append(rel), real(rel))[1]

    def call(pos, budget=1000):
        reads.clear()
        return reconcile(store, tables, lambda *k: loaded.get(k), pos, budget, clock=clock)

    pos, marked, scanned = call(ScanPosition())
    assert scanned == 47 and marked == []
    assert call(pos)[1:] == ([], 0) and reads == []
    clock.now += RECONCILE_AGAIN_AFTER - 1
    assert call(pos)[1:] == ([], 0), "not a day yet"

    old = datetime(2001, 1, 1, tzinfo=timezone.utc).timestamp()
    write_done(store, "shop", "orders", tags[20], b"rewritten in place", mtime=old)
    clock.now += 1
    pos, marked, scanned = call(pos, budget=10)  # a day: read again, oldest first, 10 at a time
    assert scanned == 10 and marked == [] and pos.tables["shop.orders"].again is not None
    rel_5 = write_done(store, "shop", "orders", tags[5], b"copied in later", mtime=old)
    pos, marked, scanned = call(pos, budget=10)
    assert reads[0] == rel_5, "the hour never checked first"
    assert [m.hour for m in marked] == [tags[5]] and scanned == 10
    pos, marked, scanned = call(pos, budget=10)
    assert [m.hour for m in marked] == [tags[20]]
    while scanned:
        pos, marked, scanned = call(pos, budget=10)
    assert pos.tables["shop.orders"].again is None and pos.tables["shop.orders"].since == clock.now
    assert ScanPosition.from_json(json.loads(json.dumps(pos.to_json()))) == pos
    assert ScanPosition.from_json({"table": "x", "after": "y"}) == ScanPosition(), "an older cursor starts again"


@settings(max_examples=30, deadline=None)
@given(n_tables=st.integers(1, 4), n_hours=st.integers(0, 12), budget=st.integers(1, 7), data=st.data())
def test_reconciliation_in_small_steps_covers_every_done_file(tmp_path_factory, n_tables, n_hours, budget, data):
    store = LocalStore(tmp_path_factory.mktemp("root"))
    tables = [("ds", f"t{i}") for i in range(n_tables)]
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    loaded, expected = {}, set()
    for ds, t in tables:
        for h in range(n_hours):
            tag = hour_tag(base + ONE_HOUR * h)
            body = f"{t}{h}".encode()
            write_done(store, ds, t, tag, body)
            if data.draw(st.booleans()):
                loaded[(ds, t, tag)] = content_sha(body)
            else:
                expected.add(TableHour(tag, ds, t))
    pos, found, total = ScanPosition(), [], 0
    for _ in range(n_tables * n_hours // budget + 2):  # every done file once, in steps of `budget`
        pos, marked, scanned = reconcile(store, tables, lambda *k: loaded.get(k), pos, budget)
        assert scanned <= budget
        found += marked
        total += scanned
        if scanned < budget:
            break
    assert set(found) == expected and len(found) == len(expected)
    assert total == n_tables * n_hours
    assert reconcile(store, tables, lambda *k: loaded.get(k), pos, budget)[2] == 0, "nothing read twice"


def test_landed_hours_are_the_hours_with_a_done_file(tmp_path):
    store = LocalStore(tmp_path)
    write_done(store, "shop", "orders", "2026-11-20T13", b"x")
    Path(store.location("tables/shop/orders/hour=2026-11-20T12/_attempts")).mkdir(parents=True)  # a crashed attempt
    Path(store.location("tables/shop/orders/not-an-hour")).mkdir(parents=True)
    assert landed_hours(store, "shop", "orders") == ["2026-11-20T13"]
    assert landed_hours(store, "shop", "none") == []


# --- hours behind ---------------------------------------------------------------------

NOW = datetime(2026, 11, 20, 14, 7, tzinfo=timezone.utc)


def test_closed_means_hour_end_plus_grace_has_passed():
    assert hour_tag(last_closed_hour(NOW, 5)) == "2026-11-20T13"  # 13:00-14:00 closed at 14:05
    assert hour_tag(last_closed_hour(NOW, 10)) == "2026-11-20T12"  # closes at 14:10
    assert hour_tag(last_closed_hour(NOW, 90)) == "2026-11-20T11"  # closes at 13:30; 12h at 14:30


def test_hours_behind_counts_closed_hours_not_loaded_from_the_first_landed_hour():
    landed = ["2026-11-20T08", "2026-11-20T09", "2026-11-20T10", "2026-11-20T12"]  # 11 did not land
    loaded = ["2026-11-20T08", "2026-11-20T10"]
    b = hours_behind(landed, loaded, NOW, grace_minutes=5)
    assert b.first_landed_hour == "2026-11-20T08" and b.last_closed_hour == "2026-11-20T13"
    assert b.missing == ("2026-11-20T09", "2026-11-20T11", "2026-11-20T12", "2026-11-20T13") and b.hours == 4
    everything = [f"2026-11-20T{h:02d}" for h in range(8, 14)]
    assert hours_behind(everything, everything, NOW, 5).hours == 0
    assert hours_behind(everything, everything[:-1], NOW, 10).hours == 0, "13h is not closed with 10 min grace"
    assert hours_behind([], [], NOW, 5) .first_landed_hour is None and hours_behind([], [], NOW, 5).hours == 0


@given(st.sets(st.integers(0, 200)), st.sets(st.integers(0, 200)), st.integers(0, 180), st.integers(0, 3600))
def test_hours_behind_properties(landed_i, loaded_i, grace, seconds):
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    now = base + ONE_HOUR * 150 + timedelta(seconds=seconds)
    landed = {hour_tag(base + ONE_HOUR * i) for i in landed_i}
    loaded = {hour_tag(base + ONE_HOUR * i) for i in loaded_i}
    b = hours_behind(landed, loaded, now, grace)
    last = last_closed_hour(now, grace)
    assert not set(b.missing) & loaded
    assert list(b.missing) == sorted(b.missing)
    for tag in b.missing:
        h = datetime.strptime(tag, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
        assert h + ONE_HOUR + timedelta(minutes=grace) <= now
    if landed | loaded:
        first = datetime.strptime(min(landed | loaded), "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
        closed_span = {hour_tag(first + ONE_HOUR * i) for i in range(int((last - first) / ONE_HOUR) + 1)}
        assert set(b.missing) == closed_span - loaded
