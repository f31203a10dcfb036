"""A load in steps plans the schema of its whole sequence before its first job: a field new to the
table whose type widens between the steps' reader groups (a long in one schema id, a double in the
next) is loaded at its widest type from the first step on, also nested, where BigQuery could not
widen the column half way (ALTER COLUMN changes top-level columns only). Through the real
BigQueryWarehouse and the strict fake."""

from __future__ import annotations

from decimal import Decimal
from functools import partial

import pytest

from kafka_landing.warehouse.load import load_done_file
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError
from kafka_landing_tests.bigquery_support import NO_SPARK, bigquery_warehouse
from kafka_landing_tests.helpers import write_hour
from kafka_landing_tests.landed_hours import DATASET, TABLE

PROJECT = "kl-bq-swap-schema"
warehouse = partial(bigquery_warehouse, project=PROJECT)
DEC = {"type": "bytes", "logicalType": "decimal", "precision": 10}


def order(scale: int, x: str | None, nested: bool = True) -> dict:
    """An order with a decimal `v` of `scale` (two scales: two reader groups, a load in steps) and,
    unless `x` is None, a new field x of Avro type `x`, in a record `r` or at the top."""
    fields = [{"name": "order_id", "type": "string"}, {"name": "v", "type": {**DEC, "scale": scale}}]
    if x is not None:
        fields.append({"name": "r", "type": {"type": "record", "name": "R", "fields": [{"name": "x", "type": x}]}}
                      if nested else {"name": "x", "type": x})
    return {"type": "record", "name": "Order", "fields": fields}


def column(fake, path: str) -> str:
    cols = fake.schema(PROJECT, DATASET, TABLE)
    for name in path.split("."):
        col = next(c for c in cols if c["name"] == name)
        cols = col.get("fields", [])
    return col["type"]


@pytest.mark.parametrize("nested", [True, False], ids=["nested", "top-level"])
def test_a_new_field_that_widens_between_the_steps_loads_at_its_widest_type_from_the_first_step(
        fake_bigquery, nested):
    """The table exists (a day loaded before) without x. The day 2026-01-31 holds schema id 2 (scale 2,
    x long) at 13:00 and schema id 3 (scale 4, x double) at 14:00: two reader groups, two steps. The
    first step writes x as FLOAT already (its reader reads the long as a double), so the second needs
    no widening: before, the nested case was refused after the first step's job."""
    store, fake = fake_bigquery
    wh = warehouse(fake, store)
    load_done_file(wh, store, write_hour(store, DATASET, TABLE, "2026-01-30T13", [
        (0, 1, order(2, None), [{"order_id": "old", "v": Decimal("1.00")}])]), NO_SPARK)
    jobs_before = len(fake.jobs)

    def rec(oid, v, x):
        return {"order_id": oid, "v": v, **({"r": {"x": x}} if nested else {"x": x})}
    write_hour(store, DATASET, TABLE, "2026-01-31T13", [(0, 2, order(2, "long", nested), [rec("a", Decimal("1.25"), 7)])])
    last = write_hour(store, DATASET, TABLE, "2026-01-31T14", [
        (0, 3, order(4, "double", nested), [rec("b", Decimal("2.5000"), 2.5)])])

    result = load_done_file(wh, store, last, NO_SPARK)

    assert result.job_id.endswith("_swap") and len(fake.jobs) == jobs_before + 3  # two steps and a copy
    assert column(fake, "r.x" if nested else "x") == "FLOAT" and fake.ddl == []  # no column widened half way
    rows = {r["order_id"]: (r["r"]["x"] if nested else r["x"]) for r in
            fake.partition_rows(PROJECT, DATASET, TABLE, "20260131")}
    assert rows == {"a": 7.0, "b": 2.5} and isinstance(rows["a"], float)


def test_a_nested_column_the_table_holds_narrower_is_refused_before_any_job(fake_bigquery):
    """What no plan can load (the table's nested r.x is INTEGER, a file needs FLOAT) is refused before
    the first job of the sequence, not in its middle."""
    store, fake = fake_bigquery
    wh = warehouse(fake, store)
    load_done_file(wh, store, write_hour(store, DATASET, TABLE, "2026-01-30T13", [
        (0, 2, order(2, "long"), [{"order_id": "old", "v": Decimal("1.00"), "r": {"x": 1}}])]), NO_SPARK)
    jobs_before = len(fake.jobs)
    write_hour(store, DATASET, TABLE, "2026-01-31T13", [(0, 2, order(2, "long"), [
        {"order_id": "a", "v": Decimal("1.25"), "r": {"x": 7}}])])
    last = write_hour(store, DATASET, TABLE, "2026-01-31T14", [(0, 3, order(4, "double"), [
        {"order_id": "b", "v": Decimal("2.5000"), "r": {"x": 2.5}}])])
    with pytest.raises(IncompatibleSchemaError) as refused:
        load_done_file(wh, store, last, NO_SPARK)
    assert len(fake.jobs) == jobs_before and "field r.x" in str(refused.value)
    assert "day 2026-01-31" in str(refused.value) and not refused.value.transient
