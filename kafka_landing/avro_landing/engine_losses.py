"""The guard behind the strict walk: an hour whose landing loses the Spark engine twice on the
same schema id is refused, so one record that kills the engine every topic shares cannot have
its hour retried (a server away is transient) and kill it again until a person finds it. Each
loss is counted per (hour, schema id) in the landing root, beside the hour's other records."""

from __future__ import annotations

from kafka_landing.errors import LandingError
from kafka_landing.naming import engine_losses_path, Hour
from kafka_landing.store.base import LandingStore

REFUSED_AFTER = 2  # losses of the same hour and schema id: one may be a restart that happened to fall there

DEAD_LETTER_JOB = "dead letters"  # what the run was doing when no schema id's write was: its dead-letter job


def record(store: LandingStore, topic: str, hours: list[str], step: str) -> None:
    """One more loss of the engine while `step` (a schema id, or DEAD_LETTER_JOB) ran for `hours`."""
    for h in hours:
        rel = engine_losses_path(topic, Hour(h))
        counts = store.read_json(rel) or {}
        counts[step] = counts.get(step, 0) + 1
        store.write_json_atomic(rel, counts)


def refused(store: LandingStore, topic: str, hours: list[str]) -> dict[str, LandingError]:
    """{hour: why it is refused} for the hours whose landing lost the engine REFUSED_AFTER times on
    one step: terminal, until a person clears it."""
    out = {}
    for h in hours:
        rel = engine_losses_path(topic, Hour(h))
        counts = store.read_json(rel) or {}
        lost = sorted(step for step, n in counts.items() if n >= REFUSED_AFTER)
        if lost:
            what = ", ".join(f"schema id {s}" if s.isdigit() else s for s in lost)
            out[h] = LandingError(
                f"{topic} {h}: refused: landing it lost the Spark engine {REFUSED_AFTER} times or more while writing "
                f"{what}, so a record of it may kill the engine every topic shares. Nothing of the hour was "
                "published. Find the record (the engine's log names the task; the hour's offsets are in its "
                f"frozen slice), then delete {store.location(rel)} to land the hour again.")
    return out


def forget(store: LandingStore, topic: str, hour: str) -> None:
    """The hour landed: its losses no longer say anything."""
    rel = engine_losses_path(topic, Hour(hour))
    if store.exists(rel):
        store.delete(rel)
