"""The hand-off: the contract landing writes and loading reads, below both layers.

- `units`: what waits to be loaded (`LoadUnit`: a landing hour or an event partition).
- `manifests`: done files and the one reader that checks them against their path.
- `markers`: one marker protocol for every unit (mark, read, refuse, give up, clear, list).
- `event_index`: what a landing hour leaves for the event-time tables.

Pure: no Dagster, no Spark; the warehouse's queue (`warehouse/queue`) and load step
(`warehouse/load`) build on it, landing's publish writes through it.
"""
