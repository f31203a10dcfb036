"""An hour's archive is taken whole from its published manifests, or refused naming what is wrong,
before Spark starts: never landed, a listed file missing, a done file of another slice, listed
records that do not add up to the frozen slice, a slice retention cut before it was landed."""

from __future__ import annotations

import dataclasses
import re

import pytest

from kafka_landing.avro_landing.archive import ArchiveError, find_archive
from kafka_landing.avro_landing.publish import StagedHour, publish
from kafka_landing.config import Route, TopicConfig
from kafka_landing.handoff.manifests import DoneFile
from kafka_landing.kafka_slices.plan import RETENTION_AFTER_FREEZING, without_deleted
from kafka_landing.naming import dead_letter_manifest_path, done_file_path
from kafka_landing.store.local import LocalStore
from kafka_landing_tests.unit.avro_landing.test_publish import HOUR, NO_DEAD, PLAN, H, staged

CFG = TopicConfig("web", "w", route=Route("type", {"click": "clicks"}, "other"))


def _land(store, cfg=CFG, table="clicks", attempt="a1", plan=PLAN):
    publish(store, cfg, StagedHour(plan, [staged(store, cfg.dataset, table, attempt)], [], NO_DEAD, 2, attempt))


def test_a_landed_hour_s_archive_is_its_files(tmp_path):
    store = LocalStore(str(tmp_path))
    _land(store)
    archive = find_archive(store, PLAN)
    done = DoneFile.from_dict(store.read_json(done_file_path("w", "clicks", HOUR)))
    assert archive.files == done.files and archive.records == 2 and archive.attempt == "a1"
    assert archive.plan == PLAN and archive.dead_letter_files == ()


def test_after_a_routing_change_the_archive_is_the_tables_fed_now(tmp_path):
    store = LocalStore(str(tmp_path))
    _land(store)
    _land(store, dataclasses.replace(CFG, route=Route("type", {"click": "web_clicks"}, "other")), "web_clicks", "a2")
    archive = find_archive(store, PLAN)
    assert [f.path.split("/")[2] for f in archive.files] == ["web_clicks"] and archive.records == 2


def test_an_hour_never_landed_has_no_archive(tmp_path):
    with pytest.raises(ArchiveError, match="never landed.*does not exist.*land it from Kafka"):
        find_archive(LocalStore(str(tmp_path)), PLAN)


def test_a_missing_file_is_named(tmp_path):
    store = LocalStore(str(tmp_path))
    _land(store)
    gone = find_archive(store, PLAN).files[0].path
    store.delete(gone)
    with pytest.raises(ArchiveError, match=f"{re.escape(gone)}.*does not exist"):
        find_archive(store, PLAN)


def test_a_missing_done_file_is_named(tmp_path):
    store = LocalStore(str(tmp_path))
    _land(store)
    store.delete(done_file_path("w", "clicks", HOUR))
    with pytest.raises(ArchiveError, match="w.clicks has no done file of attempt a1"):
        find_archive(store, PLAN)


def test_records_that_do_not_add_up_to_the_slice_are_refused(tmp_path):
    store = LocalStore(str(tmp_path))
    _land(store)
    wider = dataclasses.replace(PLAN, partitions=(dataclasses.replace(PLAN.partitions[0], end=3),))
    with pytest.raises(ArchiveError, match="another slice"):
        find_archive(store, wider)
    manifest = store.read_json(dead_letter_manifest_path("web", HOUR))
    store.write_json_atomic(dead_letter_manifest_path("web", HOUR), {**manifest, "rows": 1})
    with pytest.raises(ArchiveError, match="list 3 records.*holds 2"):
        find_archive(store, PLAN)


def test_a_slice_retention_cut_before_landing_is_cut_again(tmp_path):
    store = LocalStore(str(tmp_path))
    cut = without_deleted(PLAN, {0: 1})  # offset 0 deleted, skipped on request: one record landed
    stage = staged(store, "w", "clicks", "a1")
    publish(store, CFG, StagedHour(cut, [dataclasses.replace(stage, file=dataclasses.replace(stage.file, rows=1))],
                                   [], NO_DEAD, 1, "a1"))
    archive = find_archive(store, PLAN)
    assert archive.plan.skipped == ({"partition": 0, "start": 0, "end": 1, "reason": RETENTION_AFTER_FREEZING},)
    assert archive.plan.records == 1 and archive.records == 1


class Killed(Exception):
    pass


@pytest.mark.parametrize("step", ["landing:files_moved", "landing:done_written", "landing:published"])
@pytest.mark.parametrize("routing", ["same", "changed"])
def test_a_landing_killed_while_it_published_leaves_an_archive_that_covers_the_slice_once(tmp_path, monkeypatch, step,
                                                                                         routing):
    """A replay killed at each step of its publish (under the same routing, or a new one whose
    publish retires the old tables last): the archive is still every record once, so the replay
    that follows finds it whole (the kill is an exception here; the fault tests SIGKILL)."""
    from kafka_landing.avro_landing import publish as publishing

    store = LocalStore(str(tmp_path))
    _land(store)
    later = CFG if routing == "same" else dataclasses.replace(CFG, route=Route("type", {"click": "web_clicks"}, "other"))
    table = "clicks" if routing == "same" else "web_clicks"

    def crash(at):
        if at == step:
            raise Killed(at)

    monkeypatch.setattr(publishing, "crash_point", crash)
    with pytest.raises(Killed):
        _land(store, later, table, "a2")
    archive = find_archive(store, PLAN)
    assert archive.records == 2 and len({f.path.rsplit("/", 1)[-1] for f in archive.files}) == 1
    assert archive.attempt in ("a1", "a2")


def test_an_hour_landed_before_its_manifest_listed_its_tables_finds_them_by_their_done_files(tmp_path):
    """Hours landed before the dead-letter manifest named the tables (the oldest, the ones a replay is
    for): the tables whose done file of the hour names the topic."""
    store = LocalStore(str(tmp_path))
    _land(store)
    rel = dead_letter_manifest_path("web", HOUR)
    manifest = store.read_json(rel)
    store.write_json_atomic(rel, {k: v for k, v in manifest.items() if k not in ("tables", "retired", "shape")})
    archive = find_archive(store, PLAN)
    assert archive.records == 2 and [f.path.split("/")[2] for f in archive.files] == ["clicks"]


def test_an_hours_archive_costs_the_same_store_calls_after_a_year_of_hours():
    """Finding an hour's archive reads its own manifests and lists its own folders: the same calls
    whether the root holds a day of landed hours or a year (counted, as a bucket bills them)."""
    from kafka_landing.naming import Hour
    from kafka_landing_tests.mem_store import MemStore

    def calls_for_an_hour_among(hours: int) -> int:
        store = MemStore()
        first = Hour(H)
        plans = {}
        for i in range(hours):
            plan = dataclasses.replace(PLAN, hour=first.plus(i))
            staged_file = staged(store, "w", "clicks", f"a{i}")
            moved = dataclasses.replace(staged_file, rel=staged_file.rel.replace(f"hour={H}", f"hour={plan.hour}"),
                                        hour=plan.hour)
            moved = dataclasses.replace(moved, file=dataclasses.replace(moved.file, path=moved.rel))
            publish(store, CFG, StagedHour(plan, [moved], [], NO_DEAD, 2, f"a{i}"))
            plans[plan.hour] = plan
        store.calls.clear()
        archive = find_archive(store, plans[first.plus(hours // 2)])
        assert archive.records == 2
        return store.total_calls

    assert calls_for_an_hour_among(24 * 365) == calls_for_an_hour_among(24) > 0
