"""The sensors' cursors: what Dagster keeps of a sensor between its ticks, one JSON object
`{"v": 4, ...}` holding where the reconciliation stands (`"reconcile"`: a `reconcile.ScanPosition`),
where each queue tick stopped (`"queue"`, or a field per kind: a `tick.Cursor`), and up to when the
settled sensor looked (`"settled"`: a `settled.SettledPosition`).

A cursor this release cannot read starts over, field by field: an unreadable field reads as
absent (the reconciliation reads every done file once more; the tick starts at the front).

No Dagster, no Spark.
"""

from __future__ import annotations

import json

from kafka_landing.warehouse.queue.reconcile import ScanPosition
from kafka_landing.warehouse.queue.settled import SettledPosition
from kafka_landing.warehouse.queue.tick import Cursor

VERSION = 4
RECONCILE = "reconcile"
QUEUE = "queue"  # the field of a sensor with one kind
SETTLED = "settled"


def _fields(raw: str | None) -> dict:
    """A cursor's fields; {} for none, or for one this release cannot read."""
    try:
        d = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def scan_position(raw: str | None) -> ScanPosition:
    """Where the cursor `raw` says the reconciliation stands."""
    d = _fields(raw)
    return ScanPosition.from_json(d[RECONCILE]) if RECONCILE in d else ScanPosition()


def queue_cursor(raw: str | None, field: str = QUEUE) -> Cursor:
    """Where the cursor `raw` says the tick of `field` stopped."""
    return Cursor.from_json(_fields(raw).get(field))


def settled_position(raw: str | None) -> SettledPosition:
    """Up to when the cursor `raw` says the settled sensor looked."""
    return SettledPosition.from_json(_fields(raw).get(SETTLED))


def cursor_json(position: ScanPosition | None = None, settled: SettledPosition | None = None, **queues: Cursor
                ) -> str:
    """The cursor of a sensor: the reconciliation's `position` if it reconciles, the settled sensor's
    position if it is that one, and each tick's cursor under its field, in the order given."""
    kept = {RECONCILE: position.to_json()} if position is not None else {}
    if settled is not None:
        kept[SETTLED] = settled.to_json()
    return json.dumps({"v": VERSION, **kept, **{field: c.to_json() for field, c in queues.items()}})
