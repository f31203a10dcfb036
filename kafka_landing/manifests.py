"""Done files: the manifest of one (table, hour), written last.

A done file lists every file of the hour with its row count, offsets and
schema id, the topic's dead letters and the slice the hour came from, so a
loader needs nothing else, and a person can trace any row to Kafka. Pure.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

DONE_VERSION = 1


@dataclass(frozen=True)
class LandedFile:
    path: str  # relative to the landing root
    rows: int
    bytes: int
    partition: int
    first_offset: int
    last_offset: int
    schema_id: int | None = None  # None for dead-letter files
    event_hour: str | None = None
    crc32c: str | None = None  # on a bucket, the object's when its rows were counted: checks compare it

    @property
    def counted(self) -> tuple[int, str] | None:
        """(rows, CRC32C) as counted when written, for `LandingStore.avro_rows`; None where unknown."""
        return (self.rows, self.crc32c) if self.crc32c else None


@dataclass(frozen=True)
class DeadLetters:
    rows: int
    by_reason: dict[str, int]
    files: tuple[LandedFile, ...]


@dataclass(frozen=True)
class DoneFile:
    topic: str
    dataset: str
    table: str
    hour: str
    rows: int
    schema_ids: tuple[int, ...]
    files: tuple[LandedFile, ...]
    dead_letters: DeadLetters
    slice: dict  # {"manifest": path, "records": n, "partitions": [{partition, start, end}]}
    topic_records_read: int
    offsets_without_record: int  # offsets of the slice Kafka returned no record for (control records, compaction)
    attempt: str
    landed_at: str
    retired: str | None = None  # why the hour no longer feeds this table (its rows are 0): the routing changed
    skipped: tuple[dict, ...] = ()  # offset ranges of the slice retention deleted before landing, skipped on request
    version: int = DONE_VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    def to_bytes(self) -> bytes:
        """The done file as publish writes it: its hash (`handoff.content_sha`) names this content."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True).encode()

    @classmethod
    def from_dict(cls, d: dict) -> "DoneFile":
        d = dict(d)
        if "offset_gaps" in d:  # written before the field had the name it has everywhere else
            d.setdefault("offsets_without_record", d.pop("offset_gaps"))
        dl = d.pop("dead_letters")
        return cls(
            **{k: v for k, v in d.items() if k not in ("files", "schema_ids", "skipped")},
            skipped=tuple(d.get("skipped", ())),
            files=tuple(LandedFile(**f) for f in d["files"]),
            schema_ids=tuple(d["schema_ids"]),
            dead_letters=DeadLetters(rows=dl["rows"], by_reason=dict(dl["by_reason"]),
                                     files=tuple(LandedFile(**f) for f in dl["files"])),
        )

