"""`make demo`: produce demo data (once), land the last closed hours through the
Dagster instance in $DAGSTER_HOME, and print a per-hour summary. The Makefile
then opens the UI on the same instance, where the runs and metadata show."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from confluent_kafka.admin import AdminClient
from dagster import AssetSelection, DagsterInstance, materialize

from kafka_landing import devstack
from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing.demo.generate import ORDERS, WEB, demo_hours, generate
from kafka_landing.naming import hour_key

HOURS = int(os.environ.get("DEMO_HOURS", "3"))
PER_HOUR = int(os.environ.get("DEMO_PER_HOUR", "600"))


def _demo_data_present(bootstrap: str) -> bool:
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return ORDERS in topics and WEB in topics


def _metadata_value(event, name):
    md = event.materialization.metadata
    return md[name].value if name in md else None


def main() -> None:
    now = datetime.now(timezone.utc)
    if _demo_data_present(devstack.BOOTSTRAP):
        print("demo topics exist already: reusing their data (`make demo-reset` starts over)")
    else:
        sent = generate(devstack.BOOTSTRAP, devstack.REGISTRY_URL, hours=HOURS, per_hour=PER_HOUR, now=now)
        print(f"produced {len(sent.records)} records to {ORDERS} and {WEB} over the last {HOURS} closed hours")

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    landing_keys = AssetSelection.groups("kafka_slices", "avro_landing").resolve(graph)
    assets = [defs.get_assets_def(k) for k in sorted(landing_keys)]
    instance = DagsterInstance.get()
    rows = []
    for hour in demo_hours(now, HOURS):
        result = materialize(assets, instance=instance, partition_key=hour_key(hour), resources=build_resources(),
                             tags={"kafka_landing/source": "make-demo"})
        for ev in result.get_asset_materialization_events():
            rows.append((hour_key(hour), ev.asset_key.to_user_string(), _metadata_value(ev, "dagster/row_count")))
    print(f"\n{'hour':<18} {'asset':<40} {'rows':>8}")
    for hour, key, n in rows:
        print(f"{hour:<18} {key:<40} {n if n is not None else '':>8}")


if __name__ == "__main__":
    main()
