"""Two runs of the same hour at once: both end, and the hour is what one run makes.

Two `dagster asset materialize` processes start together for one partition,
each freezing the slice, landing it and loading both tables. They share the
landing and warehouse roots but not a Dagster instance, so nothing in Dagster
(pools, run queues) keeps them apart: only the product's own locks and atomic
renames do, as when two deployments or a manual run and the schedule overlap.
"""

from __future__ import annotations

from kafka_landing.naming import asset_safe
from kafka_landing_tests.faults.harness import (
    check_landed_exactly,
    check_loaded_exactly,
    deployment,
    finish,
    start,
    web_topic,
)


def test_two_runs_of_one_hour_at_once_give_the_result_of_one(produce_web_hour, bootstrap, registry_url, tmp_path):
    data = produce_web_hour("concurrent")
    dep = deployment(tmp_path, {data.topic: web_topic("concurrent")}, bootstrap, registry_url)
    other = dep.with_own_instance("dagster_home_b")
    select = dep.landing_assets(data.topic) + dep.warehouse_assets(data.topic)

    runs = [start(d, select, data.hour, name=f"run_{i}") for i, d in enumerate((dep, other))]
    a, b = (finish(s) for s in runs)

    for run in (a, b):
        assert run.returncode == 0, f"a run failed next to another one: {run.failures}\n{run.tail()}"
    # One of them froze the slice; the other found it frozen and landed the same offsets.
    froze = [md["frozen_by_this_run"] for run in (a, b) for key, md in run.materialized
             if key == f"kafka_slices/{asset_safe(data.topic)}"]
    assert sorted(froze) == [False, True], f"frozen_by_this_run of the two runs: {froze}"

    on_disk = check_landed_exactly(dep, data.topic, data.hour, data.sent)
    check_loaded_exactly(dep, data.topic, data.hour, on_disk)
