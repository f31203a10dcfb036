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
from kafka_landing.handoff.manifests import DeadLetters, DoneFile, DoneFileError, LandedFile, read_done_file
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
    that does not answer raises its own (transient) error."""
    manifest_rel = dead_letter_manifest_path(plan.topic, plan.hour)
    manifest = store.read_json(manifest_rel)
    if manifest is None:
        raise _refused(plan, f"it was never landed ({store.location(manifest_rel)} does not exist), so there is no "
                             "archive; land it from Kafka")
    tables = [tuple(t) for t in [*manifest.get("tables", ()), *manifest.get("retired", ())]]
    if not tables:
        raise _refused(plan, f"{store.location(manifest_rel)} names no table the hour fed (a landing of before the "
                             "manifest listed them); land the hour from Kafka once, or replay it with a later archive")
    done: dict[str, DoneFile] = {}  # location -> done file
    for dataset, table in tables:
        rel = done_file_path(dataset, table, plan.hour)
        try:
            d, _sha = read_done_file(store, rel)
        except DoneFileError as exc:
            if exc.transient:
                raise
            raise _refused(plan, f"the done file of {dataset}.{table} cannot be read ({exc})") from None
        if d.topic != plan.topic:
            raise _refused(plan, f"{store.location(rel)} is topic {d.topic!r}'s")
        done[store.location(rel)] = d
    # A retired done file (a table the hour fed before a routing change) lists nothing, from its old slice.
    first = next((d for d in done.values() if not d.retired), next(iter(done.values())))
    # What retention took before the hour was landed (skipped on request): the slice it was landed from.
    skipped = [s for s in first.skipped if s.get("reason") == RETENTION_AFTER_FREEZING]
    landed_plan = without_deleted(plan, {s["partition"]: s["end"] for s in skipped})
    for where, d in done.items():
        if d.retired:
            continue
        slice_partitions = [(p["partition"], p["start"], p["end"]) for p in d.slice.get("partitions", ())]
        if slice_partitions != [(p.partition, p.start, p.end) for p in landed_plan.partitions]:
            raise _refused(plan, f"{where} was landed from another slice ({slice_partitions}) than the frozen one")
    dl = DeadLetters(rows=manifest["rows"], by_reason=dict(manifest["by_reason"]),
                     files=tuple(LandedFile(**f) for f in manifest["files"]))
    files = tuple(f for d in done.values() for f in d.files)
    for f in [*files, *dl.files]:
        if not store.exists(f.path):
            raise _refused(plan, f"{store.location(f.path)}, listed by its done file, does not exist; restore it from "
                                 "a copy")
    listed = sum(f.rows for f in files) + dl.rows
    expected = landed_plan.records - first.offsets_without_record
    if listed != expected:
        attempts = sorted({d.attempt for d in done.values()} | {manifest.get("attempt", "?")})
        raise _refused(plan, f"its done files and dead letters list {listed} records, the slice of "
                             f"{landed_plan.records} offsets less {first.offsets_without_record} without a record "
                             f"holds {expected} (landing attempts {', '.join(attempts)}: a landing interrupted while "
                             "it published, or a file listed twice)")
    return ArchiveHour(landed_plan, files, dl.files, dl, str(manifest.get("attempt", first.attempt)))
