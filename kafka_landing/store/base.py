"""The landing root as one interface: what landing, loading and the sensor need of
storage, and nothing more, so a local folder and a `gs://` bucket are interchangeable.

Paths are always relative to the root (`rel`); no local `Path` leaves a store.
`location(rel)` is what a person pastes into a shell and what Spark reads or
writes (a plain path, or a `gs://` URI).

The contracts each backend keeps (see `local.py`, `gcs.py`):
- `write_atomic`: a reader sees the old content or the new, never half of it.
- `create_exclusive`: first writer wins (freezing slice manifests).
- `lock`: one holder at a time; a holder that dies loses it (a flock dies with
  its process, a bucket lock object has a lease). The block gets a `HeldLock`
  and makes every create, replace or delete the lock protects through it
  (`held.write_atomic`, `held.create_exclusive`, `held.move`, `held.delete`),
  never through the store: the held lock fences the write itself, so a holder
  that lost the lock (a lease lapsed while it stalled, and someone took it
  over) cannot overwrite or delete what the holder after it wrote, even when
  it stalled between its check and its write (`gcs.py` says how on a bucket).
  `fence()` alone is the check, for a change the store cannot make conditional
  (a BigQuery job).
- `move`: a finished file put in place under its final name, replacing one of
  the same name; the source is gone afterwards.
Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
from abc import ABC, abstractmethod
from typing import Iterator

from kafka_landing.errors import ServiceUnavailable

# Staging left by an attempt or a load killed before it could clean up is swept after this long
# (landing's staging in the landing root; the Iceberg warehouse's files no snapshot lists, by its upkeep).
STAGING_MAX_AGE_SECONDS = 24 * 3600


class LockLost(ServiceUnavailable, RuntimeError):
    """The lock is no longer ours (a lease lapsed while held and someone else took it over, or
    the lock object or file was removed): the block did not run alone. Raised by a fence before
    the commit it guards, or when the block ends, with nothing of the holder after it overwritten.
    Retrying the whole operation is safe."""


class LockTakenOver(LockLost):
    """A write under a lock refused because another holder took the lock over and has written
    (or replaced) the object since: this attempt ran past the end of its lease, and what the
    holder after it wrote stands. Terminal for this attempt (`errors.py`): it must not write
    the same thing again over the newer holder's work, blindly or after a backoff; whatever
    is still to do is that holder's (or a later run's, from what the landing root says then)."""

    transient = False


class HeldLock:
    """What `LandingStore.lock` gives the block: the lock's check (`fence`) and the writes it
    protects, each fenced. This default checks, then writes through the store (a flock, which
    no one else can take while its holder lives however long it stalls); a bucket's lock makes
    the write itself conditional (`gcs._HeldLock`)."""

    store: LandingStore

    def fence(self) -> None:
        """Raise `LockLost` unless the lock is still held by this holder. At most one metadata
        read. On its own only before a change the store cannot make conditional (a BigQuery
        job); a change in the landing root goes through the methods below."""

    def write_atomic(self, rel: str, data: bytes) -> None:
        """`store.write_atomic`, fenced."""
        self.fence()
        self.store.write_atomic(rel, data)

    def write_json_atomic(self, rel: str, obj: dict) -> None:
        self.write_atomic(rel, json.dumps(obj, indent=2, sort_keys=True).encode())

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """`store.create_exclusive`, fenced: False if the object exists (whoever wrote it)."""
        self.fence()
        return self.store.create_exclusive(rel, data)

    def move(self, src_rel: str, rel: str) -> None:
        """`store.move`, fenced: the replace of `rel` is the commit (the source is staging)."""
        self.fence()
        self.store.move(src_rel, rel)

    def delete(self, rel: str) -> None:
        """`store.delete`, fenced."""
        self.fence()
        self.store.delete(rel)


def _fixed_folders(pattern: str) -> str:
    """The folders of a glob pattern before its first wildcard: what `glob` walks."""
    fixed = []
    for part in pattern.split("/"):
        if any(c in part for c in "*?["):
            break
        fixed.append(part)
    return "/".join(fixed[:-1] if len(fixed) == len(pattern.split("/")) else fixed)


def _globbed(rel: str, pattern: str) -> bool:
    """Whether `rel` matches the glob `pattern`: at its depth (`*` stays within a folder)."""
    return rel.count("/") == pattern.count("/") and fnmatch.fnmatchcase(rel, pattern)


class LandingStore(ABC):
    #: how the root is shown to people (a plain path or a gs:// URI)
    root: str

    # --- where ---------------------------------------------------------------

    @abstractmethod
    def location(self, rel: str) -> str:
        """The plain path or gs:// URI of `rel`, for people, metadata and Spark."""

    def check_rel(self, rel: str) -> str:
        """`rel` normalised; ValueError if it could leave the root."""
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if ".." in parts or rel.startswith("/"):
            raise ValueError(f"path {rel!r} escapes the landing root {self.root}")
        return "/".join(parts)

    # --- read ----------------------------------------------------------------

    @abstractmethod
    def exists(self, rel: str) -> bool: ...

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """FileNotFoundError if absent."""

    def read_json(self, rel: str) -> dict | None:
        try:
            return json.loads(self.read_bytes(rel))
        except FileNotFoundError:
            return None

    @abstractmethod
    def size(self, rel: str) -> int: ...

    @abstractmethod
    def avro_rows(self, rel: str, counted: tuple[int, str] | None = None) -> int:
        """Rows of an Avro container file, from its block headers (AvroFileError if not whole).
        `counted`: (rows, CRC32C) recorded when the file was written; a store that keeps each
        object's CRC32C returns those rows while the object still has it, without a download."""

    def crc32c(self, rel: str) -> str | None:
        """The object's CRC32C (base64, as GCS gives it), or None where a store keeps none."""
        return None

    def avro_schema(self, rel: str) -> dict:
        """The writer schema in an Avro container file's header. Stores override it to read the
        header only: a whole download per schema id for one schema was the cost (N12)."""
        import io

        import fastavro

        return fastavro.reader(io.BytesIO(self.read_bytes(rel))).writer_schema

    @abstractmethod
    def avro_offsets(self, rel: str, field: str = "_kafka_offset") -> tuple[int, int | None, int | None]:
        """(rows, `field` of the first record, of the last record) of a landing file, decoding
        only its first and last blocks (AvroFileError if not whole)."""

    # --- list ----------------------------------------------------------------

    @abstractmethod
    def list(self, rel_dir: str, pattern: str = "*") -> list[str]:
        """Files directly under `rel_dir` whose name matches `pattern`, sorted; names
        starting with "." are never listed (temporary files)."""

    def first(self, rel_dir: str, pattern: str = "*") -> str | None:
        """The first file `list` would give, or None; a bucket overrides it to read one page only."""
        return next(iter(self.list(rel_dir, pattern)), None)

    @abstractmethod
    def subdirs(self, rel_dir: str) -> list[str]:
        """Names of the folders (bucket prefixes) directly under `rel_dir`, sorted."""

    @abstractmethod
    def walk(self, rel_dir: str, suffix: str = "") -> list[str]:
        """Every file under `rel_dir`, at any depth, whose name ends with `suffix`, sorted."""

    def walk_stats(self, rel_dir: str, suffix: str = "") -> list[tuple[str, int, float]]:
        """`walk` with each file's size and when it was last written (epoch seconds): what a sweep
        that must also know what is still referenced (Iceberg's upkeep) decides on."""
        raise NotImplementedError(f"{type(self).__name__} does not say when its files were written")

    def glob(self, pattern: str) -> list[str]:
        """Files matching a pattern of the whole relative path (`*` stays within a folder)."""
        return sorted(r for r in self.walk(_fixed_folders(pattern)) if _globbed(r, pattern))

    def glob_stats(self, pattern: str) -> list[tuple[str, int, float]]:
        """`glob` with each file's size and when it was last written, as `walk_stats` gives them:
        what a caller that decides by age reads in one listing (the settled sensor)."""
        return sorted(s for s in self.walk_stats(_fixed_folders(pattern)) if _globbed(s[0], pattern))

    # --- write ---------------------------------------------------------------

    @abstractmethod
    def write_atomic(self, rel: str, data: bytes) -> None: ...

    def write_json_atomic(self, rel: str, obj: dict) -> None:
        self.write_atomic(rel, json.dumps(obj, indent=2, sort_keys=True).encode())

    @abstractmethod
    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Write `rel` only if it does not exist yet; False if someone else won."""

    @abstractmethod
    def move(self, src_rel: str, rel: str) -> None:
        """Put the finished file `src_rel` in place as `rel` (replacing one of that name)."""

    @abstractmethod
    def delete(self, rel: str) -> None:
        """Remove a file, or everything under a folder; absent is fine."""

    @abstractmethod
    def check_writable(self) -> None:
        """Raise OSError (naming the root) unless a file can be created and removed."""

    @abstractmethod
    def sweep(self, rel_dir: str, pattern: str, older_than_seconds: float) -> list[str]:
        """Remove what matches `pattern` (relative to `rel_dir`, one level per `/`) and was
        not touched for `older_than_seconds`: the debris of killed attempts. Returns it."""

    @abstractmethod
    @contextlib.contextmanager
    def lock(self, rel: str) -> Iterator[HeldLock]:
        """Hold the lock `rel` for the block; a crashed holder cannot keep it forever. The block
        makes each change the lock protects through what it gets (`HeldLock`), not the store."""
