"""The landing archive of an hour: what landing it again without Kafka reads, found and checked
before Spark starts. Since the splice writer, a landing file holds each record's body as produced
with its key, headers, timestamp, partition and offset, and the dead letters hold the raw value of
every other record: together with the frozen slice, the hour's records as Kafka had them.

The archive is what the hour's published manifests list: the dead-letter manifest names the
tables the hour fed, their done files name the landing files. It is taken whole or refused, with
the file or count that is wrong named: a listed file missing, a done file of another slice, or
listed records that do not add up to the frozen slice. An offset listed twice (a landing
interrupted while it published under another routing) is found as the records are read
(`read.read_archive`). Pure: no Dagster, no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_landing.errors import LandingError
from kafka_landing.handoff.manifests import (
    DeadLetters,
    DoneFile,
    DoneFileError,
    LandedFile,
    read_done_file,
    tables_fed_by,
)
from kafka_landing.kafka_slices.plan import RETENTION_AFTER_FREEZING, SlicePlan, without_deleted
from kafka_landing.naming import dead_letter_manifest_path, done_file_path
from kafka_landing.store.base import LandingStore


class ArchiveError(LandingError):
    """An hour whose archive cannot be landed again: nothing was read or published. Terminal: the
    same archive fails the same way until a file is restored or the hour is landed from Kafka."""


@dataclass(frozen=True)
class ArchiveHour:
    """An hour's archive: its landing files (each with its schema id) and dead-letter files, and the
    slice they were landed from (the frozen slice less what retention took before, if skipped)."""

    plan: SlicePlan
    files: tuple[LandedFile, ...]
    dead_letter_files: tuple[LandedFile, ...]
    dead_letters: DeadLetters  # as the archive has them: what a landing from it re-drives
    attempt: str  # the landing attempt that wrote it

    @property
    def records(self) -> int:
        return sum(f.rows for f in self.files) + self.dead_letters.rows


def _refused(plan: SlicePlan, why: str) -> ArchiveError:
    return ArchiveError(f"{plan.topic} {plan.hour}: its archive cannot be landed again: {why}. Nothing was read or "
                        "published; the hour's files are untouched.")


def find_archive(store: LandingStore, plan: SlicePlan) -> ArchiveHour:
    """The archive of the frozen slice `plan`, checked; ArchiveError naming what is wrong. A store
    that does not answer raises its own (transient) error.

    A landing killed while it published leaves done files of two attempts (publish.py writes the
    dead-letter manifest, then each table's done file, then retires the tables no longer fed). The
    archive is then the first of these that covers the slice exactly: the manifest's attempt, if
    every table it names has its done file; every done file there is, if the two attempts wrote
    the same files (the same routing); the attempt before, with the dead letters its done files
    list, if only the manifest and some of the new done files were written."""
    manifest_rel = dead_letter_manifest_path(plan.topic, plan.hour)
    manifest = store.read_json(manifest_rel)
    if manifest is None:
        raise _refused(plan, f"it was never landed ({store.location(manifest_rel)} does not exist), so there is no "
                             "archive; land it from Kafka")
    # A manifest written before it listed the tables: the tables whose done file of the hour names the topic.
    fed = [tuple(t) for t in manifest["tables"]] if "tables" in manifest else tables_fed_by(store, plan.topic,
                                                                                                   plan.hour)
    if not fed:
        raise _refused(plan, f"no table's done file names the hour ({store.location(manifest_rel)} lists none)")
    live = _live_done_files(store, plan, [*fed, *(tuple(t) for t in manifest.get("retired", ()))])
    attempt = manifest.get("attempt")
    dl = DeadLetters(rows=manifest["rows"], by_reason=dict(manifest["by_reason"]),
                     files=tuple(LandedFile(**f) for f in manifest["files"]))
    new = {k: d for k, d in live.items() if d.attempt == attempt}
    old = {k: d for k, d in live.items() if d.attempt != attempt}
    choices, counts = [], []
    if all(t in new for t in fed):
        choices.append((new, dl, attempt))
    else:
        counts.append(", ".join(f"{ds}.{t} has no done file of attempt {attempt}" for ds, t in fed if (ds, t) not in new))
    if old:
        choices.append((live, dl, attempt))
        if len({d.attempt for d in old.values()}) == 1:
            previous = next(iter(old.values()))
            choices.append((old, previous.dead_letters, previous.attempt))
    for done, dead, by in choices:
        found = _covering(store, plan, done, dead, by, counts)
        if found is not None:
            return found
    attempts = sorted({d.attempt for d in live.values()} | {str(attempt)})
    raise _refused(plan, f"no landing's done files and dead letters cover its slice ({'; '.join(counts)}"
                         f"; landing attempts {', '.join(attempts)}): a landing interrupted while it published, or a "
                         "done file removed. Restore the hour's done files from a copy, or land it from Kafka while "
                         "Kafka holds its offsets")


def _live_done_files(store: LandingStore, plan: SlicePlan, tables) -> dict[tuple, DoneFile]:
    """{(dataset, table): done file} of the tables that still list the hour's records (not retired)."""
    live = {}
    for dataset, table in tables:
        rel = done_file_path(dataset, table, plan.hour)
        try:
            d, _sha = read_done_file(store, rel)
        except DoneFileError as exc:
            if exc.transient:
                raise
            if exc.gone:
                continue  # not written yet (an interrupted landing), or never: the coverage says which
            raise _refused(plan, f"the done file of {dataset}.{table} cannot be read ({exc})") from None
        if d.topic != plan.topic:
            raise _refused(plan, f"{store.location(rel)} is topic {d.topic!r}'s")
        if not d.retired:
            live[(dataset, table)] = d
    return live


def _covering(store: LandingStore, plan: SlicePlan, done: dict[tuple, DoneFile], dl: DeadLetters, attempt,
              counts: list[str]) -> ArchiveHour | None:
    """The archive of these done files and dead letters if they hold every record of the slice once
    by their counts (each of their files there), else None with why in `counts`."""
    if not done:
        return None
    first = next(iter(done.values()))
    # What retention took before the hour was landed (skipped on request): the slice it was landed from.
    skipped = [s for s in first.skipped if s.get("reason") == RETENTION_AFTER_FREEZING]
    landed_plan = without_deleted(plan, {s["partition"]: s["end"] for s in skipped})
    for (dataset, table), d in done.items():
        slice_partitions = [(p["partition"], p["start"], p["end"]) for p in d.slice.get("partitions", ())]
        if slice_partitions != [(p.partition, p.start, p.end) for p in landed_plan.partitions]:
            raise _refused(plan, f"{store.location(done_file_path(dataset, table, plan.hour))} was landed from another "
                                 f"slice ({slice_partitions}) than the frozen one")
    files = tuple(f for d in done.values() for f in d.files)
    listed = sum(f.rows for f in files) + dl.rows
    expected = landed_plan.records - first.offsets_without_record
    if listed != expected:
        counts.append(f"{', '.join(sorted(f'{ds}.{t}' for ds, t in done))} and {dl.rows} dead letters list {listed} "
                      f"records, the slice less offsets without a record holds {expected}")
        return None
    there: dict[str, set[str]] = {}  # folder -> its files: one listing per folder, not a request per file
    for f in [*files, *dl.files]:
        folder = f.path.rsplit("/", 1)[0]
        if folder not in there:
            there[folder] = set(store.list(folder, "*.avro"))
        if f.path not in there[folder]:
            raise _refused(plan, f"{store.location(f.path)}, listed by its done file, does not exist; restore it from "
                                 "a copy")
    return ArchiveHour(landed_plan, files, dl.files, dl, str(attempt))
