"""Re-landing an hour after its topic's routing changed: the tables the hour no longer feeds
are retired (an empty done file that says why, their files removed), so no record of the hour
counts in two tables, and the landing conservation check sees a table that still lists rows."""

from __future__ import annotations

from kafka_landing.avro_landing.conservation import check_landed_hour
from kafka_landing.avro_landing.publish import StagedHour, publish
from kafka_landing.avro_landing.write import Staged
from kafka_landing.config import Route, TopicConfig
from kafka_landing.handoff.markers import clear_pending, content_sha, marks_of, parse_done_path
from kafka_landing.kafka_slices.plan import PartitionSlice, SlicePlan, SliceTask
from kafka_landing.handoff.manifests import DeadLetters, DoneFile, LandedFile
from kafka_landing.naming import (
    dead_letter_manifest_path,
    done_file_path,
    hour_from_tag,
    landing_file_name,
    OffsetRange,
    table_hour_dir,
)
from kafka_landing.store.local import LocalStore

H = "2026-11-20T13"
HOUR = hour_from_tag(H)
PLAN = SlicePlan("web", H, "x", 0, 10, (PartitionSlice(0, 0, 2, 0, 2, "timestamp", "timestamp"),),
                 (SliceTask(0, 0, 2),))
NO_DEAD = DeadLetters(0, {}, ())


def staged(store: LocalStore, dataset: str, table: str, attempt: str) -> Staged:
    """Two rows of partition 0, offsets 0-1, as a real (empty-schema) Avro file holds them."""
    import io

    import fastavro

    name = landing_file_name(OffsetRange("web", 0, 0, 1), dataset, table, 1)
    src = f"staging/web/{attempt}/{name}"
    buf = io.BytesIO()
    fastavro.writer(buf, {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}, [{"a": 1}, {"a": 2}])
    store.write_atomic(src, buf.getvalue())
    rel = f"{table_hour_dir(dataset, table, HOUR)}/{name}"
    return Staged(src, rel, LandedFile(rel, 2, len(buf.getvalue()), 0, 0, 1, 1), H, table)


def land(store, cfg: TopicConfig, table: str, attempt: str):
    return publish(store, cfg, StagedHour(PLAN, [staged(store, cfg.dataset, table, attempt)], [], NO_DEAD, 2, attempt))


def test_a_table_the_hour_no_longer_feeds_is_retired(tmp_path):
    store = LocalStore(str(tmp_path))
    v1 = TopicConfig("web", "w", route=Route("type", {"click": "clicks"}, "other"))
    land(store, v1, "clicks", "a1")
    old = DoneFile.from_dict(store.read_json(done_file_path("w", "clicks", HOUR)))
    assert old.rows == 2 and check_landed_hour(store, v1, PLAN).passed
    old_bytes = {f.path: store.read_bytes(f.path) for f in old.files}

    v2 = TopicConfig("web", "w", route=Route("type", {"click": "web_clicks"}, "other"))
    land(store, v2, "web_clicks", "a2")
    retired = DoneFile.from_dict(store.read_json(done_file_path("w", "clicks", HOUR)))
    assert (retired.rows, retired.files) == (0, ())
    assert "routing" in retired.retired and "a2" in retired.retired
    assert store.list(table_hour_dir("w", "clicks", HOUR), "*.avro") == []
    manifest = store.read_json(dead_letter_manifest_path("web", HOUR))
    assert manifest["tables"] == [["w", "other"], ["w", "web_clicks"]]
    assert manifest["retired"] == [["w", "clicks"]]
    assert check_landed_hour(store, v2, PLAN).passed

    # The check guards it: the old table's done file listing its rows again breaks conservation.
    store.write_json_atomic(done_file_path("w", "clicks", HOUR), old.to_dict())
    for path, body in old_bytes.items():
        store.write_atomic(path, body)
    broken = check_landed_hour(store, v2, PLAN)
    assert not broken.passed and broken.landed_rows == 4


def test_a_new_dataset_retires_the_old_one_and_a_table_routed_back_is_fed_again(tmp_path):
    store = LocalStore(str(tmp_path))
    land(store, TopicConfig("web", "w", table="events"), "events", "a1")
    land(store, TopicConfig("web", "w2", table="events"), "events", "a2")
    assert DoneFile.from_dict(store.read_json(done_file_path("w", "events", HOUR))).rows == 0
    assert DoneFile.from_dict(store.read_json(done_file_path("w2", "events", HOUR))).rows == 2
    back = TopicConfig("web", "w", table="events")
    land(store, back, "events", "a3")
    assert DoneFile.from_dict(store.read_json(done_file_path("w", "events", HOUR))).retired is None
    assert DoneFile.from_dict(store.read_json(done_file_path("w2", "events", HOUR))).rows == 0
    manifest = store.read_json(dead_letter_manifest_path("web", HOUR))
    assert (manifest["tables"], manifest["retired"]) == ([["w", "events"]], [["w2", "events"]])
    assert check_landed_hour(store, back, PLAN).passed


def test_a_retired_hour_is_marked_pending_so_the_warehouse_empties_it(tmp_path):
    """The retired done file is a load like any other (an empty hour): its marker names its
    content, so the retired-hours sensor asks for it and the warehouse drops the hour's rows."""
    store = LocalStore(str(tmp_path))
    land(store, TopicConfig("web", "w", table="clicks"), "clicks", "a1")
    rel = done_file_path("w", "clicks", HOUR)
    clear_pending(store, rel, content_sha(store.read_bytes(rel)))  # the warehouse loaded the first landing
    land(store, TopicConfig("web", "w", table="web_clicks"), "web_clicks", "a2")
    th = parse_done_path(rel)
    assert marks_of(store, th).by_hour.get(th.hour) == content_sha(store.read_bytes(rel))
    assert DoneFile.from_dict(store.read_json(rel)).retired


def test_a_retired_tables_done_file_that_cannot_be_read_is_retired_all_the_same(tmp_path):
    """Through the one reader: an old done file that is not JSON (or contradicts its path) still
    gives way to an empty retired one, so the table stops claiming the hour."""
    store = LocalStore(str(tmp_path))
    land(store, TopicConfig("web", "w", table="clicks"), "clicks", "a1")
    rel = done_file_path("w", "clicks", HOUR)
    store.write_atomic(rel, b"{not json")
    land(store, TopicConfig("web", "w", table="web_clicks"), "web_clicks", "a2")
    retired = DoneFile.from_dict(store.read_json(rel))
    assert (retired.rows, retired.files, retired.topic) == (0, (), "web") and "routing changed" in retired.retired
    assert store.list(table_hour_dir("w", "clicks", HOUR), "*.avro") == []
