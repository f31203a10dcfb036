"""The landing root as a `gs://bucket[/prefix]`: the production store.

A bucket has no rename, no hard link and no flock, so each contract of
`LandingStore` rests on what GCS does guarantee instead:
- a single-object upload is atomic (readers see the old object or the new one):
  `write_atomic` is one upload;
- `ifGenerationMatch=0` creates only if absent: `create_exclusive`, and taking a lock;
- `ifGenerationMatch=<generation>` changes only the version one has seen: renewing,
  taking over and releasing a lock, and every write made under a lock (below);
- `move` is a server-side rewrite (copy) and then a delete of the source: not
  atomic, and need not be, since landing files are immutable and a move repeated
  after a crash copies the same bytes again.
A lock is an object holding its holder and a lease, renewed by a daemon thread
while held, so a holder that dies (SIGKILL, a lost machine) loses it one lease
after its last renewal. A holder that merely stalled past its lease (the bucket
unreachable for its renewals, a paused process, a preempted VM) may find the
lock taken over, and may not know it yet when it writes.

Fencing: the write itself, not a check before it. Each acquisition's fencing
token is the lock object's generation when it was taken: GCS generations of one
object name only grow (microsecond timestamps, "monotonically increasing across
writes"), so whoever takes the lock later, by takeover or after a release, has
a larger one. Every write made under the lock goes through the held lock
(`_HeldLock.write_atomic`, `create_exclusive`, `move`, `delete`), which
1. reads the target's metadata (one GET): if a later holder of this lock wrote
   it (the token it left in the object's custom metadata is larger), stops with
   `LockTakenOver` (terminal: the newer holder's object stands);
2. checks the lock object is still its own with a live lease (`fence()`, one
   GET: the early stop, `LockLost`, transient, nothing of anyone's touched);
3. makes the write conditional on the generation read in 1 (`ifGenerationMatch`;
   0: it must be absent), stamping the object with its lock, token and holder.
   A 412 says the object changed since 1: back to 1. So a holder whose stall
   fell between its checks and its write is refused by GCS itself, and learns
   from the stamp who took over.
That is Kleppmann's fencing token ("How to do distributed locking") checked by
the storage, per object, with GCS's own compare-and-swap as the check; readers
need to know nothing of it. The generation alone (compare-and-swap on what the
holder last saw) would not do: a stale holder that reads after the newer holder
wrote sees a generation that matches; the token alone would not either: checked
by the writer before its write, it is check-then-act again. Together: a holder
that lost its lock never overwrites or deletes what a later holder of the same
lock wrote. What no per-object precondition gives: a stale write to an object no
later holder has written yet (creating an absent one, replacing one only earlier
holders wrote) still lands if the stall falls after 2; the later holder
replaces it when it writes it (the stamp says it is older), and what such a
write can do is bounded by the protocols over the landing root (docs/
operations.md, "How the contracts hold on a bucket", lists each one).
Weighed and not chosen: a compose of the content with the lock object as a
source under `ifGenerationMatch` (a compose is the one request GCS conditions on
another object) would fence creates too, but not deletes (a delete has no
source); it needs a zero-length lock object, costs an upload, a compose and a
delete per write, makes every file a composite object, and the emulator ignores
compose preconditions, so it could not be tested. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fnmatch
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterator

from google.api_core import exceptions as gexc
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from kafka_landing.avro_files import count_records_in, offset_range_in
from kafka_landing.errors import ServiceUnavailable
from kafka_landing.store.base import HeldLock, LandingStore, LockLost, LockTakenOver

log = logging.getLogger(__name__)

EMULATOR_PROJECT = "kafka-landing-emulator"
WRITER_ROLE = "roles/storage.objectAdmin"
# Enough for an Avro block header plus the next blocks; bounds the memory of counting rows.
_AVRO_READ_CHUNK = 8 * 1024 * 1024
_AVRO_HEADER_CHUNK = 256 * 1024  # ranged reads are 256 KiB-aligned; a schema longer than that reads on


# What a write under a lock leaves in the object's custom metadata: the lock (its object name),
# the fencing token of the holder that wrote it (the lock object's generation when that holder
# took it) and the holder, for messages.
FENCE_LOCK, FENCE_TOKEN, FENCE_HOLDER = "kafka_landing_lock", "kafka_landing_token", "kafka_landing_holder"
_WRITE_TRIES = 5  # an object changed by a writer outside the lock this many times in a row: give up


class LockTimeout(ServiceUnavailable, TimeoutError):
    """Waited the whole timeout for a lock a live holder keeps renewing."""


class WriteContended(ServiceUnavailable):
    """A write under a lock whose object kept changing between our read and our conditional write,
    each time by a writer that is no later holder of the lock (one outside it): nothing written."""


def _parse_root(root: str) -> tuple[str, str]:
    if not root.startswith("gs://"):
        raise ValueError(f"landing root {root!r} is not a gs://bucket[/prefix] URI")
    bucket, _, prefix = root[len("gs://"):].partition("/")
    parts = [p for p in prefix.split("/") if p not in ("", ".")]
    if not bucket or ".." in parts:
        raise ValueError(f"landing root {root!r}: expected gs://bucket[/prefix] with a bucket name and no '..'")
    return bucket, "/".join(parts)


def _service_account_info(key: str) -> dict:
    """A service-account key given as JSON or as base64 of it (how env vars usually carry it).
    Errors never quote the key."""
    text = key.strip()
    if not text.startswith("{"):
        try:
            text = base64.b64decode(text, validate=False).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError("the GCP service-account key given is neither JSON nor base64 of JSON; "
                             "pass the key file's content (or `base64 -w0` of it)") from None
    try:
        info = json.loads(text)
    except ValueError:
        raise ValueError("the GCP service-account key given is not valid JSON (nor base64 of JSON); "
                         "pass the key file's content (or `base64 -w0` of it)") from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise ValueError("the GCP credentials given are not a service-account key (\"type\": \"service_account\"); "
                         "leave them unset to use Application Default Credentials")
    return info


def build_client(credentials: str | None = None, root: str = "gs://") -> tuple[storage.Client, str]:
    """The storage client and a description of where its credentials come from (for error
    messages; never the credentials). Under STORAGE_EMULATOR_HOST: anonymous, a fixed project
    (a key given is then ignored)."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        from google.auth.credentials import AnonymousCredentials

        return (storage.Client(project=EMULATOR_PROJECT, credentials=AnonymousCredentials()),
                f"anonymous, on the emulator at STORAGE_EMULATOR_HOST={emulator}")
    if credentials:
        from google.oauth2 import service_account

        info = _service_account_info(credentials)
        try:
            creds = service_account.Credentials.from_service_account_info(info)
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"the GCP service-account key given for {info.get('client_email', 'an unnamed account')} "
                             "could not be loaded (fields missing or a malformed private key); pass the key file's "
                             "content unchanged") from None
        return (storage.Client(project=info.get("project_id"), credentials=creds),
                f"the service-account key given, for {info.get('client_email', 'an unnamed account')}")
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return storage.Client(), "Application Default Credentials"
    except DefaultCredentialsError:
        raise OSError(f"no credentials for the landing root {root}: Application Default Credentials are not set up. "
                      "Run `gcloud auth application-default login`, run on a GCP service with a service account, "
                      "or give a service-account key through the landing resource's gcp_credentials env var.") from None


@dataclass(frozen=True)
class _Lease:
    holder: str
    generation: int
    renewed: datetime  # the object's `updated`, by the server's clock
    lease_seconds: float

    @property
    def expires(self) -> datetime:
        return self.renewed + timedelta(seconds=self.lease_seconds)

    def expired(self) -> bool:
        # The waiter's clock against the server's: machines on NTP agree to well under the
        # two thirds of a lease that a renewal interval of a third leaves spare.
        return datetime.now(timezone.utc) >= self.expires


class GcsStore(LandingStore):
    def __init__(
        self,
        root: str,
        credentials: str | None = None,
        client: storage.Client | None = None,
        *,
        lease_seconds: float = 60.0,
        renew_seconds: float | None = None,
        wait_timeout_seconds: float = 1800.0,
    ):
        """`credentials`: a service-account key (JSON or base64 of it) read by the caller from
        an env var; None: Application Default Credentials. A `client` given wins over both.
        A lock's lease is renewed every `renew_seconds` (a third of the lease by default);
        waiting for a lock gives up after `wait_timeout_seconds`."""
        self.bucket_name, self.prefix = _parse_root(root)
        self.root = f"gs://{self.bucket_name}/{self.prefix}" if self.prefix else f"gs://{self.bucket_name}"
        if client is None:
            client, self.credentials_source = build_client(credentials, self.root)
        else:
            self.credentials_source = "the storage client passed in"
        self.client = client
        self.bucket = client.bucket(self.bucket_name)
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, not {lease_seconds}")
        self.lease_seconds = float(lease_seconds)
        self.renew_seconds = float(renew_seconds) if renew_seconds else self.lease_seconds / 3
        if self.renew_seconds >= self.lease_seconds:
            raise ValueError(f"renew_seconds ({self.renew_seconds}) must be shorter than the lease "
                             f"({self.lease_seconds}), or a live holder loses its lock")
        self.wait_timeout_seconds = float(wait_timeout_seconds)

    def __repr__(self) -> str:
        return f"GcsStore({self.root!r})"

    # --- where ---------------------------------------------------------------

    def _name(self, rel: str) -> str:
        rel = self.check_rel(rel)
        return "/".join(p for p in (self.prefix, rel) if p)

    def _dir(self, rel_dir: str) -> str:
        """The listing prefix of a folder: its object name and a slash ('' for the bucket root)."""
        name = self._name(rel_dir)
        return f"{name}/" if name else ""

    def _rel(self, name: str) -> str:
        return name[len(self.prefix) + 1:] if self.prefix else name

    def location(self, rel: str) -> str:
        name = self._name(rel)
        return f"gs://{self.bucket_name}/{name}" if name else f"gs://{self.bucket_name}"

    def _missing(self, rel: str) -> FileNotFoundError:
        return FileNotFoundError(errno.ENOENT, "no such object", self.location(rel))

    def _get(self, rel: str) -> storage.Blob:
        blob = self.bucket.get_blob(self._name(rel))
        if blob is None:
            raise self._missing(rel)
        return blob

    # --- read ----------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        """An object, or a folder (any object under `rel/`), as a local path exists for both."""
        name = self._name(rel)
        if name and self.bucket.blob(name).exists():
            return True
        return any(True for _ in self.client.list_blobs(self.bucket, prefix=self._dir(rel), max_results=1))

    def read_bytes(self, rel: str) -> bytes:
        try:
            return self.bucket.blob(self._name(rel)).download_as_bytes()
        except gexc.NotFound:
            raise self._missing(rel) from None

    def size(self, rel: str) -> int:
        return int(self._get(rel).size)

    def avro_rows(self, rel: str, counted: tuple[int, str] | None = None) -> int:
        blob = self._get(rel)
        if counted is not None and counted[1] and blob.crc32c == counted[1]:
            return counted[0]  # the very bytes whose block headers were counted when written
        # Ranged reads of the version just looked at (a fetched blob carries its generation),
        # so a concurrent replacement cannot splice two versions together.
        with blob.open("rb", chunk_size=_AVRO_READ_CHUNK) as f:
            return count_records_in(f, self.location(rel))

    def crc32c(self, rel: str) -> str | None:
        return self._get(rel).crc32c

    def avro_schema(self, rel: str) -> dict:
        import fastavro

        # A ranged read of the header's first chunk (more only if the schema is longer), not the file.
        with self._get(rel).open("rb", chunk_size=_AVRO_HEADER_CHUNK) as f:
            return fastavro.reader(f).writer_schema

    def avro_offsets(self, rel: str, field: str = "_kafka_offset") -> tuple[int, int | None, int | None]:
        with self._get(rel).open("rb", chunk_size=_AVRO_READ_CHUNK) as f:
            return offset_range_in(f, self.location(rel), field)

    # --- list ----------------------------------------------------------------

    def _files(self, rel_dir: str, pattern: str) -> Iterator[str]:
        """Matching files in name order (the bucket lists so), fetched a page at a time."""
        prefix = self._dir(rel_dir)
        for blob in self.client.list_blobs(self.bucket, prefix=prefix, delimiter="/"):
            base = blob.name[len(prefix):]
            # "" is a folder placeholder object ("dir/"), as some tools write them.
            if base and not base.startswith(".") and fnmatch.fnmatchcase(base, pattern):
                yield self._rel(blob.name)

    def list(self, rel_dir: str, pattern: str = "*") -> list[str]:
        return sorted(self._files(rel_dir, pattern))

    def first(self, rel_dir: str, pattern: str = "*") -> str | None:
        return next(self._files(rel_dir, pattern), None)  # the first page only, mostly

    def subdirs(self, rel_dir: str) -> list[str]:
        prefix = self._dir(rel_dir)
        it = self.client.list_blobs(self.bucket, prefix=prefix, delimiter="/")
        for _ in it:  # the prefixes arrive with the pages
            pass
        names = (p[len(prefix):].rstrip("/") for p in it.prefixes)
        return sorted(n for n in names if n and not n.startswith("."))

    def walk(self, rel_dir: str, suffix: str = "") -> list[str]:
        out = []
        for blob in self.client.list_blobs(self.bucket, prefix=self._dir(rel_dir)):
            base = blob.name.rsplit("/", 1)[-1]
            if base and not base.startswith(".") and base.endswith(suffix):
                out.append(self._rel(blob.name))
        return sorted(out)

    def walk_stats(self, rel_dir: str, suffix: str = "") -> list[tuple[str, int, float]]:
        """The listing carries each object's size and `updated` (the server's clock): no request per file."""
        out = []
        for blob in self.client.list_blobs(self.bucket, prefix=self._dir(rel_dir)):
            base = blob.name.rsplit("/", 1)[-1]
            if base and not base.startswith(".") and base.endswith(suffix):
                out.append((self._rel(blob.name), int(blob.size or 0), blob.updated.timestamp()))
        return sorted(out)

    def glob(self, pattern: str) -> list[str]:
        """What the base definition finds (same depth, hidden files never), listing only the objects
        under the pattern's literal prefix (up to its first wildcard, not just its fixed folders) and
        asking the bucket to match the glob itself (`matchGlob`: GCS's `*` and `?` stay within a
        folder, as the fixed depth makes fnmatch's do; a pattern with `[`, `{` or a backslash, which
        GCS may read otherwise, gets the prefix only). What comes back is filtered here in any case,
        so the bucket's glob only saves listing (the emulator ignores it)."""
        return sorted(rel for rel, _ in self._globbed(pattern))

    def glob_stats(self, pattern: str) -> list[tuple[str, int, float]]:
        """`glob`'s listing, with the size and `updated` (the server's clock) each object carries."""
        return sorted((rel, int(blob.size or 0), blob.updated.timestamp()) for rel, blob in self._globbed(pattern))

    def _globbed(self, pattern: str) -> Iterator[tuple[str, object]]:
        """(rel, blob) of each object `glob` finds, as the listing gives them."""
        pattern = self.check_rel(pattern)
        literal = pattern[:min((i for i in map(pattern.find, "*?[") if i >= 0), default=len(pattern))]
        prefix = "/".join(p for p in (self.prefix, literal) if p) + ("/" if self.prefix and not literal else "")
        full = "/".join(p for p in (self.prefix, pattern) if p)
        depth = pattern.count("/")
        server_glob = None if any(c in full for c in "[]{}\\") else full
        for blob in self.client.list_blobs(self.bucket, prefix=prefix, match_glob=server_glob):
            rel = self._rel(blob.name)
            base = rel.rsplit("/", 1)[-1]
            if base and not base.startswith(".") and rel.count("/") == depth and fnmatch.fnmatchcase(rel, pattern):
                yield rel, blob

    # --- write ---------------------------------------------------------------

    @staticmethod
    def _content_type(rel: str) -> str:
        return "application/json" if rel.endswith(".json") else "application/octet-stream"

    def write_atomic(self, rel: str, data: bytes) -> None:
        # Replacing the whole object with the same bytes is idempotent: safe to retry.
        self.bucket.blob(self._name(rel)).upload_from_string(data, content_type=self._content_type(rel),
                                                             retry=DEFAULT_RETRY)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        try:
            self.bucket.blob(self._name(rel)).upload_from_string(data, content_type=self._content_type(rel),
                                                                 if_generation_match=0)
            return True
        except gexc.PreconditionFailed:
            # Also the answer when a retried request had in fact created it; callers read
            # what is there then, which is theirs.
            return False

    def move(self, src_rel: str, rel: str) -> None:
        src = self._get(src_rel)
        if src.name == self._name(rel):
            return  # onto itself: a copy and a delete would lose it
        dst = self.bucket.blob(self._name(rel))
        token = None
        while True:  # large objects take several rewrite calls
            token, _, _ = dst.rewrite(src, token=token, if_source_generation_match=src.generation,
                                      retry=DEFAULT_RETRY)
            if token is None:
                break
        try:
            src.delete(if_generation_match=src.generation)
        except gexc.NotFound:
            pass  # a retried delete that had gone through

    def delete(self, rel: str) -> None:
        name = self._name(rel)
        blobs = [self.bucket.blob(name)] if name else []
        blobs += list(self.client.list_blobs(self.bucket, prefix=self._dir(rel)))
        for blob in blobs:
            try:
                blob.delete()
            except gexc.NotFound:
                pass  # absent is fine; removed by someone else meanwhile too

    def check_writable(self) -> None:
        probe = self.bucket.blob(self._name(f".write-probe-{uuid.uuid4().hex}"))
        try:
            probe.upload_from_string(b"", if_generation_match=0)
            probe.delete()
        except gexc.NotFound as exc:
            raise OSError(f"cannot write to the landing root {self.root}: bucket gs://{self.bucket_name} does not "
                          f"exist ({exc.message}). Create it, or fix the landing root.") from None
        except Exception as exc:  # noqa: BLE001 - auth, IAM and network failures all mean "not writable"
            detail = getattr(exc, "message", None) or str(exc)
            raise OSError(
                f"cannot create and delete an object under the landing root {self.root} "
                f"({type(exc).__name__}: {detail[:300]}). The credentials ({self.credentials_source}) need "
                f"{WRITER_ROLE} on bucket gs://{self.bucket_name}: `gcloud storage buckets add-iam-policy-binding "
                f"gs://{self.bucket_name} --member=<principal> --role={WRITER_ROLE}`."
            ) from None

    def sweep(self, rel_dir: str, pattern: str, older_than_seconds: float) -> list[str]:
        """A match is an object or a folder (prefix); a folder counts as touched when its
        newest object was, so an attempt still writing into it is never swept."""
        prefix = self._dir(rel_dir)
        pats = self.check_rel(pattern).split("/")
        newest: dict[str, datetime] = {}
        for blob in self.client.list_blobs(self.bucket, prefix=prefix):
            parts = blob.name[len(prefix):].split("/")
            if len(parts) < len(pats) or not all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pats)):
                continue
            key = "/".join(parts[:len(pats)])
            if key not in newest or blob.updated > newest[key]:
                newest[key] = blob.updated
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=older_than_seconds)
        base = self.check_rel(rel_dir)
        removed = []
        for key, updated in sorted(newest.items()):
            if updated < cutoff:
                rel = f"{base}/{key}" if base else key
                self.delete(rel)
                removed.append(rel)
        return removed

    # --- lock ----------------------------------------------------------------

    def _lease(self, blob: storage.Blob) -> _Lease:
        meta = blob.metadata or {}
        try:
            lease = float(meta.get("lease_seconds", self.lease_seconds))
        except ValueError:
            lease = self.lease_seconds
        return _Lease(holder=meta.get("holder", "an unknown holder (no holder metadata)"),
                      generation=int(blob.generation), renewed=blob.updated, lease_seconds=lease)

    def _write_lock(self, name: str, holder: str, if_generation_match: int, **request) -> int | None:
        """Write the lock object only over the version named; its new generation, or None if
        another version is there (or, for 0, any). `request`: the upload's timeout and retry."""
        blob = self.bucket.blob(name)
        blob.metadata = {"holder": holder, "lease_seconds": str(self.lease_seconds)}
        body = {"holder": holder, "lease_seconds": self.lease_seconds,
                "lease_expires_approx": (datetime.now(timezone.utc)
                                         + timedelta(seconds=self.lease_seconds)).isoformat(timespec="seconds"),
                "what": "a kafka_landing lock; its holder renews it. Delete it only if the holder is stuck."}
        try:
            blob.upload_from_string(json.dumps(body).encode(), content_type="application/json",
                                    if_generation_match=if_generation_match, **request)
        except gexc.PreconditionFailed:
            return None
        return int(blob.generation)

    def _current_lease(self, name: str) -> _Lease | None:
        blob = self.bucket.get_blob(name)
        return None if blob is None else self._lease(blob)

    def _acquire(self, name: str, holder: str) -> int:
        uri = f"gs://{self.bucket_name}/{name}"
        deadline = time.monotonic() + self.wait_timeout_seconds
        delay, max_delay = 0.05, min(5.0, self.lease_seconds / 4)
        while True:
            gen = self._write_lock(name, holder, 0)
            if gen is not None:
                return gen
            cur = self._current_lease(name)
            if cur is None:
                continue  # released meanwhile: try again at once
            if cur.holder == holder:
                return cur.generation  # our own create, answered 412 on a retry
            if cur.expired():
                gen = self._write_lock(name, holder, cur.generation)
                if gen is not None:
                    log.warning("took over lock %s from %s, whose lease expired at %s (holder gone?)",
                                uri, cur.holder, cur.expires.isoformat(timespec="seconds"))
                    return gen
                continue  # someone renewed it or took it first
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockTimeout(
                    f"gave up after {self.wait_timeout_seconds:.0f}s waiting for lock {uri}: held by {cur.holder}, "
                    f"last renewed {cur.renewed.isoformat(timespec='seconds')}, lease expires "
                    f"{cur.expires.isoformat(timespec='seconds')} unless renewed again. A live holder renews it "
                    f"every {cur.lease_seconds / 3:.0f}s or so, a dead one loses it when the lease expires: wait and "
                    f"retry. If the holder is alive but stuck, stop it (or, if you are sure it is gone, "
                    f"`gcloud storage rm {uri}`)."
                )
            time.sleep(min(left, delay * random.uniform(0.5, 1.0)))
            delay = min(delay * 2, max_delay)

    @contextlib.contextmanager
    def lock(self, rel: str) -> Iterator[HeldLock]:
        name = self._name(rel)
        holder = f"{socket.gethostname()}:pid={os.getpid()}:{uuid.uuid4().hex[:12]}"
        held = _HeldLock(self, name, holder, self._acquire(name, holder))
        held.start()
        try:
            yield held
        except BaseException:
            held.release()
            raise
        held.release()
        if held.lost:
            raise LockLost(f"lock gs://{self.bucket_name}/{name} was lost while held by {holder}: {held.lost}. "
                           f"Another holder may have run at the same time; retry the operation.")


def _generation(blob: storage.Blob | None) -> int:
    """What `ifGenerationMatch` says of a version just read: its generation, or 0 for "absent"."""
    return int(blob.generation) if blob is not None else 0


class _HeldLock(HeldLock):
    """A lock while held: a daemon thread renews its lease with `ifGenerationMatch` on its
    own version, so it notices (and stops) when anyone else has taken it over; `fence()`
    checks the same right before a commit, since the thread only notices at its next renewal;
    the writes it makes are conditional on their object's generation and stamped with this
    acquisition's fencing token (the module's docstring says why)."""

    def __init__(self, store: GcsStore, name: str, holder: str, generation: int):
        self.store, self.name, self.holder, self.generation = store, name, holder, generation
        self.token = generation  # this acquisition's fencing token; renewals change `generation` only
        self._stamp = {FENCE_LOCK: name, FENCE_TOKEN: str(generation), FENCE_HOLDER: holder}
        self.uri = f"gs://{store.bucket_name}/{name}"
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease {self.uri}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def fence(self) -> None:
        """LockLost unless the lock object is still ours (our generation, or a later one our own
        renewal wrote: the holder id is unique to this acquisition) and its lease has not run out
        by the time the read returns. One metadata GET."""
        if self.lost is None:
            blob = self.store.bucket.get_blob(self.name)
            cur = None if blob is None else self.store._lease(blob)
            if cur is None or (cur.generation != self.generation and cur.holder != self.holder):
                self.lost = (f"taken over by {cur.holder}" if cur else "deleted by someone else") + " while held"
                log.error("lock %s lost while held by %s: %s", self.uri, self.holder, self.lost)
            elif cur.expired():
                # Still ours, but anyone may take it over now: do not commit on it.
                raise LockLost(f"lock {self.uri} held by {self.holder}: its lease ran out at "
                               f"{cur.expires.isoformat(timespec='seconds')} (not renewed since "
                               f"{cur.renewed.isoformat(timespec='seconds')}), so another holder may take it over "
                               "at any moment. Nothing was committed past this point; retry the operation.")
        if self.lost:
            raise LockLost(f"lock {self.uri} was lost while held by {self.holder}: {self.lost}. Another holder may "
                           "be running; nothing was committed past this point. Retry the operation.")

    # --- the writes the lock protects -------------------------------------------------------

    def _later_holder(self, blob: storage.Blob | None) -> str | None:
        """The holder that wrote `blob` under this lock after this one took it, or None if none did
        (absent, written by this holder or an earlier one, under another lock, or under none)."""
        meta = (blob.metadata or {}) if blob is not None else {}
        if meta.get(FENCE_LOCK) != self.name:
            return None
        try:
            token = int(meta.get(FENCE_TOKEN, ""))
        except ValueError:
            return None
        return (meta.get(FENCE_HOLDER) or "another holder") if token > self.token else None

    def _current(self, rel: str, what: str) -> storage.Blob | None:
        """The object as it stands (None: absent) if the lock is still ours (`fence()`); LockTakenOver if
        a later holder of the lock wrote it (checked first: it says more than "the lock was lost")."""
        blob = self.store.bucket.get_blob(self.store._name(rel))
        later = self._later_holder(blob)
        if later is None:
            self.fence()
            return blob
        self.lost = self.lost or f"taken over by {later}"
        log.error("lock %s lost while held by %s: %s wrote %s since", self.uri, self.holder, later,
                  self.store.location(rel))
        raise LockTakenOver(
            f"{what} {self.store.location(rel)} refused: lock {self.uri} was taken over by {later} after the "
            f"lease of {self.holder} ran out (it stalled or could not renew), and that holder has written "
            f"{self.store.location(rel)} since. What it wrote stands; this write was not made, and this attempt "
            "stops here and must not make it again: what is left to do is the new holder's (or a later run's, "
            "from the landing root as it is then).")

    def _conditional(self, rel: str, what: str, write) -> None:
        """`write(blob)`: one request conditional on the version `blob` of `rel` just checked (None:
        it must be absent). A 412 says the object changed since: check it again, and again."""
        for _ in range(_WRITE_TRIES):
            blob = self._current(rel, what)
            try:
                write(blob)
                return
            except gexc.PreconditionFailed:
                continue  # changed since it was read: by a later holder (refused above) or outside the lock
        raise WriteContended(f"{what} {self.store.location(rel)} under lock {self.uri}: the object changed "
                             f"{_WRITE_TRIES} times between reading it and writing it, each time by a writer that "
                             "does not take the lock; nothing was written, try again later")

    def write_atomic(self, rel: str, data: bytes) -> None:
        name = self.store._name(rel)

        def upload(blob: storage.Blob | None) -> None:
            target = self.store.bucket.blob(name)
            target.metadata = dict(self._stamp)
            # A retried upload that had gone through answers 412: read again, it is ours, write it again.
            target.upload_from_string(data, content_type=self.store._content_type(rel),
                                      if_generation_match=_generation(blob), retry=DEFAULT_RETRY)

        self._conditional(rel, "replacing", upload)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Absent objects only, as the store's, stamped: False if it exists, LockTakenOver if a later
        holder of the lock made it (this holder lost the lock, and learns it here)."""
        self.fence()
        target = self.store.bucket.blob(self.store._name(rel))
        target.metadata = dict(self._stamp)
        try:
            target.upload_from_string(data, content_type=self.store._content_type(rel), if_generation_match=0)
            return True
        except gexc.PreconditionFailed:
            # Also the answer when a retried request had in fact created it: then it is ours, and no
            # later holder's; the caller reads what is there.
            self._current(rel, "creating")
            return False

    def move(self, src_rel: str, rel: str) -> None:
        src = self.store._get(src_rel)
        name = self.store._name(rel)
        if src.name == name:
            self.fence()
            return  # onto itself: a copy and a delete would lose it

        def rewrite(blob: storage.Blob | None) -> None:
            dst = self.store.bucket.blob(name)
            dst.metadata = {**(src.metadata or {}), **self._stamp}
            dst.content_type = src.content_type
            token = None
            while True:  # large objects take several rewrite calls, each under the same conditions
                token, _, _ = dst.rewrite(src, token=token, if_generation_match=_generation(blob),
                                          if_source_generation_match=src.generation, retry=DEFAULT_RETRY)
                if token is None:
                    break

        self._conditional(rel, "moving a file onto", rewrite)
        try:
            src.delete(if_generation_match=src.generation)  # staging: no one else's
        except gexc.NotFound:
            pass  # a retried delete that had gone through

    def delete(self, rel: str) -> None:
        """An object, or everything under a folder, each delete conditional on the version checked."""
        store = self.store
        rels = [rel] if store._name(rel) else []
        rels += [store._rel(b.name) for b in store.client.list_blobs(store.bucket, prefix=store._dir(rel))]

        def remove(blob: storage.Blob | None) -> None:
            if blob is None:
                return  # absent is fine
            try:
                store.bucket.blob(blob.name).delete(if_generation_match=blob.generation)
            except gexc.NotFound:
                pass  # removed meanwhile (or a retried delete that had gone through)

        for one in rels:
            self._conditional(one, "deleting", remove)

    def _renew_loop(self) -> None:
        wait = self.store.renew_seconds
        while not self._stop.wait(wait):
            try:
                # A hung request must not eat the lease: bounded, and retried by this loop.
                gen = self.store._write_lock(self.name, self.holder, self.generation,
                                             timeout=max(1.0, self.store.renew_seconds), retry=None)
                if gen is None:
                    cur = self.store._current_lease(self.name)
                    if cur is not None and cur.holder == self.holder:
                        gen = cur.generation  # our renewal went through; its answer was lost
                    else:
                        self.lost = (f"taken over by {cur.holder}" if cur else "deleted by someone else") + \
                            " after the lease lapsed"
                        log.error("lock %s lost while held by %s: %s", self.uri, self.holder, self.lost)
                        return
                self.generation = gen
                wait = self.store.renew_seconds
            except Exception as exc:  # noqa: BLE001 - transient: try again soon, the lease has slack
                log.warning("renewing lock %s failed (%s); retrying", self.uri, exc)
                wait = min(self.store.renew_seconds, 1.0)

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.lost:
            return  # it is someone else's now: never delete theirs
        try:
            self.store.bucket.blob(self.name).delete(if_generation_match=self.generation)
        except gexc.NotFound:
            pass  # a retried delete that had gone through
        except gexc.PreconditionFailed:
            cur = self.store._current_lease(self.name)
            self.lost = f"taken over by {cur.holder if cur else 'someone'} after the lease lapsed"
