"""The landing conservation check, from evidence independent of the run that landed the hour.

The slice manifest says how many offsets hour H holds. The files the done files and
the dead-letter manifest list say, through their Avro block headers (no record
decoded), how many rows were written. The done file says how many offsets Kafka
returned no record for (markers, aborted records, compaction). The hour is conserved
when files + dead letters + those offsets (+ any range retention deleted before landing
that the done files list as skipped, on request) = the slice, every listed file exists,
holds what its manifest says and lies inside the slice. Deleting, truncating or dropping
any file breaks it. Pure: no Dagster, no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka_landing.avro_files import AvroFileError
from kafka_landing.config import TopicConfig
from kafka_landing.kafka_slices.plan import SlicePlan
from kafka_landing.handoff.manifests import DoneFile, DoneFileError, LandedFile, read_done_file
from kafka_landing.naming import (
    dead_letter_dir,
    dead_letter_manifest_path,
    done_file_path,
)
from kafka_landing.store.base import LandingStore


@dataclass
class Conservation:
    slice_records: int
    landed_rows: int = 0
    dead_letters: int = 0
    offsets_without_record: int = 0
    skipped: int = 0  # deleted by retention after freezing, skipped on request and listed in the done files
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and (
            self.landed_rows + self.dead_letters + self.offsets_without_record + self.skipped == self.slice_records
        )

    def metadata(self) -> dict:
        return {
            "slice_records": self.slice_records, "landed_rows": self.landed_rows,
            "dead_letters": self.dead_letters, "offsets_without_record": self.offsets_without_record,
            "skipped": self.skipped,
            "problems": self.problems[:20],
        }


def _count(store: LandingStore, f: LandedFile, out: Conservation) -> int:
    rel, listed_rows = f.path, f.rows
    if not store.exists(rel):
        out.problems.append(f"listed file {rel} does not exist")
        return 0
    try:
        n = store.avro_rows(rel, counted=f.counted)
    except AvroFileError as exc:
        out.problems.append(f"{rel} is not a whole Avro file: {exc}")
        return 0
    if n != listed_rows:
        out.problems.append(f"{rel} holds {n} rows, its manifest lists {listed_rows}")
    return n


def _done_file(store: LandingStore, rel: str, out: Conservation, missing_ok: bool = False,
               why: str = "") -> DoneFile | None:
    """The done file at `rel` through the one reader; None, with its problem in `out`, where it
    is missing (unless `missing_ok`) or cannot be trusted. A store that does not answer raises."""
    try:
        return read_done_file(store, rel)[0]
    except DoneFileError as exc:
        if exc.transient:
            raise
        if not exc.gone:
            out.problems.append(f"{why}{exc}")
        elif not missing_ok:
            out.problems.append(f"no done file {rel}")
        return None


def check_landed_hour(store: LandingStore, cfg: TopicConfig, plan: SlicePlan) -> Conservation:
    """Re-count a landed hour from its files; see the module docstring."""
    hour = plan.hour
    out = Conservation(slice_records=plan.records)
    ranges = {p.partition: (p.start, p.end) for p in plan.partitions}
    gaps, skips = set(), set()
    for table in cfg.tables:
        rel = done_file_path(cfg.dataset, table, hour)
        done = _done_file(store, rel, out)
        if done is None:
            continue
        gaps.add(done.offsets_without_record)
        skips.add(tuple(sorted((d["partition"], d["start"], d["end"]) for d in done.skipped)))
        for f in done.files:
            out.landed_rows += _count(store, f, out)
            start, end = ranges.get(f.partition, (0, 0))
            if not start <= f.first_offset <= f.last_offset < end:
                out.problems.append(f"{f.path}: offsets [{f.first_offset}, {f.last_offset}] are not inside the slice "
                                    f"[{start}, {end}) of partition {f.partition}")
    manifest = store.read_json(dead_letter_manifest_path(plan.topic, hour))
    if manifest is None:
        out.problems.append(f"no dead-letter manifest under {dead_letter_dir(plan.topic, hour)}")
    else:
        # Tables a routing change retired must list nothing more of the hour: their rows would count twice.
        for dataset, table in manifest.get("retired", ()):
            done = _done_file(store, done_file_path(dataset, table, hour), out, missing_ok=True,
                              why=f"{dataset}.{table}, a table the hour no longer feeds: ")
            for f in done.files if done else ():
                out.landed_rows += _count(store, f, out)
                out.problems.append(f"{f.path} of {dataset}.{table}, a table the hour no longer feeds, still lists "
                                    "rows of the hour: re-land the hour to retire it")
        for f in manifest["files"]:
            out.dead_letters += _count(store, LandedFile(**f), out)
        if sum(manifest["by_reason"].values()) != manifest["rows"]:
            out.problems.append("the dead-letter manifest's reasons do not add up to its rows")
    if len(gaps) > 1:
        out.problems.append(f"the done files of the hour disagree on the offsets without a record: {sorted(gaps)}")
    out.offsets_without_record = gaps.pop() if gaps else 0
    if len(skips) > 1:
        out.problems.append(f"the done files of the hour disagree on the offsets skipped: {sorted(skips)}")
    for partition, start, end in skips.pop() if skips else ():
        first, last = ranges.get(partition, (0, 0))
        if not first <= start <= end <= last:
            out.problems.append(f"skipped offsets [{start}, {end}) are not inside the slice [{first}, {last}) "
                                f"of partition {partition}")
        out.skipped += end - start
    if out.offsets_without_record < 0:
        out.problems.append(f"negative offsets without a record ({out.offsets_without_record}): more rows than offsets")
    return out
