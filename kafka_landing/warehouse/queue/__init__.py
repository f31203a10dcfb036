"""WHEN to load: the queue of units waiting to be loaded, and when an event partition becomes final.
No Dagster, no Spark.

- `tick`: one tick for every kind of unit (landing hours, retired hours, event partitions).
- `runs`: run keys, attempts, which runs covered a load, grouping into runs.
- `reconcile`: done files nobody marked, and the hours a table is behind.
- `settled`: the event partitions that became final since the last tick (their `settled` checks
  to evaluate again then).
- `cursors`: what the sensors keep between ticks; `messages`: what they say of a tick.
"""
