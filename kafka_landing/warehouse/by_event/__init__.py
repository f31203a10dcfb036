"""The event-time view: a table's records by the time things happened, not by when they reached
Kafka. What an event partition is, and what landing leaves for it (the index and the markers),
is the hand-off's (`handoff/event_index`); from there on it is here, read in the direction a load goes:

- `versions`: an event partition's manifest versions, made from the done files as they stand.
- `load`: a partition versioned, loaded whole and its markers cleared; the hand-over of the
  partitions releases before cut otherwise.
- `measures`: the arithmetic the event asset shows and its checks judge (settling, conservation,
  the unknown partitions' counts).

Pure: no Dagster; Spark only through the factory a backend may call.
"""
