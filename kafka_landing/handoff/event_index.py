"""What a landing hour leaves for the event-time tables: the index and the markers.

A topic with `event_time_field` lands files that each hold one event hour (`LandedFile.event_hour`;
None for records with no event time), so an event partition P (a day or an hour of event time, or
`__unknown__<landing day>` for the records a landing day brought with no usable event time:
`naming.event_partition`) is the set of files the done files list for it: nothing is re-read
from Kafka. Before a done file replaces the old one, publish (`mark_event_partitions`) writes, for
every P the new or the old done file lists:

    event_partitions/<ds>/<t>/<P>/from/hour=<H>.json   landing hour H's done file may list files of P
                                                       (the index, never removed: P is one listing away)
    pending_event_loads/<ds>/<t>/<P>/hour=<H>.json     the marker (`markers.mark`): load P again

so no crash leaves a changed P unmarked; a marker for a done file that never came is cleared by
P's next load (`warehouse/by_event/load`), which versions P from these (`by_event/versions`).
Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from kafka_landing.handoff import markers
from kafka_landing.handoff.manifests import DoneFile, LandedFile
from kafka_landing.handoff.units import event_unit
from kafka_landing.naming import (
    EVENTS_DIR,
    done_file_path,
    event_lock_path,
    event_partition,
    event_partition_dir,
    event_source_path,
    hour_folder_tag,
)
from kafka_landing.store.base import LandingStore


def partitions_of(done: DoneFile | None, granularity: str) -> dict[str, list[LandedFile]]:
    """The event partitions a done file's files fall in, with those files."""
    out: dict[str, list[LandedFile]] = {}
    for f in done.files if done else ():
        out.setdefault(event_partition(f.event_hour, granularity, done.hour), []).append(f)
    return out


def mark_event_partitions(store: LandingStore, done: DoneFile, sha: str, before: DoneFile | None,
                          granularity: str, table: str | None = None) -> list[str]:
    """Before `done` (content hash `sha`) replaces `before` as the hour's done file: index and mark
    every event partition either lists. `table`: the table whose event partitions these are, when
    not `done.table` (a retired table's, whose new done file lists nothing). Returns them."""
    table = table or done.table
    touched = sorted({*partitions_of(done, granularity), *partitions_of(before, granularity)})
    index_event_partitions(store, done.dataset, table, done.hour, sha, touched)
    return touched


def index_event_partitions(store: LandingStore, dataset: str, table: str, hour: str, sha: str,
                           partitions: list[str]) -> None:
    """Index and mark `partitions` as fed by landing hour `hour`, whose done file has (or is about to
    have) content hash `sha`."""
    if not partitions:
        return
    body = json.dumps({"sha256": sha, "marked_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    with store.lock(event_lock_path(dataset, table)) as held:
        for p in partitions:
            held.write_atomic(event_source_path(dataset, table, p, hour), body.encode())
    markers.mark(store, [event_unit(dataset, table, p) for p in partitions], done_file_path(dataset, table, hour), sha)


def index_hours(store: LandingStore, dataset: str, table: str, partition: str, hours: dict[str, str]) -> None:
    """Index `partition` as fed by each of `hours` ({landing hour: its done file's hash}), under one
    lock, and mark it for the newest (a hand-over of many hours: `by_event.load.hand_over`)."""
    if not hours:
        return
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with store.lock(event_lock_path(dataset, table)) as held:
        for hour, sha in sorted(hours.items()):
            held.write_atomic(event_source_path(dataset, table, partition, hour),
                              json.dumps({"sha256": sha, "marked_at": stamp}).encode())
    last = max(hours)
    markers.mark(store, [event_unit(dataset, table, partition)], done_file_path(dataset, table, last), hours[last])


def sources(store: LandingStore, dataset: str, table: str, partition: str) -> list[str]:
    """The landing hours whose done files may list files of the partition (its index)."""
    rels = store.list(f"{event_partition_dir(dataset, table, partition)}/from", "hour=*.json")
    return sorted(h for rel in rels if (h := hour_folder_tag(rel.rsplit("/", 1)[-1])))


def granularity_of(store: LandingStore, dataset: str, table: str) -> str | None:
    """'day' or 'hour': what a table's event partitions were cut by, from their names (one listing);
    None if it has none."""
    for p in store.subdirs(f"{EVENTS_DIR}/{dataset}/{table}"):
        if len(p) == 10:
            return "day"
        if len(p) == 13:
            return "hour"
    return None
