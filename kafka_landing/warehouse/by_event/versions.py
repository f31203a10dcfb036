"""VERSIONS of an event partition P (what P is, and the index and markers landing leaves for it:
`handoff/event_index`). Records of P arrive with many landing hours, some days late, so P is never
appended to: it gets a new manifest version listing every file, its landing hour and rows, and the
warehouse replaces P whole from it. In the landing root, per (dataset, table, P), beside the index:

    event_partitions/<ds>/<t>/<P>/v=000003.json        P's manifest versions, the newest last; only
                                                       the newest VERSIONS_KEPT are kept

What a version costs is bounded by P's content, not by history: the records a landing hour brings
with no usable event time go to the unknown partition of its landing day (fed by at most that day's
24 landing hours), sentinel times (outside `naming.EVENT_TIME_FROM`..`EVENT_TIME_UNTIL`) with them,
and older versions are removed as newer ones are written.

A versioning (`next_manifest`) reads P's index and each landing hour's current done file, so it
sees P as the done files say it is now, whatever order things ran in; the load step then clears
the markers it saw satisfied (`by_event/load`).

A version's identity is its content hash: the (landing hour, file, rows, schema id) it lists. A
re-land that gives P the same files makes no new version; one that moves records between event
partitions re-versions exactly those it took them from and gave them to. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import NamedTuple

from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.event_index import partitions_of, sources
from kafka_landing.handoff.manifests import DoneFile, DoneFileError, LandedFile, read_done_file_or_none
from kafka_landing.handoff.units import LoadUnit
from kafka_landing.naming import (
    EVENTS_DIR,
    done_file_path,
    event_manifest_path,
    event_partition_dir,
    event_table,
    placeable,
    superseded,
)
from kafka_landing.store.base import HeldLock, LandingStore

# The format of an event manifest (its `format` key); not the partition's version, which counts its
# contents (`EventManifest.version`), nor the format of a slice plan (`kafka_slices/plan`).
EVENT_MANIFEST_FORMAT = 1
# The newest versions kept of a partition: the newest, and the one it replaced (what `settling` reads
# of a manifest written before `previous_amended_at` existed). Nothing else reads an older one: a load
# and the checks read the newest, and the warehouse's record names the content it loaded by its hash.
VERSIONS_KEPT = 2


class EventPartitionError(KafkaLandingError, RuntimeError):
    """An event partition that cannot be versioned as the done files stand (terminal unless said)."""


# --- versions --------------------------------------------------------------------------

@dataclass(frozen=True)
class EventManifest:
    """One version of an event partition: every file it holds, from which landing hour."""

    dataset: str
    table: str  # the landing-hour table; the warehouse loads it into `event_table(table)`
    partition: str
    granularity: str
    version: int
    sha256: str  # of the content: (landing hour, file, rows, schema id) of every file
    rows: int
    files: tuple[dict, ...]  # LandedFile fields plus "hour", the landing hour that listed it
    hours: dict[str, dict]  # landing hour -> {"done_sha256", "rows", "files"}
    amended_at: str  # when this version was made: P's last change
    changed_hours: tuple[str, ...] = ()  # landing hours whose part differs from the previous version
    previous_sha256: str | None = None
    created_at: str | None = None  # when version 1 was made
    previous_amended_at: str | None = None  # when the previous version was made (absent from older manifests)
    format: int = EVENT_MANIFEST_FORMAT

    @property
    def path(self) -> str:
        return event_manifest_path(self.dataset, self.table, self.partition, self.version)

    def to_bytes(self) -> bytes:
        # As asdict would give it, without its deep copy of every file's entry (a version is written
        # on every change of its partition).
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, indent=2, sort_keys=True).encode()

    @classmethod
    def from_dict(cls, d: dict) -> EventManifest:
        return cls(**{**d, "files": tuple(d["files"]), "changed_hours": tuple(d.get("changed_hours", ()))})

    @property
    def target(self) -> str:
        """The warehouse table it loads into (a `handoff.manifests.Manifest`, as a done file is)."""
        return event_table(self.table)

    @property
    def landed_files(self) -> tuple[LandedFile, ...]:
        return tuple(LandedFile(**{k: v for k, v in f.items() if k != "hour"}) for f in self.files)

    def by_landing_hour(self) -> dict[str, tuple[LandedFile, ...]]:
        out: dict[str, list[LandedFile]] = {}
        for f in self.files:
            out.setdefault(f["hour"], []).append(LandedFile(**{k: v for k, v in f.items() if k != "hour"}))
        return {h: tuple(fs) for h, fs in sorted(out.items())}

    @property
    def schema_ids(self) -> tuple[int, ...]:
        return tuple(sorted({f["schema_id"] for f in self.files if f.get("schema_id") is not None}))

    @property
    def attempt(self) -> str:
        """What a load records of which version it loaded."""
        return f"v{self.version}"

    @property
    def no_event_time_rows(self) -> int:
        """Rows of records with no event time (in an unknown partition)."""
        return sum(f["rows"] for f in self.files if f.get("event_hour") is None)

    @property
    def sentinel_rows(self) -> dict[str, int]:
        """{event hour: rows} of records whose event time is a sentinel, outside
        EVENT_TIME_FROM..EVENT_TIME_UNTIL (in an unknown partition; empty in any other)."""
        out: dict[str, int] = {}
        for f in self.files:
            if f.get("event_hour") is not None and not placeable(f["event_hour"]):
                out[f["event_hour"]] = out.get(f["event_hour"], 0) + f["rows"]
        return dict(sorted(out.items()))

    @property
    def amended(self) -> bool:
        """The partition changed after its first version: late records, or a re-land."""
        return self.version > 1

    def held_by(self, loaded: dict | None) -> bool:
        """Whether the warehouse holds this version, as its load record `loaded` says (its hash names
        the content it loaded). A superseded partition emptied that was never loaded holds nothing to
        empty (BigQuery refused its days: they are outside its range)."""
        if (loaded or {}).get("sha256") == self.sha256:
            return True
        return loaded is None and self.rows == 0 and superseded(self.partition)


@dataclass(frozen=True)
class Contribution:
    """What one landing hour's current done file gives a partition."""

    hour: str
    done_sha256: str
    files: tuple[LandedFile, ...] = field(default=())

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def key(self) -> list:
        """What identifies the part: a file's name holds its partition, offsets, schema id and event
        hour, so the same name and rows are the same records (not its checksum: a re-land writes the
        same records with other Avro sync markers)."""
        return sorted([f.path, f.rows, f.schema_id] for f in self.files)


def partition_sha(parts: dict[str, Contribution]) -> str:
    body = json.dumps([[h, parts[h].key()] for h in sorted(parts) if parts[h].files])
    return hashlib.sha256(body.encode()).hexdigest()


def read_done(store: LandingStore, dataset: str, table: str, hour: str) -> tuple[DoneFile, str] | None:
    """A landing hour's done file and its hash (the one reader); None if it is gone. One that cannot
    be read as what its path says stops the versioning, naming it."""
    try:
        return read_done_file_or_none(store, done_file_path(dataset, table, hour))
    except DoneFileError as exc:
        raise EventPartitionError(f"{dataset}.{table}: the done file of landing hour {hour} cannot be used: {exc}; "
                                  "no event partition it feeds can be versioned: re-land the hour (or fix its done "
                                  "file)", transient=exc.transient) from None


def read_sources(store: LandingStore, dataset: str, table: str, partition: str
                 ) -> dict[str, tuple[DoneFile, str] | None]:
    """Each landing hour in the partition's index, with its done file and hash as they stand now
    (None where it is gone)."""
    return {hour: read_done(store, dataset, table, hour) for hour in sources(store, dataset, table, partition)}


def read_content(store: LandingStore, dataset: str, table: str, partition: str, granularity: str
                 ) -> tuple[dict[str, Contribution], dict[str, str | None]]:
    """(what each landing hour gives the partition now, the done-file hash read per indexed hour,
    None where its done file is gone)."""
    parts, seen = {}, {}
    for hour, got in read_sources(store, dataset, table, partition).items():
        seen[hour] = got[1] if got else None
        mine = partitions_of(got[0], granularity).get(partition, []) if got else []
        if mine:
            parts[hour] = Contribution(hour, got[1], tuple(sorted(mine, key=lambda f: f.path)))
    return parts, seen


def versions(store: LandingStore, dataset: str, table: str, partition: str) -> list[int]:
    rels = store.list(event_partition_dir(dataset, table, partition), "v=*.json")
    return sorted(int(rel.rsplit("/", 1)[-1][2:-5]) for rel in rels)


def latest_manifest(store: LandingStore, dataset: str, table: str, partition: str) -> EventManifest | None:
    """The partition's newest version, None before its first."""
    return _latest(store, dataset, table, partition)[0]


def _latest(store: LandingStore, dataset: str, table: str, partition: str
            ) -> tuple[EventManifest | None, list[int]]:
    """(the newest version, every version number listed): one listing and one read."""
    have = versions(store, dataset, table, partition)
    if not have:
        return None, have
    return read_version(store, dataset, table, partition, have[-1]), have


def read_version(store: LandingStore, dataset: str, table: str, partition: str, version: int) -> EventManifest:
    """One version of the partition (FileNotFoundError if it is gone: a newer one pruned it)."""
    rel = event_manifest_path(dataset, table, partition, version)
    try:
        return EventManifest.from_dict(json.loads(store.read_bytes(rel)))
    except (ValueError, TypeError, KeyError) as exc:
        raise EventPartitionError(f"{dataset}.{table} event partition {partition}: its manifest {store.location(rel)} "
                                  f"cannot be read ({type(exc).__name__}: {exc}); remove it and the partition is "
                                  "versioned again from the done files") from None


class VersionFile(NamedTuple):
    """A partition's newest version as a listing shows it: no read."""

    partition: str
    version: int
    written: float  # when its file was written (epoch seconds, the store's clock): no earlier than its `amended_at`


def newest_versions(store: LandingStore, dataset: str, table: str) -> list[VersionFile]:
    """Each event partition of the table with its newest version and when that was written, from one
    listing of every partition's version files (a bucket matches the pattern itself and sends their
    times with the names), so a table costs a listing, not a listing or a read per partition."""
    newest: dict[str, VersionFile] = {}
    for rel, _, written in store.glob_stats(f"{EVENTS_DIR}/{dataset}/{table}/*/v=*.json"):
        partition, name = rel.rsplit("/", 2)[-2:]
        if not name[2:-5].isdigit():
            continue  # not a version written here
        found = VersionFile(partition, int(name[2:-5]), written)
        if partition not in newest or found.version > newest[partition].version:
            newest[partition] = found
    return sorted(newest.values())


def _prune(held: HeldLock, dataset: str, table: str, partition: str, have: list[int]) -> None:
    """Remove all but the newest VERSIONS_KEPT of `have` (the versions there are now)."""
    for v in sorted(have)[:-VERSIONS_KEPT]:
        held.delete(event_manifest_path(dataset, table, partition, v))


class Versioned(NamedTuple):
    """What a versioning answers."""

    manifest: EventManifest  # the partition's version as the done files stand now
    new: bool  # this versioning wrote it: the content differed from the newest version
    seen: dict[str, str | None]  # the done-file hash read per indexed landing hour, None where it is gone


def next_manifest(store: LandingStore, held: HeldLock, unit: LoadUnit, granularity: str, now: datetime | None = None,
                  content: tuple[dict[str, Contribution], dict[str, str | None]] | None = None) -> Versioned:
    """The event partition `unit`'s version as the done files stand now. Call under
    `event_lock_path(dataset, table, partition)`; `content`: what `read_content` answered under that
    lock already, if the caller read it. A new version is written when the content differs from the
    newest one, and versions older than the newest VERSIONS_KEPT are removed. A landing hour in the
    newest version whose done file is gone stops it: the partition would lose its rows without a trace."""
    dataset, table, partition = unit.dataset, unit.table, unit.partition
    latest, have = _latest(store, dataset, table, partition)
    parts, seen = content or read_content(store, dataset, table, partition, granularity)
    gone = sorted(h for h, part in (latest.hours if latest else {}).items() if part.get("rows") and seen.get(h) is None)
    if gone:
        raise EventPartitionError(
            f"{dataset}.{table} event partition {partition}: landing hours {gone} are in its version "
            f"{latest.version} and their done files are gone; a new version without them would drop their rows. "
            "Nothing was changed: re-land those hours (or retire them, which leaves an empty done file), then "
            "load the partition again")
    sha = partition_sha(parts)
    if latest is not None and latest.sha256 == sha:
        _prune(held, dataset, table, partition, have)
        return Versioned(latest, False, seen)
    manifest = _next_version(unit, granularity, latest, parts, sha, now or _now())
    held.write_atomic(manifest.path, manifest.to_bytes())
    _prune(held, dataset, table, partition, [*have, manifest.version])
    return Versioned(manifest, True, seen)


def _next_version(unit: LoadUnit, granularity: str, latest: EventManifest | None, parts: dict[str, Contribution],
                  sha: str, now: datetime) -> EventManifest:
    """The version after `latest` (None: the first) holding `parts`, whose hash is `sha`."""
    hours = {h: {"done_sha256": c.done_sha256, "rows": c.rows, "files": len(c.files)} for h, c in sorted(parts.items())}
    was = _keys_by_hour(latest.files if latest else ())
    now_keys = {h: c.key() for h, c in parts.items()}
    changed = sorted(h for h in {*was, *now_keys} if was.get(h) != now_keys.get(h))
    return EventManifest(
        dataset=unit.dataset, table=unit.table, partition=unit.partition, granularity=granularity,
        version=(latest.version if latest else 0) + 1, sha256=sha, rows=sum(c.rows for c in parts.values()),
        files=tuple({"hour": h, **asdict(f)} for h, c in sorted(parts.items()) for f in c.files),
        hours=hours, amended_at=now.isoformat(timespec="seconds"), changed_hours=tuple(changed),
        previous_sha256=latest.sha256 if latest else None,
        previous_amended_at=latest.amended_at if latest else None,
        created_at=latest.created_at if latest and latest.created_at else now.isoformat(timespec="seconds"),
    )


def _keys_by_hour(files) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in files:
        out.setdefault(f["hour"], []).append([f["path"], f["rows"], f.get("schema_id")])
    return {h: sorted(k) for h, k in out.items()}


def _now() -> datetime:
    return datetime.now(timezone.utc)


__all__ = ["EVENT_MANIFEST_FORMAT", "Contribution", "EventManifest", "EventPartitionError", "VersionFile", "Versioned",
           "latest_manifest", "newest_versions", "next_manifest", "read_content", "read_done", "read_sources",
           "read_version", "versions"]
