"""A done file is trusted only if its contents match its path and it lists files of
its own hour's folder only: every way it can be wrong is refused, naming the
done file and the field."""

from __future__ import annotations

import json
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.handoff.manifests import (
    DoneFileError,
    DoneFileMismatch,
    check_done_file,
    done_file_problems,
    read_done_file,
)
from kafka_landing.store.local import LocalStore

REL = "tables/shop/orders/hour=2026-11-20T13/_DONE.json"
FOLDER = "tables/shop/orders/hour=2026-11-20T13/"


def done(**over) -> dict:
    files = over.pop("files", [f"{FOLDER}t+0+shop.orders+1+{0:020d}+{9:020d}.avro"])
    d = {
        "topic": "t", "dataset": "shop", "table": "orders", "hour": "2026-11-20T13", "rows": 10 * len(files),
        "schema_ids": [1],
        "files": [{"path": p, "rows": 10, "bytes": 100, "partition": 0, "first_offset": 0, "last_offset": 9,
                   "schema_id": 1} for p in files],
        "dead_letters": {"rows": 0, "by_reason": {}, "files": []},
        "slice": {"manifest": "slices/t/hour=2026-11-20T13.json", "records": 10, "partitions": []},
        "topic_records_read": 10, "offsets_without_record": 0, "attempt": "a", "landed_at": "2026-11-20T14:15:00+00:00",
    }
    d.update(over)
    return d


def test_a_done_file_of_its_own_hour_is_trusted():
    assert done_file_problems(REL, done()) == []
    parsed = check_done_file(REL, done())
    assert (parsed.dataset, parsed.table, parsed.hour, parsed.rows) == ("shop", "orders", "2026-11-20T13", 10)


@pytest.mark.parametrize("field,value", [("dataset", "web"), ("table", "payments"), ("hour", "2026-11-20T14"),
                                         ("hour", None)])
def test_dataset_table_or_hour_contradicting_the_path(field, value):
    problems = done_file_problems(REL, done(**{field: value}))
    assert len(problems) == 1
    assert REL in problems[0] and f"field '{field}'" in problems[0] and repr(value) in problems[0]


@pytest.mark.parametrize("path,why", [
    (f"{FOLDER}../hour=2026-11-20T14/x.avro", "contains '..'"),
    ("tables/shop/orders/hour=2026-11-20T14/x.avro", "belongs to shop.orders hour 2026-11-20T14"),
    ("tables/shop/payments/hour=2026-11-20T13/x.avro", "belongs to shop.payments hour 2026-11-20T13"),
    ("/etc/passwd", "is an absolute path"),
    ("C:/data/x.avro", "is an absolute path"),
    ("dead_letters/t/hour=2026-11-20T13/x.avro", "lies outside the hour's folder"),
    (f"{FOLDER}_attempts/abc/x.avro", "is a hidden or staging file"),
    (f"{FOLDER}.x.avro.tmp", "is a hidden or staging file"),
    (f"{FOLDER}sub\\x.avro", "contains a backslash"),
    (f"{FOLDER}./x.avro", "'.' path component"),
    (f"{FOLDER}", "'.' path component"),
    ("", "is not a path"),
    (None, "is not a path"),
])
def test_listed_file_outside_the_hours_folder(path, why):
    raw = done()
    raw["files"][0]["path"] = path
    problems = done_file_problems(REL, raw)
    assert len(problems) == 1, problems
    assert REL in problems[0] and "field 'files[0].path'" in problems[0] and why in problems[0]
    with pytest.raises(DoneFileMismatch, match="Nothing was loaded from it: re-land the hour"):
        check_done_file(REL, raw)


def test_every_problem_is_named_at_once():
    raw = done(dataset="web", files=[f"{FOLDER}a.avro", "/abs.avro"])
    problems = done_file_problems(REL, raw)
    assert [p.split(": ", 1)[1].split(" ")[1] for p in problems] == ["'dataset'", "'files[1].path'"]


@pytest.mark.parametrize("raw,why", [
    ([], "is not a JSON object"),
    ({**done(), "files": 7}, "field 'files' is not a list"),
    ({k: v for k, v in done().items() if k != "dead_letters"}, "is not a done file this version reads"),
    (done(rows=11), "field 'rows' is 11, its files list 10 rows"),
])
def test_malformed_done_files(raw, why):
    problems = done_file_problems(REL, raw)
    assert problems and why in problems[0] and REL in problems[0]


def test_a_path_that_is_not_a_done_file_path():
    assert "its path is not tables/" in done_file_problems("tables/shop/orders/2026/_DONE.json", done())[0]


@given(st.lists(st.sampled_from(["..", ".", "", "x.avro", "_a", "hour=2026-11-20T13", "orders", "shop", "tables",
                                 "/", "b"]), min_size=1, max_size=7).map("/".join))
def test_an_accepted_path_is_a_plain_file_in_the_hours_folder(tail):
    raw = done()
    raw["files"][0]["path"] = FOLDER + tail
    if not done_file_problems(REL, raw):
        assert posixpath.normpath(FOLDER + tail) == FOLDER + tail
        assert (FOLDER + tail).startswith(FOLDER) and not any(p.startswith(("_", ".")) for p in tail.split("/"))


def test_a_done_file_says_offsets_without_record_and_one_from_before_the_rename_still_reads():
    """One word per concept: the field is `offsets_without_record`, as in the checks; a done
    file written before the rename (`offset_gaps`) reads the same."""
    new = check_done_file(REL, done(offsets_without_record=2))
    old_body = done(offset_gaps=3)
    del old_body["offsets_without_record"]
    assert (new.offsets_without_record, check_done_file(REL, old_body).offsets_without_record) == (2, 3)
    assert "offset_gaps" not in new.to_dict() and new.to_dict()["offsets_without_record"] == 2


@pytest.mark.parametrize("body", [b"{not json", json.dumps(done(dataset="web")).encode()], ids=["not JSON", "contradicting"])
def test_a_done_file_that_cannot_be_trusted_says_nothing_was_loaded_from_it_and_marks_it(tmp_path, body):
    store = LocalStore(str(tmp_path))
    store.write_atomic(REL, body)
    with pytest.raises(DoneFileError) as refused:
        read_done_file(store, REL)
    exc = refused.value
    assert exc.nothing_loaded and not exc.gone and not exc.transient
    assert str(exc).lower().count("nothing was loaded from it") == 1


def test_no_done_file_is_gone_and_says_to_land_the_hour(tmp_path):
    with pytest.raises(DoneFileError) as refused:
        read_done_file(LocalStore(str(tmp_path)), REL)
    assert refused.value.gone and not refused.value.transient and not refused.value.nothing_loaded
    assert "does not exist: land the hour first" in str(refused.value)
