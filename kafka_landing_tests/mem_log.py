"""An in-memory Kafka log that answers like Kafka does, for planning and freezing without a
broker: offsets_for_times counts transaction markers and aborted records (stamped when
written), a read_committed reader skips them, and a re-created topic gets a new topic id."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kafka_landing.naming import ONE_HOUR, Hour, to_millis

DATA, MARKER, ABORTED = "data", "marker", "aborted"
BASE = datetime(2026, 3, 1, tzinfo=timezone.utc)
HOUR0 = Hour(BASE)  # HOUR0.plus(h): the hour `at(h)` is in
NOW = BASE + ONE_HOUR * 30


class Parts(dict):
    """partition -> records. Giving a partition that exists a new list is a re-created topic:
    Kafka gives it a new topic id (appending records keeps it, adding a partition keeps it)."""

    def __init__(self, parts, log):
        super().__init__(parts)
        self._log = log

    def __setitem__(self, p, records):
        if p in self:
            self._log.topic_ids += 1
        super().__setitem__(p, records)


class MemLog:
    """partition -> [(timestamp ms, kind)]; the offset is the index."""

    def __init__(self, parts: dict[int, list[tuple[int, str]]], log_start: dict[int, int] | None = None):
        self.topic_ids = 1
        self.parts = Parts(parts, self)
        self.log_start = log_start or {}
        self.reads = 0

    def partitions(self, topic):
        return sorted(self.parts) or None

    def topic_id(self, topic):
        return f"topic-id-{self.topic_ids}"

    def watermarks(self, topic, p):
        return self.log_start.get(p, 0), len(self.parts[p])

    def offsets_for_time(self, topic, partitions, millis):
        out = {}
        for p in partitions:
            out[p] = next(((o, ts) for o, (ts, _) in enumerate(self.parts[p]) if ts >= millis and o >= self.log_start.get(p, 0)), None)
        return out

    def first_record(self, topic, p, start, end, min_millis=None):
        self.reads += 1
        for o in range(max(start, self.log_start.get(p, 0)), min(end, len(self.parts[p]))):
            ts, kind = self.parts[p][o]
            if kind == DATA and (min_millis is None or ts >= min_millis):
                return o, ts
        return None


def at(hour: int, minute: int = 0) -> int:
    return to_millis(BASE + ONE_HOUR * hour + timedelta(minutes=minute))
