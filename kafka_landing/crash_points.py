"""Named steps where a test may kill the process, to prove crash safety.

`KAFKA_LANDING_CRASH_AT=<step>` makes the process SIGKILL itself when it
reaches that step: no cleanup, no `finally`, exactly what an OOM killer or a
lost machine does. Unset (always, outside the fault tests), a step is a no-op.
Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "KAFKA_LANDING_CRASH_AT"

# In the order they happen; the fault tests kill at each one.
STEPS = (
    "slices:before_manifest",   # slice planned, manifest not yet created
    "landing:staged",           # every file written to staging, nothing published
    "landing:files_moved",      # files moved into place, no new manifest or done file yet
    "landing:done_written",     # the first table's done file written, others not yet
    "landing:published",        # every done file written, unlisted files not yet removed
    "warehouse:staged",         # the hour's Parquet files written for the Iceberg table, not committed
    "warehouse:committing",     # inside the Iceberg commit: the catalog's database has it, the load no answer yet
    "warehouse:swapped",        # the hour committed (swapped in), the load not yet recorded
)


def crash_point(step: str) -> None:
    if step not in STEPS:
        raise ValueError(f"unknown crash point {step!r}; known: {STEPS}")
    if os.environ.get(ENV_VAR) == step:
        os.kill(os.getpid(), signal.SIGKILL)
