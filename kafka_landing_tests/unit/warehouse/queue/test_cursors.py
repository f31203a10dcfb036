"""The sensors' cursors: what one tick keeps the next reads back, in the format earlier releases
wrote (`"v": 4`); a cursor this release cannot read starts over, field by field."""

from __future__ import annotations

import json

from kafka_landing.warehouse.queue.cursors import cursor_json, queue_cursor, scan_position
from kafka_landing.warehouse.queue.reconcile import ScanPosition, TableScan
from kafka_landing.warehouse.queue.tick import Cursor

POSITION = ScanPosition("shop.orders", {"shop.orders": TableScan(1_800_000_000.0, ((10, 12), (15, 15)))})


def test_the_done_file_sensors_cursor_holds_the_reconciliation_then_the_queue():
    raw = cursor_json(POSITION, queue=Cursor("shop/orders/2026-01-31T13"))
    assert json.loads(raw) == {"v": 4, "reconcile": POSITION.to_json(), "queue": {"after": "shop/orders/2026-01-31T13"}}
    assert list(json.loads(raw)) == ["v", "reconcile", "queue"]
    assert scan_position(raw) == POSITION and queue_cursor(raw) == Cursor("shop/orders/2026-01-31T13")


def test_a_sensor_of_several_kinds_keeps_a_queue_cursor_per_kind_in_the_order_given():
    raw = cursor_json(hours=Cursor("a"), events=Cursor())
    assert list(json.loads(raw)) == ["v", "hours", "events"]
    assert queue_cursor(raw, "hours") == Cursor("a") and queue_cursor(raw, "events") == Cursor()
    assert scan_position(raw) == ScanPosition(), "a sensor that does not reconcile keeps no position"


def test_a_cursor_this_release_cannot_read_starts_over_field_by_field():
    for raw in (None, "", "not json", "[1, 2]", '{"v": 3, "reconcile": 7, "queue": "x"}'):
        assert scan_position(raw) == ScanPosition() and queue_cursor(raw) == Cursor(), raw
    half = json.dumps({"v": 4, "reconcile": "unreadable", "queue": {"after": "b"}})
    assert scan_position(half) == ScanPosition() and queue_cursor(half) == Cursor("b")
