"""The landing root: where slice manifests, landing files, dead letters and done
files live, with the few atomic operations the contracts rest on.

- `write_atomic`: write to a temporary name, then rename; a reader sees the old
  file or the new one, never half of one.
- `create_exclusive`: first writer wins; used to freeze slice manifests.
- `lock`: one planner per topic at a time.

The embedded default is a local folder. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator

from kafka_landing.avro_files import count_records


class LandingStore:
    def __init__(self, root: str | os.PathLike):
        root = str(root)
        if root.startswith("gs://"):
            raise ValueError(
                f"landing root {root!r}: gs:// roots are not supported by this version yet; "
                "use a local folder (or a mounted bucket)"
            )
        self.root = Path(root).expanduser().resolve()

    def path(self, rel: str) -> Path:
        p = (self.root / rel).resolve()
        if p != self.root and self.root not in p.parents:
            raise ValueError(f"path {rel!r} escapes the landing root {self.root}")
        return p

    def location(self, rel: str) -> str:
        """Where `rel` is, as a person pastes it into a shell or a reader opens it: the plain
        path (a file:// URI would show `hour%3D...`, which no shell finds)."""
        return str(self.path(rel))

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def read_bytes(self, rel: str) -> bytes:
        return self.path(rel).read_bytes()

    def read_json(self, rel: str) -> dict | None:
        try:
            return json.loads(self.path(rel).read_text())
        except FileNotFoundError:
            return None

    def _tmp(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"

    def write_atomic(self, rel: str, data: bytes) -> None:
        target = self.path(rel)
        tmp = self._tmp(target)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def write_json_atomic(self, rel: str, obj: dict) -> None:
        self.write_atomic(rel, json.dumps(obj, indent=2, sort_keys=True).encode())

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Write `rel` only if it does not exist yet; False if someone else won."""
        target = self.path(rel)
        tmp = self._tmp(target)
        tmp.write_bytes(data)
        try:
            os.link(tmp, target)  # fails if target exists: atomic first-writer-wins
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def move(self, src: str | Path, rel: str) -> None:
        """Move a finished file into place, replacing one of the same name atomically."""
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, target)

    def list(self, rel_dir: str, pattern: str = "*") -> list[str]:
        base = self.path(rel_dir)
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.glob(pattern) if not p.name.startswith("."))

    def glob(self, pattern: str) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.glob(pattern))

    def avro_rows(self, rel: str) -> int:
        """Rows of an Avro container file, from its block headers (AvroFileError if not whole)."""
        return count_records(str(self.path(rel)))

    def size(self, rel: str) -> int:
        return self.path(rel).stat().st_size

    def mtime_ns(self, rel: str) -> int:
        return self.path(rel).stat().st_mtime_ns

    def delete(self, rel: str) -> None:
        p = self.path(rel)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    def check_writable(self) -> None:
        """Raise OSError unless a file can be created and removed under the root."""
        self.root.mkdir(parents=True, exist_ok=True)
        probe = self.root / f".write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()

    def sweep(self, rel_dir: str, pattern: str, older_than_seconds: float) -> list[str]:
        """Remove what matches `pattern` under `rel_dir` and was not touched for `older_than_seconds`:
        the debris of attempts killed before they could clean up. Returns what was removed."""
        base = self.path(rel_dir)
        if not base.is_dir():
            return []
        cutoff = time.time() - older_than_seconds
        removed = []
        for p in base.glob(pattern):
            try:
                if p.stat().st_mtime < cutoff:
                    self.delete(str(p.relative_to(self.root)))
                    removed.append(str(p.relative_to(self.root)))
            except FileNotFoundError:
                pass  # swept by someone else meanwhile
        return removed

    def scratch_dir(self, rel_dir: str) -> Path:
        """A fresh private folder under `rel_dir/_attempts`, for one attempt's files."""
        p = self.path(f"{rel_dir}/_attempts/{uuid.uuid4().hex}")
        p.mkdir(parents=True)
        return p

    @contextlib.contextmanager
    def lock(self, rel: str) -> Iterator[None]:
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
