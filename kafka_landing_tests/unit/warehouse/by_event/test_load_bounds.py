"""What event partitions cost as history grows: a year of hourly landing hours, each bringing records
with no event time (and sentinel times), versioned and loaded hour by hour as the event sensor would.
Counted in store calls and in files a load names (an in-memory landing root, a warehouse that records
what it is asked to load), never in wall time: each version, each load and each manifest is bounded by
what the partition holds, whatever the history."""

from __future__ import annotations

from kafka_landing.handoff import markers
from kafka_landing.handoff.units import EVENT
from kafka_landing.naming import Hour, event_partition_dir
from kafka_landing.warehouse.backend import LoadResult, Warehouse
from kafka_landing.warehouse.by_event.load import load_event_partition
from kafka_landing.warehouse.by_event.measures import event_conservation
from kafka_landing_tests.landed_hours import ORDERS_BY_EVENT as CFG, land_event_orders
from kafka_landing_tests.mem_store import MemStore

DS, T = CFG.dataset, CFG.table
FIRST = Hour("2025-01-01T00")
YEAR = 365 * 24


class RecordingWarehouse(Warehouse):
    """A warehouse that holds what it is asked to load as records: (partition, files named, rows)."""

    kind = "recording"

    def __init__(self):
        self.held: dict[tuple[str, str, str], dict] = {}
        self.loads: list[tuple[str, int, int]] = []

    def by_event(self, granularity, field):
        return self

    def load_partition(self, store, manifest, spark, done_file=None, done_sha256=None, staged=None):
        self.loads.append((manifest.partition, len(manifest.landed_files), manifest.rows))
        self.held[(manifest.dataset, manifest.target, manifest.partition)] = {"sha256": done_sha256,
                                                                              "rows": manifest.rows}
        return LoadResult(f"{manifest.dataset}.{manifest.target}", manifest.partition, manifest.rows,
                          len(manifest.landed_files), tuple(manifest.schema_ids), (), "here", done_file, done_sha256)

    def partition_rows(self, dataset, table, partition):
        return (self.held.get((dataset, table, partition)) or {}).get("rows") or None

    def partition_location(self, dataset, table, partition):
        return f"{dataset}.{table}/{partition}"

    def loaded(self, dataset, table, partition):
        return self.held.get((dataset, table, partition))

    def loaded_partitions(self, dataset, table):
        return {p for d, t, p in self.held if (d, t) == (dataset, table)}

    def check_writable(self):
        return None


def no_spark():
    raise AssertionError("the recording warehouse starts no Spark")


def unknown(partition: str) -> bool:
    return partition.startswith("__unknown__")


def loaded_hour_by_hour(n: int) -> bool:
    """The year's first and last weeks are loaded hour by hour, as the event sensor loads what each
    landing hour marks; the weeks between once a day, as after a backfill (what a test can afford)."""
    return n < WEEK or n >= YEAR - WEEK or n % 24 == 23


WEEK = 7 * 24


def test_a_year_of_landing_hours_with_no_event_time_keeps_every_version_load_and_manifest_bounded():
    store, warehouse = MemStore(), RecordingWarehouse()
    costs = {}  # landing hour -> (store calls, version, files named, versions kept, manifest bytes) of its unknown load
    for n in range(YEAR):
        hour = FIRST.plus(n)
        land_event_orders(store, hour, {None: [f"n{n}"], hour: [f"e{n}"]}, first=1000 + 10 * n)
        if not loaded_hour_by_hour(n):
            continue
        for unit in markers.list_units(store, EVENT, [(DS, T)]):  # what the event sensor requests
            before, loads = store.total_calls, len(warehouse.loads)
            ev = load_event_partition(warehouse, store, CFG, T, unit.partition, no_spark)
            if unknown(unit.partition):
                kept = store.list(event_partition_dir(DS, T, unit.partition), "v=*.json")
                named = warehouse.loads[-1][1] if len(warehouse.loads) > loads else 0
                costs[n] = (store.total_calls - before, ev.manifest.version, named, len(kept),
                            sum(len(store.files[rel]) for rel in kept))
    first_week = [c for n, c in costs.items() if n < WEEK]
    last_week = [c for n, c in costs.items() if n >= YEAR - WEEK]
    assert len(first_week) == len(last_week) == WEEK
    # A version lists at most one landing day's files, whatever came before; so does every load.
    assert max(c[1] for c in costs.values()) <= 24 and max(c[2] for c in costs.values()) <= 24
    # At most two versions of a partition are kept, and their bytes are a day's files, not a year's.
    assert max(c[3] for c in costs.values()) <= 2
    assert max(c[4] for c in last_week) <= 1.1 * max(c[4] for c in first_week)
    # A load at the end of the year costs the store calls it cost in the first week.
    assert max(c[0] for c in last_week) <= max(c[0] for c in first_week)
    # Every landing hour's rows in exactly one event partition, as the warehouse holds them.
    last = FIRST.plus(YEAR - 1)
    c = event_conservation(store, warehouse, CFG, T, f"__unknown__{last.day}")
    assert c.ok and c.metadata["no_event_time_rows"] == 24, c.why
