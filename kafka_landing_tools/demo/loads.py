"""Run the sensors' requests in this process, as the daemon would launch them (the done-file
sensor's loads, the event sensor's, the settled sensor's check-only runs):
for the demo, the benchmark and the tests (the product's runs are launched by the daemon)."""

from __future__ import annotations

from dagster import RunRequest, materialize

from kafka_landing.definitions import build_resources
from kafka_landing.hours import CONSERVATION
from kafka_landing.warehouse.queue.runs import RUN_KEY_TAG
from kafka_landing.warehouse.sensors import SENSOR_NAME


def load_run_defs(defs, keys, checks: tuple[str, ...] = (CONSERVATION,)) -> list:
    """What `materialize()` needs to run a load as the sensor's run would: the tables'
    assets and their named checks (checks are separate definitions)."""
    keys = set(keys)
    return [*(defs.get_assets_def(k) for k in sorted(keys)),
            *(defs.get_asset_checks_def(ck) for ck in sorted(defs.resolve_asset_graph().asset_check_keys)
              if ck.asset_key in keys and ck.name in checks)]


def run_load_request(defs, request: RunRequest, instance, resources: dict | None = None, raise_on_error: bool = True):
    """Run one of this sensor's requests in this process, as the daemon would launch it: the
    table's asset and conservation check, its hour or hour range, its tags, run key and sensor
    name (so the next tick sees the run). For tests, the demo and the benchmark."""
    return materialize(load_run_defs(defs, request.asset_selection), partition_key=request.partition_key,
                       resources=resources if resources is not None else build_resources(), instance=instance,
                       raise_on_error=raise_on_error,
                       tags={**request.tags, RUN_KEY_TAG: request.run_key, "dagster/sensor_name": SENSOR_NAME})


def run_event_requests(defs, result, instance, resources: dict | None = None, raise_on_error: bool = True) -> list:
    """Apply an event sensor tick's result in this process, as the daemon would: add the event
    partitions it names, then run each of its requests with the event-time table's checks. Returns
    the runs' results, in request order."""
    from kafka_landing.warehouse.checks import CONSERVATION_BY_EVENT, SETTLED
    from kafka_landing.warehouse.sensors import EVENT_SENSOR_NAME

    for add in result.dynamic_partitions_requests or ():
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    job = defs.resolve_implicit_global_asset_job_def()
    checks = defs.resolve_asset_graph().asset_check_keys
    out = []
    for req in result.run_requests or ():
        # A request for several tables names its day by Dagster's partition tag (each event table has
        # partitions of its own), which the steps read as the daemon's run does.
        keys = set(req.asset_selection)
        subset = job.get_subset(asset_selection=keys, asset_check_selection={
            ck for ck in checks if ck.asset_key in keys and ck.name in (CONSERVATION_BY_EVENT, SETTLED)})
        out.append(subset.execute_in_process(
            instance=instance, raise_on_error=raise_on_error, partition_key=req.partition_key,
            resources=resources if resources is not None else build_resources(),
            tags={**req.tags, RUN_KEY_TAG: req.run_key, "dagster/sensor_name": EVENT_SENSOR_NAME}))
    return out


def run_check_requests(defs, result, instance, resources: dict | None = None, raise_on_error: bool = True) -> list:
    """Run a settled sensor tick's check-only requests in this process, as the daemon would launch
    them: the asset job cut to the requested checks (no asset), on the request's partition, with its
    tags, run key and sensor name. `resources`: over the code location's. Returns the runs' results,
    in request order."""
    from kafka_landing.warehouse.sensors import SETTLED_SENSOR_NAME

    job = defs.resolve_implicit_global_asset_job_def()
    return [job.get_subset(asset_selection=set(), asset_check_selection=set(req.asset_check_keys)).execute_in_process(
                instance=instance, resources=resources, raise_on_error=raise_on_error,
                tags={**req.tags, RUN_KEY_TAG: req.run_key, "dagster/sensor_name": SETTLED_SENSOR_NAME})
            for req in result.run_requests or ()]
