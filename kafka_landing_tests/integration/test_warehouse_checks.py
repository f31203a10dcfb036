"""The warehouse checks can fail: `conservation` re-run for one hour after another writer of the
table truncated, doubled or dropped the hour's rows, or a landed file went missing; `hours_behind`
when closed hours are not loaded (landed or not)."""

from __future__ import annotations

import pyarrow as pa
from dagster import AssetCheckKey, AssetCheckSeverity, materialize
from pyiceberg.expressions import EqualTo

from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing_tools.demo.loads import load_run_defs
from kafka_landing.naming import ONE_HOUR, hour_from_tag, hour_key, hour_tag, last_closed_hour
from kafka_landing.warehouse.assets import warehouse_key
from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.integration.test_sensor import (  # noqa: F401 - fixtures
    DATASET,
    TABLE,
    avro_file,
    done_body,
    hours_ago,
    publish,
    roots,
    table_ids,
)
from kafka_landing_tests.sensor_ticks import tick

KEY = warehouse_key(DATASET, TABLE)


def evaluations(result) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def run_check(defs, instance, name: str, partition: str | None = None):
    """Run one check alone, as the UI's "Execute" on a check (for one partition) does."""
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(), asset_check_selection={AssetCheckKey(KEY, name)})
    result = job.execute_in_process(instance=instance, partition_key=partition, raise_on_error=False)
    assert result.success, "a failing check is a check result, not a failed run"
    (ev,) = result.get_asset_check_evaluations()
    return ev


def rewrite_hour(warehouse, hour, rows: pa.Table | None) -> None:
    """The hour's rows in the table replaced by `rows` (None: dropped), as another writer of the
    Iceberg table would: a pyiceberg commit of its own, which no load made."""
    t = IcebergWarehouse(str(warehouse)).table(DATASET, TABLE)
    if rows is None:
        t.delete(EqualTo("hour", hour_tag(hour)))
    else:
        t.overwrite(rows, overwrite_filter=EqualTo("hour", hour_tag(hour)))


def hour_rows(warehouse, hour) -> pa.Table:
    t = IcebergWarehouse(str(warehouse)).table(DATASET, TABLE)
    return t.scan(row_filter=EqualTo("hour", hour_tag(hour))).to_arrow()


def load(defs, instance, hour, checks=("conservation",)):
    result = materialize(load_run_defs(defs, [KEY], checks), partition_key=hour_key(hour),
                         resources=build_resources(), instance=instance)
    assert result.success
    return evaluations(result)


def test_conservation_fails_when_what_it_guards_is_broken(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    h = hours_ago(3)
    files = [avro_file(landing, h, 0, 5), avro_file(landing, h, 5, 3)]
    publish(landing, h, done_body(h, files))
    (req,) = tick(defs, instance).run_requests  # the sensor's run includes the check
    ev = load(defs, instance, h)["conservation"]
    assert ev.passed and ev.metadata["warehouse_rows"].value == 8 and ev.metadata["landed_rows"].value == 8
    assert run_check(defs, instance, "conservation", hour_key(h)).passed

    table, ours = hour_rows(warehouse, h), IcebergWarehouse(str(warehouse)).table(DATASET, TABLE).current_snapshot()
    rewrite_hour(warehouse, h, table.slice(0, 6))  # truncated: two rows lost
    ev = run_check(defs, instance, "conservation", hour_key(h))
    assert not ev.passed and ev.severity == AssetCheckSeverity.ERROR
    assert ev.metadata["warehouse_rows"].value == 6 and ev.metadata["landed_rows"].value == 8
    assert "6 rows in the warehouse, 8 landed" in ev.description and f"where hour = '{hour_tag(h)}'" in ev.description

    rewrite_hour(warehouse, h, pa.concat_tables([table, table.slice(0, 1)]))  # replaced: a row twice
    assert not run_check(defs, instance, "conservation", hour_key(h)).passed

    rewrite_hour(warehouse, h, None)  # the hour's rows gone
    ev = run_check(defs, instance, "conservation", hour_key(h))
    assert not ev.passed and "is missing, the load recorded 8 rows" in ev.description

    # Put back as the load left it (the table's own time travel); a reload of the same content is no
    # new commit (a load killed after its commit must not commit twice), so it is what an operator does.
    with IcebergWarehouse(str(warehouse)).table(DATASET, TABLE).manage_snapshots() as snapshots:
        snapshots.set_current_snapshot(ours.snapshot_id)
    assert run_check(defs, instance, "conservation", hour_key(h)).passed
    assert table_ids(warehouse) == list(range(8))

    (landing / files[1]["path"]).unlink()  # a landed file lost: the landed rows cannot be counted
    ev = run_check(defs, instance, "conservation", hour_key(h))
    assert not ev.passed and files[1]["path"] in ev.description


def test_conservation_of_an_hour_not_loaded_or_not_landed_fails(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    h = hours_ago(3)
    ev = run_check(defs, instance, "conservation", hour_key(h))
    assert not ev.passed and "no done file" in ev.description
    publish(landing, h, done_body(h, [avro_file(landing, h, 0, 2)]))
    ev = run_check(defs, instance, "conservation", hour_key(h))
    assert not ev.passed and "not loaded yet (2 rows landed)" in ev.description


def expected_missing(ev, loaded: set) -> list[str]:
    """The closed hours not loaded from the first landed hour to the check's own "now"."""
    first, last = hour_from_tag(ev.metadata["first_landed_hour"].value), hour_from_tag(ev.metadata["last_closed_hour"].value)
    return [hour_tag(first + ONE_HOUR * i) for i in range(int((last - first) / ONE_HOUR) + 1)
            if hour_tag(first + ONE_HOUR * i) not in loaded]


def test_hours_behind_counts_closed_hours_not_loaded(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    last = last_closed_hour(utcnow(), 5)  # the test config's grace is 5 minutes
    hours = [last - ONE_HOUR * i for i in reversed(range(5))]
    for i, h in enumerate(hours):
        if h != hours[3]:  # hours[3] did not land (yet): behind all the same
            publish(landing, h, done_body(h, [avro_file(landing, h, 10 * i, 2)]))

    ev = run_check(defs, instance, "hours_behind")
    assert not ev.passed and ev.severity == AssetCheckSeverity.WARN
    assert ev.metadata["first_landed_hour"].value == hour_tag(hours[0])
    assert ev.metadata["last_closed_hour"].value in (hour_tag(last), hour_tag(last + ONE_HOUR))
    assert ev.metadata["hours_behind"].value == len(expected_missing(ev, set())) >= 5
    assert ev.metadata["reload_pending"].value == 4

    loaded = set()
    for h in (hours[0], hours[2]):
        ev = load(defs, instance, h, checks=("conservation", "hours_behind"))["hours_behind"]
        loaded.add(hour_tag(h))
    assert not ev.passed
    assert ev.metadata["missing_hours"].value == expected_missing(ev, loaded)
    assert {hour_tag(hours[1]), hour_tag(hours[3]), hour_tag(hours[4])} <= set(ev.metadata["missing_hours"].value)
    assert ev.metadata["oldest_missing_hour"].value == hour_tag(hours[1])
    assert "closed hour(s) behind (oldest" in ev.description

    publish(landing, hours[3], done_body(hours[3], [avro_file(landing, hours[3], 30, 2)]))
    for h in (hours[1], hours[3], hours[4]):
        ev = load(defs, instance, h, checks=("hours_behind",))["hours_behind"]
        loaded.add(hour_tag(h))
    if ev.metadata["last_closed_hour"].value == hour_tag(last):  # the next hour did not close meanwhile
        assert ev.passed and ev.metadata["hours_behind"].value == 0 and ev.metadata["reload_pending"].value == 0
    else:
        assert ev.metadata["missing_hours"].value == [hour_tag(last + ONE_HOUR)]
    assert table_ids(warehouse) == [0, 1, 10, 11, 20, 21, 30, 31, 40, 41]


def test_hours_behind_of_a_table_nothing_landed_for(roots, instance):
    roots()
    ev = run_check(build_definitions(), instance, "hours_behind")
    assert ev.passed and ev.metadata["hours_behind"].value == 0 and "nothing landed yet" in ev.description


def test_conservation_over_a_range_loaded_in_one_run(roots, instance, spark):
    landing, warehouse = roots()
    defs = build_definitions()
    hours = [hours_ago(4), hours_ago(3)]
    for i, h in enumerate(hours):
        publish(landing, h, done_body(h, [avro_file(landing, h, 10 * i, 2 + i)]))
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={KEY}, asset_check_selection={AssetCheckKey(KEY, "conservation")})
    result = job.execute_in_process(instance=instance, tags={
        "dagster/asset_partition_range_start": hour_key(hours[0]),
        "dagster/asset_partition_range_end": hour_key(hours[1])})
    assert result.success and len(instance.get_runs()) == 1
    by_hour = {e.partition: e for e in result.get_asset_check_evaluations() if e.check_name == "conservation"}
    assert sorted(by_hour) == [hour_key(h) for h in hours], "one result per hour, on its hour"
    assert all(e.passed for e in by_hour.values())
    assert by_hour[hour_key(hours[1])].metadata["warehouse_rows"].value == 3
    rewrite_hour(warehouse, hours[1], hour_rows(warehouse, hours[1]).slice(0, 1))
    assert run_check(defs, instance, "conservation", hour_key(hours[0])).passed
    assert not run_check(defs, instance, "conservation", hour_key(hours[1])).passed
    assert not tick(defs, instance).run_requests, "the range's loads cleared their markers"
