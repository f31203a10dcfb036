"""What waits to be loaded: a load unit, the one value both sides of the hand-off name.

A unit is a partition of a warehouse table that a load replaces whole:

- `HOUR`: a landing hour of a table (`tables/<ds>/<t>/hour=<H>/_DONE.json` says what it holds).
  A retired hour (a routing change re-landed it elsewhere) is a landing hour too: its done file
  lists nothing, and loading it empties the hour.
- `EVENT`: an event partition (an event day, hour, or `__unknown__`) of a table's event-time
  table `<t>__by_event`; its content is the landing files the done files list for it.

`table` is always the landing-hour table (an event unit's markers, index and versions live
under it); `target` is the warehouse table the unit loads into. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_landing.naming import (
    check_event_partition,
    done_file_path,
    event_pending_dir,
    event_table,
    Hour,
)

HOUR = "hour"
EVENT = "event"


@dataclass(frozen=True, order=True)
class LoadUnit:
    partition: str  # an Hour (2026-11-20T13) or an event partition (2026-11-20, __unknown__); first: sorts by time
    dataset: str
    table: str  # the landing-hour table
    kind: str = HOUR

    def __post_init__(self):
        if self.kind == EVENT:
            check_event_partition(self.partition)
        elif self.kind == HOUR:
            object.__setattr__(self, "partition", Hour(self.partition))  # raises on anything but an hour
        else:
            raise ValueError(f"a load unit is a {HOUR!r} or an {EVENT!r} partition, not {self.kind!r}")

    @property
    def hour(self) -> Hour:
        """The landing hour of an HOUR unit."""
        if self.kind != HOUR:
            raise ValueError(f"{self} is an event partition, not a landing hour")
        return self.partition

    @property
    def target(self) -> str:
        """The warehouse table it loads into."""
        return event_table(self.table) if self.kind == EVENT else self.table

    @property
    def name(self) -> str:
        """dataset.table of the warehouse table it loads into."""
        return f"{self.dataset}.{self.target}"

    @property
    def done_file(self) -> str:
        """An HOUR unit's done file (relative to the landing root)."""
        return done_file_path(self.dataset, self.table, self.hour)

    @property
    def partition_key(self) -> str:
        """Its Dagster partition key: the hour's key, or the event partition itself."""
        return self.partition.key if self.kind == HOUR else self.partition

    @property
    def queue_key(self) -> str:
        """What runs of this unit are requested under (`<target>@<sha16>`, see warehouse/queue)."""
        return self.done_file if self.kind == HOUR else event_pending_dir(self.dataset, self.table, self.partition)

    def __str__(self) -> str:
        return f"{self.name} {self.partition}"


def hour_unit(dataset: str, table: str, hour: Hour) -> LoadUnit:
    return LoadUnit(hour, dataset, table, HOUR)


def event_unit(dataset: str, table: str, partition: str) -> LoadUnit:
    return LoadUnit(partition, dataset, table, EVENT)
