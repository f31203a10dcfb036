"""The landing root as a local folder: the embedded default.

Atomicity from the file system: `write_atomic` renames a fsynced temporary file
over the target, `create_exclusive` hard-links (which fails if the target
exists), `lock` is a flock that dies with its process; its fence checks that the lock file is
still the one locked (removed and created again, it is someone else's). A flock has no lease:
its holder keeps it however long it stalls, so no other holder can take it over between the
check and the write, and the held lock's writes are the check and then the store's write
(`base.HeldLock`). The one way to lose it is its file being removed (by hand, a sweep): that
stays check-then-act, since a file system has no write conditional on another file.
Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator

from kafka_landing.avro_files import count_records, offset_range_in
from kafka_landing.store.base import HeldLock, LandingStore, LockLost


class LocalStore(LandingStore):
    def __init__(self, root: str | os.PathLike):
        self._root = Path(root).expanduser().resolve()
        self.root = str(self._root)

    def _path(self, rel: str) -> Path:
        rel = self.check_rel(rel)
        return self._root / rel if rel else self._root

    def location(self, rel: str) -> str:
        # The plain path: a file:// URI would show `hour%3D...`, which no shell finds.
        return str(self._path(rel))

    def exists(self, rel: str) -> bool:
        return self._path(rel).exists()

    def read_bytes(self, rel: str) -> bytes:
        return self._path(rel).read_bytes()

    def size(self, rel: str) -> int:
        return self._path(rel).stat().st_size

    def avro_rows(self, rel: str, counted: tuple[int, str] | None = None) -> int:
        return count_records(str(self._path(rel)))  # a local walk is cheap: always counted again

    def avro_schema(self, rel: str) -> dict:
        import fastavro

        with open(self._path(rel), "rb") as f:
            return fastavro.reader(f).writer_schema  # reads the header, not the blocks

    def avro_offsets(self, rel: str, field: str = "_kafka_offset") -> tuple[int, int | None, int | None]:
        with open(self._path(rel), "rb") as f:
            return offset_range_in(f, str(self._path(rel)), field)

    def _rel(self, p: Path) -> str:
        return str(p.relative_to(self._root))

    def list(self, rel_dir: str, pattern: str = "*") -> list[str]:
        base = self._path(rel_dir)
        try:
            with os.scandir(base) as it:
                names = [e.name for e in it if e.is_file() and not e.name.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(self._rel(base / n) for n in names if fnmatch.fnmatchcase(n, pattern))

    def subdirs(self, rel_dir: str) -> list[str]:
        try:
            with os.scandir(self._path(rel_dir)) as it:
                return sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def walk(self, rel_dir: str, suffix: str = "") -> list[str]:
        base = self._path(rel_dir)
        if not base.is_dir():
            return []
        return sorted(self._rel(Path(d) / n) for d, _, files in os.walk(base) for n in files
                      if n.endswith(suffix) and not n.startswith("."))

    def walk_stats(self, rel_dir: str, suffix: str = "") -> list[tuple[str, int, float]]:
        out = []
        for rel in self.walk(rel_dir, suffix):
            try:
                st = self._path(rel).stat()
            except FileNotFoundError:
                continue  # removed meanwhile
            out.append((rel, st.st_size, st.st_mtime))
        return out

    def glob(self, pattern: str) -> list[str]:
        # The file system's own glob: it descends only into folders the pattern can match.
        return sorted(self._rel(p) for p in self._root.glob(self.check_rel(pattern))
                      if p.is_file() and not p.name.startswith("."))

    def _tmp(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"

    def write_atomic(self, rel: str, data: bytes) -> None:
        target = self._path(rel)
        tmp = self._tmp(target)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        target = self._path(rel)
        tmp = self._tmp(target)
        tmp.write_bytes(data)
        try:
            os.link(tmp, target)  # fails if target exists: atomic first-writer-wins
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def move(self, src_rel: str, rel: str) -> None:
        target = self._path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._path(src_rel), target)

    def delete(self, rel: str) -> None:
        p = self._path(rel)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    def check_writable(self) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        probe = self._root / f".write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()

    def sweep(self, rel_dir: str, pattern: str, older_than_seconds: float) -> list[str]:
        base = self._path(rel_dir)
        if not base.is_dir():
            return []
        cutoff = time.time() - older_than_seconds
        removed = []
        for p in base.glob(self.check_rel(pattern)):
            try:
                if p.stat().st_mtime < cutoff:
                    self.delete(self._rel(p))
                    removed.append(self._rel(p))
            except FileNotFoundError:
                pass  # swept by someone else meanwhile
        return removed

    @contextlib.contextmanager
    def lock(self, rel: str) -> Iterator[HeldLock]:
        p = self._path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield _HeldFlock(self, p, f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


class _HeldFlock(HeldLock):
    """A flock holds while its process lives, but only on the file it locked: once that file is
    removed (by hand, a sweep), the next locker creates and locks a new one beside us."""

    def __init__(self, store: LocalStore, path: Path, fd: int):
        self.store, self.path, self.fd = store, path, fd

    def fence(self) -> None:
        mine = os.fstat(self.fd)
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise LockLost(f"lock {self.path} was {'removed' if now is None else 'removed and created again'} "
                           "while held: another process may hold it now. Nothing was committed past this point; "
                           "retry the operation.")
