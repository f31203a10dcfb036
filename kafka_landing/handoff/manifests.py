"""Done files: the manifest of one (table, hour), written last, and the one way to read one.

A done file lists every file of the hour with its row count, offsets and
schema id, the topic's dead letters and the slice the hour came from, so a
loader needs nothing else, and a person can trace any row to Kafka.

A done file is the only thing a load reads to know what an hour holds, and
tools other than kafka_landing may write them. One copied to the wrong folder,
or listing a file of another hour (or `../../etc/passwd`), would load the
wrong rows into the wrong partition, silently. So `read_done_file`, the one
reader every consumer uses, checks the dataset, table and hour inside against
the path and every listed file against that hour's folder
(`tables/<dataset>/<table>/hour=<H>/`, see `naming.table_hour_dir`), and raises
one `DoneFileError` saying whether a retry can help. A warehouse backend reads a
done file, and an event partition's version, as a `Manifest`. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Protocol

from kafka_landing.errors import KafkaLandingError
from kafka_landing.naming import (
    DONE_FILE_RE,
    TABLES_DIR,
    Hour,
    dataset_dir,
    done_file_glob,
    done_file_path,
    hour_folder_tag,
    table_hour_dir,
)

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

    @property
    def target(self) -> str:
        """The warehouse table it loads into: its own."""
        return self.table

    @property
    def partition(self) -> str:
        """The partition it replaces: its landing hour."""
        return self.hour

    @property
    def landed_files(self) -> tuple[LandedFile, ...]:
        return self.files

    def by_landing_hour(self) -> dict[str, tuple[LandedFile, ...]]:
        return {self.hour: self.files}

    def to_dict(self) -> dict:
        return asdict(self)

    def to_bytes(self) -> bytes:
        """The done file as publish writes it: its hash (`content_sha`) names this content."""
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


class Manifest(Protocol):
    """What a warehouse backend reads of the content it loads into one partition: a landing hour's
    `DoneFile`, or a version of an event partition (`event_partitions.EventManifest`). The content's
    hash is handed over beside it (the done file's, the version's `sha256`)."""

    @property
    def dataset(self) -> str: ...

    @property
    def target(self) -> str:
        """The warehouse table the content loads into."""

    @property
    def partition(self) -> str:
        """The partition it replaces whole: a landing hour tag, or an event partition."""

    @property
    def landed_files(self) -> tuple[LandedFile, ...]:
        """Exactly the files the partition holds (an event version's `files` are its entries on disk)."""

    def by_landing_hour(self) -> dict[str, tuple[LandedFile, ...]]:
        """`landed_files` by the landing hour that listed them: what a backend that replaces part of a
        partition (one landing hour's files of an event day) compares."""

    @property
    def rows(self) -> int:
        """The rows of `landed_files`."""

    @property
    def schema_ids(self) -> tuple[int, ...]: ...

    @property
    def attempt(self) -> str:
        """Which writing of the content (a done file's landing attempt, a version's `v<N>`): recorded with the load."""

    def to_bytes(self) -> bytes:
        """The manifest as written."""


_OTHER_HOUR = re.compile(r"^tables/([^/]+)/([^/]+)/hour=([^/]+)/")


def content_sha(content: bytes) -> str:
    """A done file's identity: the SHA-256 of its bytes (markers, ledgers and run keys name it)."""
    return hashlib.sha256(content).hexdigest()


class DoneFileError(KafkaLandingError, ValueError):
    """A done file that cannot be read as what its path says: unreadable, not JSON, contradicting
    its path or listing files outside its hour. Terminal (the same bytes fail the same way) unless
    the store itself did not answer. `gone`: there is no done file at that path; `problems`: what
    is wrong with one that is there, each naming the file (without what to do about it)."""

    def __init__(self, *args, transient: bool | None = None, gone: bool = False, nothing_loaded: bool | None = None,
                 problems: tuple[str, ...] = ()):
        super().__init__(*args, transient=transient, nothing_loaded=nothing_loaded)
        self.gone = gone
        self.problems = tuple(problems)


DoneFileMismatch = DoneFileError  # the name the checks used before there was one reader


def _listed_path_problem(path: object, folder: str) -> str | None:
    if not isinstance(path, str) or not path:
        return "is not a path"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "is an absolute path"
    if "\\" in path:
        return "contains a backslash"
    parts = path.split("/")
    if ".." in parts:
        return "contains '..'"
    if any(p in ("", ".") for p in parts):
        return "contains an empty or '.' path component"
    if not path.startswith(folder):
        other = _OTHER_HOUR.match(path)
        if other:
            return f"belongs to {other[1]}.{other[2]} hour {other[3]}, not to this done file's hour"
        return "lies outside the hour's folder"
    if any(p.startswith(("_", ".")) for p in path[len(folder):].split("/")):
        return "is a hidden or staging file (its name starts with '_' or '.')"
    return None


def done_file_problems(rel: str, raw: object) -> list[str]:
    """Every way the done file at `rel` (relative to the landing root) contradicts its
    path; empty when it can be trusted. Each problem names the done file and the field."""
    m = DONE_FILE_RE.match(rel)
    if not m:
        return [f"done file {rel}: its path is not tables/<dataset>/<table>/hour=<YYYY-MM-DDTHH>/_DONE.json"]
    if not isinstance(raw, dict):
        return [f"done file {rel}: is not a JSON object"]
    problems = []
    for field in ("dataset", "table", "hour"):
        if raw.get(field) != m[field]:
            problems.append(f"done file {rel}: field '{field}' is {raw.get(field)!r}, its path says {m[field]!r}")
    folder = table_hour_dir(m["dataset"], m["table"], m["hour"]) + "/"
    files = raw.get("files")
    if not isinstance(files, list):
        problems.append(f"done file {rel}: field 'files' is not a list")
        files = []
    for i, f in enumerate(files):
        path = f.get("path") if isinstance(f, dict) else None
        why = _listed_path_problem(path, folder)
        if why:
            problems.append(f"done file {rel}: field 'files[{i}].path' {path!r} {why}; "
                            f"a done file lists only files under {folder}")
    if not problems:
        try:
            done = DoneFile.from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            return [f"done file {rel}: is not a done file this version reads ({type(exc).__name__}: {exc})"]
        listed = sum(f.rows for f in done.files)
        if done.rows != listed:
            problems.append(f"done file {rel}: field 'rows' is {done.rows}, its files list {listed} rows")
    return problems


def check_done_file(rel: str, raw: object) -> DoneFile:
    """The parsed done file, or DoneFileMismatch naming every problem and what to do."""
    problems = done_file_problems(rel, raw)
    if problems:
        raise DoneFileError(
            "; ".join(problems)
            + ". Nothing was loaded from it: re-land the hour (materialise its avro_landing asset) "
              "or fix the tool that wrote this done file.",
            nothing_loaded=True, problems=tuple(problems),
        )
    return DoneFile.from_dict(raw)  # type: ignore[arg-type]


def read_done_file(store, rel: str) -> tuple[DoneFile, str]:
    """The done file at `rel` (relative to the landing root), checked against its path, and its
    content hash: the one reader. DoneFileError (`gone` when absent) names the file, every
    problem and what to do; a store that does not answer raises its own (transient) error."""
    try:
        content = store.read_bytes(rel)
    except FileNotFoundError:
        raise DoneFileError(f"done file {store.location(rel)} does not exist: land the hour first",
                            gone=True) from None
    try:
        raw = json.loads(content)
    except ValueError as exc:
        raise DoneFileError(f"done file {store.location(rel)} is not JSON ({exc}); nothing was loaded from it: "
                            "re-land the hour or fix the tool that wrote it", nothing_loaded=True) from None
    return check_done_file(rel, raw), content_sha(content)


def read_done_file_or_none(store, rel: str) -> tuple[DoneFile, str] | None:
    """`read_done_file`, None where there is no done file."""
    try:
        return read_done_file(store, rel)
    except DoneFileError as exc:
        if exc.gone:
            return None
        raise


# --- what is landed, from listings only -------------------------------------------------------

def landed_hours(store, dataset: str, table: str) -> list[Hour]:
    """The hours of (dataset, table) that have a done file, oldest first (one listing)."""
    return sorted(h for rel in store.glob(done_file_glob(dataset, table)) if (h := hour_folder_tag(rel.rsplit("/", 2)[-2])))


def landed_tables(store) -> list[tuple[str, str]]:
    """(dataset, table) folders under tables/: cheap, to warn about unconfigured ones."""
    return [(d, t) for d in store.subdirs(TABLES_DIR) if not d.startswith("_")
            for t in store.subdirs(dataset_dir(d)) if not t.startswith("_")]


def tables_fed_by(store, topic: str, hour: Hour) -> list[tuple[str, str]]:
    """The tables whose done file of the hour names the topic: what the hour fed when it was landed
    before its dead-letter manifest listed its tables. A listing per dataset and a read per table,
    once per such hour (the manifest written now lists them)."""
    fed = []
    for dataset in store.subdirs(TABLES_DIR):
        for table in store.subdirs(f"{TABLES_DIR}/{dataset}"):
            try:
                found = read_done_file_or_none(store, done_file_path(dataset, table, hour))
            except DoneFileError:
                continue  # unreadable: no landing of ours wrote it, nothing of the topic to retire
            if found is not None and found[0].topic == topic:
                fed.append((dataset, table))
    return fed
