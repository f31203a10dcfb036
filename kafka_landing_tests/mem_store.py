"""A landing root in memory that counts what it is asked: for tests that land a year of hours and
measure what each step costs in store calls (what a bucket bills and waits for), not in wall time.

It keeps `LandingStore`'s contracts for one process: writes are whole, `create_exclusive` is first
writer wins, a lock is held by one block at a time (a threading lock; nothing here dies). Each file
keeps when it was written, on `clock` (a test sets it to write history at the times it wants)."""

from __future__ import annotations

import contextlib
import fnmatch
import io
import threading
import time
from collections import Counter
from typing import Iterator

import fastavro

from kafka_landing.avro_files import offset_range_in
from kafka_landing.store.base import HeldLock, LandingStore


class MemStore(LandingStore):
    """Files in a dict, with each folder's files and subfolders indexed, so a listing costs what the
    folder holds and not what the whole root holds. `calls` counts every call by kind."""

    def __init__(self, name: str = "mem"):
        self.root = f"mem://{name}"
        self.files: dict[str, bytes] = {}
        self._names: dict[str, set[str]] = {}  # folder -> names of its files
        self._dirs: dict[str, set[str]] = {}  # folder -> names of its subfolders
        self._locks: dict[str, threading.Lock] = {}
        self.calls: Counter = Counter()
        self.written: dict[str, float] = {}  # file -> when it was written (epoch seconds, on `clock`)
        self.clock = time.time

    # --- bookkeeping ---------------------------------------------------------------------

    def _count(self, kind: str) -> None:
        self.calls[kind] += 1

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def _add(self, rel: str) -> None:
        self.written[rel] = self.clock()
        folder, _, name = rel.rpartition("/")
        self._names.setdefault(folder, set()).add(name)
        while folder:
            parent, _, sub = folder.rpartition("/")
            self._dirs.setdefault(parent, set()).add(sub)
            folder = parent

    def _remove(self, rel: str) -> None:
        folder, _, name = rel.rpartition("/")
        self.files.pop(rel, None)
        self.written.pop(rel, None)
        self._names.get(folder, set()).discard(name)

    # --- read ----------------------------------------------------------------------------

    def location(self, rel: str) -> str:
        return f"{self.root}/{self.check_rel(rel)}"

    def exists(self, rel: str) -> bool:
        self._count("exists")
        rel = self.check_rel(rel)
        return rel in self.files or bool(self._names.get(rel)) or bool(self._dirs.get(rel))

    def read_bytes(self, rel: str) -> bytes:
        self._count("read")
        try:
            return self.files[self.check_rel(rel)]
        except KeyError:
            raise FileNotFoundError(rel) from None

    def size(self, rel: str) -> int:
        self._count("size")
        return len(self.files[self.check_rel(rel)])

    def avro_rows(self, rel: str, counted: tuple[int, str] | None = None) -> int:
        self._count("avro_rows")
        return sum(1 for _ in fastavro.reader(io.BytesIO(self.files[self.check_rel(rel)])))

    def avro_offsets(self, rel: str, field: str = "_kafka_offset") -> tuple[int, int | None, int | None]:
        self._count("avro_offsets")
        return offset_range_in(io.BytesIO(self.files[self.check_rel(rel)]), rel, field)

    # --- list ----------------------------------------------------------------------------

    def list(self, rel_dir: str, pattern: str = "*") -> list[str]:
        self._count("list")
        folder = self.check_rel(rel_dir)
        return sorted(f"{folder}/{n}" if folder else n for n in self._names.get(folder, ())
                      if not n.startswith(".") and fnmatch.fnmatchcase(n, pattern))

    def subdirs(self, rel_dir: str) -> list[str]:
        self._count("list")
        folder = self.check_rel(rel_dir)
        return sorted(d for d in self._dirs.get(folder, ()) if not d.startswith(".") and self._holds(
            f"{folder}/{d}" if folder else d))

    def _holds(self, folder: str) -> bool:
        return bool(self._names.get(folder)) or any(self._holds(f"{folder}/{d}") for d in self._dirs.get(folder, ()))

    def walk(self, rel_dir: str, suffix: str = "") -> list[str]:
        self._count("list")
        folder = self.check_rel(rel_dir)
        out, todo = [], [folder]
        while todo:
            f = todo.pop()
            out += [f"{f}/{n}" if f else n for n in self._names.get(f, ()) if n.endswith(suffix)
                    and not n.startswith(".")]
            todo += [f"{f}/{d}" if f else d for d in self._dirs.get(f, ())]
        return sorted(out)

    def walk_stats(self, rel_dir: str, suffix: str = "") -> list[tuple[str, int, float]]:
        found = self.walk(rel_dir, suffix)  # one listing, as a bucket's carries each object's size and time
        return [(rel, len(self.files[rel]), self.written[rel]) for rel in found]

    # --- write ---------------------------------------------------------------------------

    def write_atomic(self, rel: str, data: bytes) -> None:
        self._count("write")
        rel = self.check_rel(rel)
        self.files[rel] = bytes(data)
        self._add(rel)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        self._count("write")
        rel = self.check_rel(rel)
        if rel in self.files:
            return False
        self.files[rel] = bytes(data)
        self._add(rel)
        return True

    def move(self, src_rel: str, rel: str) -> None:
        self._count("write")
        data = self.files[self.check_rel(src_rel)]
        self._remove(self.check_rel(src_rel))
        self.files[self.check_rel(rel)] = data
        self._add(self.check_rel(rel))

    def delete(self, rel: str) -> None:
        self._count("delete")
        rel = self.check_rel(rel)
        if rel in self.files:
            self._remove(rel)
            return
        for f in [f for f in self.files if f.startswith(f"{rel}/")]:
            self._remove(f)

    def check_writable(self) -> None:
        return None

    def sweep(self, rel_dir: str, pattern: str, older_than_seconds: float) -> list[str]:
        return []  # nothing here gets old

    @contextlib.contextmanager
    def lock(self, rel: str) -> Iterator[HeldLock]:
        self._count("lock")
        lock = self._locks.setdefault(self.check_rel(rel), threading.Lock())
        with lock:
            held = HeldLock()
            held.store = self  # its fenced writes go through this store (nothing here loses a lock)
            yield held


__all__ = ["MemStore"]
