"""Loads that do not fit one BigQuery load job: more files than one job may name (10,000 source URIs,
lowered here), more bytes, or schema ids that need different reader schemas (a decimal's scale or a
timestamp's unit changed in the middle of a day). Such a partition loads in steps into a scratch
table and is swapped in by one copy job; the common case stays one load job. Killed anywhere, the
load goes on from its jobs or starts over, never twice into the partition. Through the real
BigQueryWarehouse and the strict BigQuery fake over HTTP."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import partial

import pytest

from kafka_landing.naming import done_file_path, hour_from_tag, unknown_partition
from kafka_landing.handoff.manifests import content_sha
from kafka_landing.warehouse.bigquery import day_sha, partition_id, swap
from kafka_landing.warehouse.bigquery.jobs import Jobs
from kafka_landing.warehouse.bigquery.ledger import Ledger
from kafka_landing.warehouse.by_event.load import load_event_partition
from kafka_landing.warehouse.load import LoadError, load_done_file
from kafka_landing_tests.bigquery_fake import JobFailed
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse, serving_gs_folder
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.landed_hours import DATASET, ORDERS_BY_EVENT, TABLE, land_event_orders

PROJECT = "kl-bq-steps"
H13, H14, H15 = "2026-01-31T13", "2026-01-31T14", "2026-01-31T15"
DAY_ID = "20260131"
warehouse = partial(bigquery_warehouse, project=PROJECT)
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}]}


class Killed(BaseException):
    """The process dies here (no handler of the product catches it)."""


def land(store, hour: str, files: int, sid: int = 1, schema: dict = ORDER, value=None) -> str:
    """`files` landing files of one order each (Kafka partitions 0..files-1)."""
    def rec(p):
        return {"order_id": f"{hour}-{p}", **({"v": value} if value is not None else {})}
    return write_hour(store, DATASET, TABLE, hour, [(p, sid, schema, [rec(p)]) for p in range(files)])


def day_ids(fake) -> list[str]:
    return sorted(r["order_id"] for r in fake.partition_rows(PROJECT, DATASET, TABLE, DAY_ID))


def kinds(fake) -> list[tuple[str, str, int]]:
    """(job kind, destination table, source URIs) of every job, in the order they were started."""
    out = []
    for (_, jid), job in fake.jobs.items():
        config = job["resource"]["configuration"]
        kind = "copy" if "copy" in config else "load"
        dest = config[kind]["destinationTable"]["tableId"]
        out.append((kind, dest.split("__kl_scratch_")[0] + ("(scratch)" if "__kl_scratch_" in dest else ""),
                    len(config["load"]["sourceUris"]) if kind == "load" else 0))
    return out


def scratch_tables(fake) -> list[str]:
    return [t for (_, _, t) in fake.tables if "__kl_scratch_" in t]


@pytest.fixture
def small(tmp_path, monkeypatch):
    """The landing root and the fake, with BigQuery's 10,000 source URIs per load job lowered to 5."""
    monkeypatch.setattr(swap, "MAX_SOURCE_URIS", 5)
    with serving_gs_folder(tmp_path, max_source_uris=5) as served:
        yield served


# --- more files than one job may name --------------------------------------------------------------

def test_a_day_of_more_files_than_one_load_job_may_name_loads_in_steps_and_one_copy(small):
    """R3, scaled down (integration/test_bigquery_years.py loads 24 hours of 420 files): the day's
    last hour replaces the day with 9 files, one job may name 5."""
    store, fake = small
    for hour in (H13, H14):
        land(store, hour, 3)
    last = land(store, H15, 3)
    wh = warehouse(fake, store)

    result = load_done_file(wh, store, last, NO_SPARK)

    assert kinds(fake) == [("load", "t(scratch)", 5), ("load", "t(scratch)", 4), ("copy", f"t${DAY_ID}", 0)]
    assert day_ids(fake) == sorted(f"{h}-{p}" for h in (H13, H14, H15) for p in range(3))
    content = day_sha({h: content_sha(store.read_bytes(done_file_path(DATASET, TABLE, hour_from_tag(h))))
                       for h in (H13, H14, H15)})
    copy_id = [jid for (_, jid), job in fake.jobs.items() if "copy" in job["resource"]["configuration"]][0]
    assert result.job_id == copy_id and copy_id.startswith(f"kafka_landing_{DATASET}_{TABLE}_{DAY_ID}_{content[:32]}_x")
    assert copy_id.endswith("_swap")
    assert wh.loaded(DATASET, TABLE, H13)["job_id"] == copy_id and wh.loaded_sha(DATASET, TABLE, H15)
    assert [wh.partition_rows(DATASET, TABLE, h) for h in (H13, H14, H15)] == [3, 3, 3]
    assert scratch_tables(fake) == []  # dropped after the swap
    copy = fake.jobs[(PROJECT, copy_id)]["resource"]["configuration"]["copy"]
    assert copy["writeDisposition"] == "WRITE_TRUNCATE" and copy["sourceTables"][0]["tableId"].endswith(f"${DAY_ID}")

    # The day's other hours, loaded with the same content (a backfill's run), start no job.
    again = load_done_file(wh, store, done_file_path(DATASET, TABLE, hour_from_tag(H13)), NO_SPARK)
    assert again.job_id == copy_id and len(fake.jobs) == 3


def test_the_common_case_stays_one_load_job_with_its_id(small):
    store, fake = small
    land(store, H13, 2)
    last = land(store, H14, 3)
    result = load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    assert kinds(fake) == [("load", f"t${DAY_ID}", 5)] and "_x" not in result.job_id
    assert fake.calls_of("tables.patch") == 0 and scratch_tables(fake) == []


def test_a_day_of_more_bytes_than_one_load_job_may_read_loads_in_steps(fake_bigquery, monkeypatch):
    store, fake = fake_bigquery
    rel = land(store, H13, 4)
    size = max(f["bytes"] for f in store.read_json(rel)["files"])
    monkeypatch.setattr(swap, "MAX_LOAD_BYTES", 2 * size)
    load_done_file(warehouse(fake, store), store, rel, NO_SPARK)
    assert [k for k in kinds(fake)] == [("load", "t(scratch)", 2), ("load", "t(scratch)", 2),
                                        ("copy", f"t${DAY_ID}", 0)]
    assert len(day_ids(fake)) == 4


def test_the_table_takes_the_columns_the_steps_added_and_a_new_table_is_made_as_the_scratch(small):
    store, fake = small
    wide = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"},
                                                         {"name": "note", "type": ["null", "string"], "default": None}]}
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H13, 6), NO_SPARK)  # a new table, made for the copy
    assert [c["name"] for c in fake.schema(PROJECT, DATASET, TABLE)] == ["order_id"]
    assert fake.table_state(PROJECT, DATASET, TABLE)["resource"]["timePartitioning"] == {"type": "DAY"}
    load_done_file(wh, store, land(store, H14, 2, sid=2, schema=wide, value=None), NO_SPARK)
    assert [(c["name"], c["mode"]) for c in fake.schema(PROJECT, DATASET, TABLE)] == \
        [("order_id", "REQUIRED"), ("note", "NULLABLE")]
    assert fake.calls_of("tables.patch") >= 1 and len(day_ids(fake)) == 8


# --- schema ids that need different reader schemas (R4) ------------------------------------------

def _with(t: dict) -> dict:
    return {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"},
                                                         {"name": "v", "type": t}]}


DEC = {"type": "bytes", "logicalType": "decimal"}
CHANGES = {
    "decimal(10,2) -> decimal(12,4)": ({**DEC, "precision": 10, "scale": 2}, {**DEC, "precision": 12, "scale": 4},
                                       Decimal("1.25"), Decimal("1.2500"), "NUMERIC"),
    "timestamp-millis -> timestamp-micros": ({"type": "long", "logicalType": "timestamp-millis"},
                                             {"type": "long", "logicalType": "timestamp-micros"},
                                             datetime(2026, 1, 31, 13, 5, tzinfo=timezone.utc),
                                             datetime(2026, 1, 31, 14, 5, 0, 123456, tzinfo=timezone.utc),
                                             "TIMESTAMP"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_a_mid_day_change_of_scale_or_unit_loads_every_hour_of_a_day_table(fake_bigquery, change):
    """R4: the producer changes decimal(10,2) to decimal(12,4) (or millis to micros) at 14:00, a change
    the registry accepts. Each hour's load replaces the day: from 14:00 on, one load job per reader
    into a scratch table, then one copy."""
    store, fake = fake_bigquery
    old, new, v_old, v_new, column = CHANGES[change]
    wh = warehouse(fake, store)
    for hour, sid, t, v in ((H13, 1, old, v_old), (H14, 2, new, v_new), (H15, 2, new, v_new)):
        load_done_file(wh, store, land(store, hour, 1, sid=sid, schema=_with(t), value=v), NO_SPARK)
    rows = {r["order_id"]: r["v"] for r in fake.partition_rows(PROJECT, DATASET, TABLE, DAY_ID)}
    assert rows == {f"{H13}-0": v_old, f"{H14}-0": v_new, f"{H15}-0": v_new}
    assert [(c["name"], c["type"]) for c in fake.schema(PROJECT, DATASET, TABLE)] == [("order_id", "STRING"),
                                                                                     ("v", column)]
    assert kinds(fake) == [("load", f"t${DAY_ID}", 1),  # 13:00: one reader, one job
                           ("load", "t(scratch)", 1), ("load", "t(scratch)", 1), ("copy", f"t${DAY_ID}", 0),
                           ("load", "t(scratch)", 1), ("load", "t(scratch)", 2), ("copy", f"t${DAY_ID}", 0)]
    assert [wh.partition_rows(DATASET, TABLE, h) for h in (H13, H14, H15)] == [1, 1, 1]


def test_a_refusal_names_the_load_it_is_about_not_this_hour(fake_bigquery):
    """What no grouping helps (a string becoming a long) is refused before any job, and the words
    speak of the files of the day's load, not of the hour being loaded."""
    store, fake = fake_bigquery
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H13, 1, sid=1, schema=_with("string"), value="x"), NO_SPARK)
    with pytest.raises(Exception) as refused:
        load_done_file(wh, store, land(store, H14, 1, sid=2, schema=_with("long"), value=5), NO_SPARK)
    said = str(refused.value)
    assert f"day 2026-01-31 (loading hour {H14})" in said and "the files of this load hold" in said
    assert "this hour" not in said and refused.value.transient is False and len(fake.jobs) == 1


def test_an_hour_of_two_scales_in_a_table_by_hour_loads_too(fake_bigquery):
    """A table made by HOUR before days: an hour holding both scales was refused; now two steps."""
    from google.cloud import bigquery
    store, fake = fake_bigquery
    client = fake.client(PROJECT)
    client.create_dataset(bigquery.Dataset(f"{PROJECT}.{DATASET}"))
    table = bigquery.Table(f"{PROJECT}.{DATASET}.{TABLE}")
    table.time_partitioning = bigquery.TimePartitioning(type_="HOUR")
    client.create_table(table)
    old, new, v_old, v_new, _ = CHANGES["decimal(10,2) -> decimal(12,4)"]
    rel = write_hour(store, DATASET, TABLE, H14, [(0, 1, _with(old), [{"order_id": "a", "v": v_old}]),
                                                  (1, 2, _with(new), [{"order_id": "b", "v": v_new}])])
    load_done_file(warehouse(fake, store), store, rel, NO_SPARK)
    got = {r["order_id"]: r["v"] for r in fake.partition_rows(PROJECT, DATASET, TABLE, partition_id(H14))}
    assert got == {"a": v_old, "b": v_new} and kinds(fake)[-1] == ("copy", "t$2026013114", 0)


# --- killed anywhere -----------------------------------------------------------------------------

def _kill_on(monkeypatch, cls, name: str, nth: int) -> None:
    """The process dies at the `nth` call of cls.name (before it runs)."""
    real, calls = getattr(cls, name), []

    def dying(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == nth:
            raise Killed(f"{name} #{nth}")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(cls, name, dying)


@pytest.mark.parametrize("dies_at", [("wait", 1), ("wait", 2), ("wait", 3)],
                         ids=["first step started", "second step started", "copy started"])
def test_a_load_killed_half_way_goes_on_from_its_jobs_and_starts_none_twice(small, monkeypatch, dies_at):
    store, fake = small
    for hour in (H13, H14):
        land(store, hour, 3)
    last = land(store, H15, 3)
    with monkeypatch.context() as m:
        _kill_on(m, Jobs, *dies_at)
        with pytest.raises(Killed):
            load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    started = set(fake.jobs)
    load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    assert len(day_ids(fake)) == 9
    assert started <= set(fake.jobs) and len(fake.jobs) == 3  # the same three jobs, each once
    assert scratch_tables(fake) == []


def test_a_load_killed_after_its_copy_is_recorded_by_the_next_without_loading_again(small, monkeypatch):
    """Killed between the copy and the ledger: the ledger names the copy as the partition's last job
    started, so the next load of the content meets it done and records it."""
    store, fake = small
    for hour in (H13, H14):
        land(store, hour, 3)
    last = land(store, H15, 3)
    with monkeypatch.context() as m:
        _kill_on(m, Ledger, "write", 1)
        with pytest.raises(Killed):
            load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    assert len(day_ids(fake)) == 9  # swapped in already
    result = load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    assert result.job_id.endswith("_swap") and len(fake.jobs) == 3 and scratch_tables(fake) == []
    assert warehouse(fake, store).loaded(DATASET, TABLE, H13)["job_id"] == result.job_id


def test_a_copy_done_before_a_later_load_is_not_taken_for_this_loads(small):
    """Content A swapped in, then B loaded, then A again (a re-land undone): A's copy is met done, but
    the partition holds B now; a new attempt loads A again."""
    store, fake = small
    for hour in (H13, H14):
        land(store, hour, 3)
    a = land(store, H15, 3)
    content_a = store.read_bytes(a)
    wh = warehouse(fake, store)
    first = load_done_file(wh, store, a, NO_SPARK)
    load_done_file(wh, store, land(store, H15, 1), NO_SPARK)  # B: 7 files, one job
    assert len(day_ids(fake)) == 7
    store.write_atomic(a, content_a)  # A's done file again (its files are still there): A's content
    again = load_done_file(wh, store, a, NO_SPARK)
    assert again.job_id == first.job_id + "_r1" and len(day_ids(fake)) == 9
    assert wh.loaded(DATASET, TABLE, H15)["earlier_jobs"][0]["job_id"] == first.job_id


def test_a_scratch_table_left_by_a_killed_load_expires_and_the_load_starts_over(small, monkeypatch):
    store, fake = small
    for hour in (H13, H14):
        land(store, hour, 3)
    last = land(store, H15, 3)
    with monkeypatch.context() as m:
        _kill_on(m, Jobs, "start", 3)  # both steps done, the copy not started
        with pytest.raises(Killed):
            load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    [left] = scratch_tables(fake)
    resource = fake.tables[(PROJECT, DATASET, left)]["resource"]
    expires = int(resource["expirationTime"]) / 1000 - datetime.now(timezone.utc).timestamp()
    assert swap.SCRATCH_EXPIRATION - timedelta(minutes=1) < timedelta(seconds=expires) <= swap.SCRATCH_EXPIRATION
    resource["expirationTime"] = "1"  # its time came: BigQuery deletes it
    result = load_done_file(warehouse(fake, store), store, last, NO_SPARK)
    assert scratch_tables(fake) == [] and len(day_ids(fake)) == 9 and result.job_id.endswith("_swap_r1")
    assert "holds 0 rows, the manifests list 9" in warehouse(fake, store).loaded(DATASET, TABLE, H15)[
        "earlier_jobs"][0]["why"]


def test_a_load_of_other_content_waits_for_a_killed_loads_job_and_deletes_its_scratch(tmp_path, monkeypatch):
    monkeypatch.setattr(swap, "MAX_SOURCE_URIS", 5)
    with serving_gs_folder(tmp_path, max_source_uris=5, running_polls=2) as (store, fake):
        for hour in (H13, H14):
            land(store, hour, 3)
        last = land(store, H15, 3)
        with monkeypatch.context() as m:
            _kill_on(m, Jobs, "wait", 2)  # the second step is running, its loader gone
            with pytest.raises(Killed):
                load_done_file(warehouse(fake, store), store, last, NO_SPARK)
        [left] = scratch_tables(fake)
        relanded = land(store, H14, 1)  # other content: 7 files, one job
        load_done_file(warehouse(fake, store), store, relanded, NO_SPARK)
        assert scratch_tables(fake) == [] and len(day_ids(fake)) == 7
        assert fake.overlaps == []  # the new job never ran beside the killed load's


def test_a_table_another_load_changed_during_the_steps_is_loaded_by_the_next_attempt(small, monkeypatch):
    """Another day's load adds a column while this day's steps run: the table cannot take the
    scratch table's schema any more, so the next attempt makes a scratch table from the table as it
    is then, and swaps that in."""
    from google.cloud import bigquery
    store, fake = small
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, "2026-01-30T00", 1), NO_SPARK)  # the table exists
    for hour in (H13, H14):
        land(store, hour, 3)
    last = land(store, H15, 3)
    real, changed = swap._Attempt._table_as_scratch, []

    def another_load_meanwhile(self):
        if not changed:
            client = fake.client(PROJECT)
            table = client.get_table(f"{PROJECT}.{DATASET}.{TABLE}")
            table.schema = [*table.schema, bigquery.SchemaField("extra", "STRING")]
            client.update_table(table, ["schema"])
            changed.append(1)
        return real(self)
    monkeypatch.setattr(swap._Attempt, "_table_as_scratch", another_load_meanwhile)
    result = load_done_file(wh, store, last, NO_SPARK)
    assert result.job_id.endswith("_swap_r1") and len(day_ids(fake)) == 9 and scratch_tables(fake) == []
    [why] = [e["why"] for e in wh.loaded(DATASET, TABLE, H15)["earlier_jobs"]]
    assert "the table changed while this load ran" in why and "extra is missing" in why
    assert [c["name"] for c in fake.schema(PROJECT, DATASET, TABLE)] == ["order_id", "extra"]


def test_a_step_that_fails_replaces_nothing_and_leaves_no_scratch_table(small):
    store, fake = small
    wh = warehouse(fake, store)
    load_done_file(wh, store, land(store, H13, 2), NO_SPARK)
    land(store, H14, 3)
    last = land(store, H15, 3)
    real = fake._load

    def second_step_fails(ref, load):  # BigQuery fails the job, for a reason of its own
        if "__kl_scratch_" in load["destinationTable"]["tableId"] and load["writeDisposition"] == "WRITE_APPEND":
            raise JobFailed("invalid", "Error while reading data, error message: something BigQuery did not like")
        return real(ref, load)
    fake._load = second_step_fails
    with pytest.raises(LoadError) as failed:
        load_done_file(wh, store, last, NO_SPARK)
    said = str(failed.value)
    assert "2of2 failed" in said and f"Nothing was replaced: {PROJECT}.{DATASET}.{TABLE}${DAY_ID} holds what it " \
        "held before" in said and not failed.value.transient
    assert len(day_ids(fake)) == 2 and scratch_tables(fake) == []
    assert "running_job" not in store.read_json(f"warehouse_loads/bigquery/{DATASET}/{TABLE}/day=2026-01-31.json")


# --- event partitions ----------------------------------------------------------------------------

def test_an_event_day_of_more_files_than_one_job_may_name_loads_in_steps(small):
    store, fake = small
    cfg = ORDERS_BY_EVENT
    events = [f"2026-01-31T{h:02d}" for h in range(10, 14)]
    for n, hour in enumerate(("2026-01-31T13", "2026-01-31T14")):
        land_event_orders(store, hour, {e: [f"{hour}-{e}"] for e in events}, first=1000 * (n + 1))
    loaded = load_event_partition(warehouse(fake, store), store, cfg, cfg.table, "2026-01-31", NO_SPARK)
    assert loaded.result.rows == 8
    assert kinds(fake) == [("load", "orders__by_event(scratch)", 5), ("load", "orders__by_event(scratch)", 3),
                           ("copy", "orders__by_event$20260131", 0)]
    assert len(fake.partition_rows(PROJECT, cfg.dataset, "orders__by_event", "20260131")) == 8
    assert scratch_tables(fake) == []


def test_the_records_with_no_event_time_load_in_steps_into_their_landing_day(small):
    store, fake = small
    cfg = ORDERS_BY_EVENT
    for n in range(7):
        land_event_orders(store, f"2026-01-31T{n:02d}", {None: [f"n{n}"]}, first=1000)
    loaded = load_event_partition(warehouse(fake, store), store, cfg, cfg.table, unknown_partition(H13), NO_SPARK)
    assert loaded.result.rows == 7
    assert kinds(fake) == [("load", "orders__by_event_unknown(scratch)", 5),
                           ("load", "orders__by_event_unknown(scratch)", 2),
                           ("copy", "orders__by_event_unknown$20260131", 0)]
    assert len(fake.partition_rows(PROJECT, cfg.dataset, "orders__by_event_unknown", "20260131")) == 7
