"""Landed hours of a shop's orders, as the warehouse's tests land them (through `helpers.write_hour`
and `helpers.write_event_hour`, the one builder of landed hours): orders of table shop.t by landing
hour (`land_orders`), and orders of topic "orders" with an event time (`land_event_orders`, the
topic's config `ORDERS_BY_EVENT`), also as releases before the unknown partitions were split by
landing day cut and loaded them (`events_cut_as_before`, `load_event_partition_as_before`)."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from unittest import mock

from kafka_landing.config import TopicConfig
from kafka_landing_tests.helpers import write_event_hour, write_hour

# --- orders by landing hour ------------------------------------------------------------------------

DATASET, TABLE = "shop", "t"
ORDER_FIELDS = [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "long"}]


def land_orders(store, hour: str, ids: list[str], partition: int = 0) -> str:
    """Landing hour `hour` of DATASET.TABLE: one file of Kafka partition `partition`, schema id 1, an order
    per id (its amount its place in `ids`), or no file when `ids` is empty; the done file's path."""
    schema = {"type": "record", "name": "Order", "fields": ORDER_FIELDS}
    records = [{"order_id": i, "amount": n} for n, i in enumerate(ids)]
    return write_hour(store, DATASET, TABLE, hour, [(partition, 1, schema, records)] if ids else [])


# --- orders with an event time ---------------------------------------------------------------------

ORDERS_BY_EVENT = TopicConfig(topic="orders", dataset="shop", table="orders", event_time_field="created_at")
ORDER_WITH_EVENT_TIME = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "created_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}]}


def at(tag: str, minute: int = 7) -> datetime:
    """A time inside the hour `tag` (YYYY-MM-DDTHH, UTC)."""
    return datetime.strptime(tag, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc) + timedelta(minutes=minute)


def orders(event_hour: str | None, *ids: str) -> list[dict]:
    """An order per id, created in `event_hour` (None: no event time)."""
    return [{"order_id": i, "created_at": at(event_hour) if event_hour else None} for i in ids]


def land_event_orders(store, hour: str, spread: dict[str | None, list[str]], first: int = 1000) -> str:
    """Landing hour `hour` of ORDERS_BY_EVENT's table, its event partitions marked: `spread` is
    {event hour or None: order ids}, one file each, offsets from `first`; the done file's path."""
    cfg = ORDERS_BY_EVENT
    return write_event_hour(store, cfg.dataset, cfg.table, hour, {e: orders(e, *ids) for e, ids in spread.items()},
                            ORDER_WITH_EVENT_TIME, topic=cfg.topic, first=first)


# --- event partitions as releases before the split made them ---------------------------------------

def cut_as_before(event_hour: str | None, granularity: str, landing_hour: str) -> str:
    """How releases before cut a file into an event partition: no event time -> the single __unknown__,
    any event time (sentinels too) -> its day or hour."""
    from kafka_landing.naming import UNKNOWN_EVENT, Hour

    if event_hour is None:
        return UNKNOWN_EVENT
    return Hour(event_hour).day if granularity == "day" else Hour(event_hour)


@contextmanager
def events_cut_as_before():
    """Landing hours published (indexed, marked) and partitions versioned as releases before did."""
    with mock.patch("kafka_landing.handoff.event_index.event_partition", cut_as_before):
        yield


def load_event_partition_as_before(backend, store, partition: str, cfg: TopicConfig = ORDERS_BY_EVENT,
                                   spark=lambda: None):
    """A load of an event partition as releases before made it (no hand-over): version it, load it into
    `backend` (the event-time backend; `spark`, for one that needs it), clear the markers it saw. Under
    `events_cut_as_before`."""
    from kafka_landing.warehouse.by_event.versions import next_manifest
    from kafka_landing.handoff import markers
    from kafka_landing.handoff.units import event_unit
    from kafka_landing.naming import event_lock_path

    with store.lock(event_lock_path(cfg.dataset, cfg.table, partition)) as held:
        unit = event_unit(cfg.dataset, cfg.table, partition)
        m, _, seen = next_manifest(store, held, unit, cfg.event_granularity)
    backend.load_partition(store, m, spark, done_file=m.path, done_sha256=m.sha256)
    markers.clear(store, unit, seen)
    return m
