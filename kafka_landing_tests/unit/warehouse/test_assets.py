"""A table's load that fails says once that nothing was loaded: the asset adds "Nothing was loaded;
the landing files are untouched." to a failure that does not already say so, and knows which do
from the error's `nothing_loaded`, set where it is raised, not from its words."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import ClassVar

import pytest
from dagster import DagsterInstance, materialize

from kafka_landing.config import TopicConfig
from kafka_landing.resources import LandingResource, SparkResource
from kafka_landing.store.local import LocalStore
from kafka_landing.warehouse.assets import build_warehouse_asset
from kafka_landing.warehouse.load import LoadError
from kafka_landing.warehouse.resources import WarehouseResource
from kafka_landing.warehouse.schema_evolution import IncompatibleSchemaError, merge_type
from kafka_landing_tests.helpers import write_hour

DS, T, H, KEY = "shop", "orders", "2026-11-20T13", "2026-11-20-13:00"
CFG = TopicConfig("orders", DS, table=T, first_hour=datetime(2026, 11, 20, tzinfo=timezone.utc))
SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}
ADDED = "Nothing was loaded; the landing files are untouched."


class Refusing:
    """A backend whose every load fails with `RefusingWarehouse.error`."""

    kind = "bigquery"

    def __init__(self, error: Exception):
        self.error = error

    def check_writable(self) -> None:
        pass

    def load_partition(self, store, done, spark, done_file=None, done_sha256=None, staged=None):
        raise self.error


class RefusingWarehouse(WarehouseResource):
    error: ClassVar[Exception | None] = None  # set by each test
    kinds: ClassVar[frozenset[str]] = frozenset({"bigquery"})

    def backend(self, store):
        return Refusing(RefusingWarehouse.error)


def failed_load(tmp_path, error: Exception) -> str:
    """The failure a load of the hour shows when its backend raises `error`."""
    store = LocalStore(str(tmp_path))
    write_hour(store, DS, T, H, [(0, 1, SCHEMA, [{"a": 1}])], topic="orders")
    RefusingWarehouse.error = error
    with DagsterInstance.ephemeral() as instance:
        result = materialize([build_warehouse_asset(CFG, T, "bigquery")], partition_key=KEY, instance=instance,
                             raise_on_error=False, resources={
                                 "landing": LandingResource(landing_root=str(tmp_path)),
                                 "warehouse": RefusingWarehouse(),
                                 "pyspark": SparkResource(remote="sc://127.0.0.1:1")})  # never opened
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.event_specific_data.error.message


def test_a_failure_that_says_what_to_do_is_shown_as_raised(tmp_path):
    said = "shop.orders 2026-11-20T13: the table was changed by hand. Nothing of the hour is in it: ALTER it back"
    message = failed_load(tmp_path, LoadError(said, nothing_loaded=True))
    assert said in message and ADDED not in message


def test_a_failure_that_does_not_say_nothing_was_loaded_is_told_so(tmp_path):
    message = failed_load(tmp_path, LoadError("shop.orders 2026-11-20T13: the load job failed"))
    assert f"shop.orders 2026-11-20T13: the load job failed. {ADDED}" in message


@pytest.mark.parametrize("old,new", [("string", "long"), ("decimal(38,0)", "decimal(38,2)")])
def test_a_schema_refusal_says_nothing_was_loaded_once(tmp_path, old, new):
    with pytest.raises(IncompatibleSchemaError) as refused:
        merge_type(old, new, "c", f"{DS}.{T} hour {H}")
    message = failed_load(tmp_path, refused.value)
    assert str(refused.value) in message and message.count("Nothing was loaded") == 1, message


# --- freshness: a deadline every hour, evaluated without a run ----------------------------

def _freshness(loads: list[datetime], now: datetime) -> str:
    """The table's freshness state as the daemon's evaluator finds it at `now`, after loads at `loads`."""
    import asyncio

    from dagster import AssetMaterialization, Definitions, ResourceDefinition
    from dagster._core.definitions.freshness_evaluator import FRESHNESS_EVALUATORS_BY_POLICY_TYPE
    from dagster._core.loader import LoadingContextForTest
    from dagster._core.test_utils import freeze_time

    from kafka_landing.warehouse.assets import warehouse_key

    cfg = TopicConfig("orders", DS, table=T, grace_minutes=10, first_hour=datetime(2026, 11, 20, tzinfo=timezone.utc))
    unused = {k: ResourceDefinition.none_resource() for k in ("landing", "warehouse", "pyspark")}
    node = Definitions(assets=[build_warehouse_asset(cfg, T)], resources=unused).resolve_asset_graph().get(
        warehouse_key(DS, T))
    policy = node.freshness_policy_or_from_metadata
    instance = DagsterInstance.ephemeral()
    for at in loads:
        with freeze_time(at):
            instance.report_runless_asset_event(AssetMaterialization(warehouse_key(DS, T), partition=KEY))
    with freeze_time(now):
        state = asyncio.run(FRESHNESS_EVALUATORS_BY_POLICY_TYPE[type(policy)]().evaluate_freshness(
            LoadingContextForTest(instance), node))
    return state.value


def _at(hh_mm: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-20T{hh_mm}:00+00:00")


# Grace 10 minutes: hour 13 closes at 14:10, the schedule ticks at 14:11, the deadline is 14:16.
@pytest.mark.parametrize("loads, now, state", [
    (["14:11:30"], "14:20", "PASS"),                # loaded seconds after its tick
    (["14:11:30"], "15:17", "FAIL"),                # hour 14 not loaded by 15:16
    (["14:11:30", "15:11:40"], "15:17", "PASS"),    # hour 14 loaded too
    (["13:11:30", "14:17"], "14:16:30", "FAIL"),    # hour 13 late: red from its deadline ...
    (["13:11:30", "14:17"], "14:20", "PASS"),       # ... until it is loaded
])
def test_a_table_is_fresh_while_each_hour_is_loaded_by_its_deadline(loads, now, state):
    loaded = [_at(t) for t in loads if _at(t) <= _at(now)]
    assert _freshness(loaded, _at(now)) == state
