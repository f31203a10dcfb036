"""MARK DONE: make an hour visible. Files in place first, then the manifests, then one done
file per table (the contract with loading), and only then remove what the new done files no
longer list. A crash at any point leaves the previous complete hour or the new one readable."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone

from kafka_landing.avro_landing.write import Staged
from kafka_landing.config import TopicConfig
from kafka_landing.crash_points import crash_point
from kafka_landing.handoff.event_index import granularity_of, mark_event_partitions
from kafka_landing.handoff.manifests import (
    DeadLetters,
    DoneFile,
    DoneFileError,
    LandedFile,
    content_sha,
    read_done_file_or_none,
    tables_fed_by,
)
from kafka_landing.handoff.markers import mark_pending
from kafka_landing.kafka_slices.plan import RETENTION_AFTER_FREEZING, SlicePlan
from kafka_landing.naming import (
    dead_letter_dir,
    dead_letter_manifest_path,
    done_file_path,
    Hour,
    publish_lock_path,
    rejected_dead_letter_dir,
    slice_manifest_path,
    table_hour_dir,
)
from kafka_landing.store.base import HeldLock, LandingStore


def _remove_unlisted(store: LandingStore, rel_dir: str, listed: set[str], held: HeldLock) -> None:
    for rel in store.list(rel_dir, "*.avro"):
        if rel not in listed:
            held.delete(rel)


@dataclass(frozen=True)
class StagedHour:
    """An hour of a run, staged and accounted for: its frozen slice, its landing files and dead-letter
    files in staging, what they hold, the records read and the attempt that staged them."""

    plan: SlicePlan
    good: list[Staged]
    dead: list[Staged]
    dead_letters: DeadLetters
    records_read: int
    attempt: str


def keep_rejected_dead_letters(store: LandingStore, hour: StagedHour) -> str:
    """Dead letters of an attempt that failed its limit, kept beside (never over) the hour's
    published ones, so the previous complete hour stays intact. Returns their folder."""
    plan, dl = hour.plan, hour.dead_letters
    rejected = rejected_dead_letter_dir(plan.topic, plan.hour, hour.attempt)
    files = []
    for s in hour.dead:
        rel = f"{rejected}/{s.rel.rsplit('/', 1)[-1]}"
        store.move(s.src, rel)
        files.append(LandedFile(**{**asdict(s.file), "path": rel}))
    store.write_json_atomic(f"{rejected}/_MANIFEST.json", {
        "topic": plan.topic, "hour": plan.hour, "attempt": hour.attempt, "rows": dl.rows, "by_reason": dl.by_reason,
        "files": [asdict(f) for f in files],
    })
    return rejected


def publish(store: LandingStore, cfg: TopicConfig, staged: StagedHour) -> dict[str, DoneFile]:
    """Make the hour visible: files in place first, then the manifests, then, only once the
    new done files are in place, remove what they no longer list. A crash at any point
    leaves either the previous complete hour or the new one readable through the done files."""
    plan, dl, records_read, attempt = staged.plan, staged.dead_letters, staged.records_read, staged.attempt
    hour = plan.hour
    tables = {t: sorted((s for s in staged.good if s.table == t), key=lambda s: s.rel) for t in cfg.tables}
    feeds = [(cfg.dataset, t) for t in cfg.tables]
    with store.lock(publish_lock_path(plan.topic, plan.hour)) as held:
        # Every commit through `held`: a holder that lost the lock stops there, and never overwrites
        # or deletes what the holder after it wrote (N9).
        for s in [*staged.dead, *(s for mine in tables.values() for s in mine)]:
            held.move(s.src, s.rel)  # same name, same rows as a previous attempt's file
        crash_point("landing:files_moved")
        manifest_rel = dead_letter_manifest_path(plan.topic, hour)
        retired = _retired(store, plan.topic, hour, store.read_json(manifest_rel), feeds)
        held.write_json_atomic(manifest_rel, {"topic": plan.topic, "hour": plan.hour, "attempt": attempt, **asdict(dl),
                                              "tables": [list(t) for t in feeds], "retired": [list(t) for t in retired],
                                              "shape": cfg.landing_shape})
        landed_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        slice_info = {
            "manifest": slice_manifest_path(plan.topic, hour), "records": plan.records,
            "partitions": [{"partition": p.partition, "start": p.start, "end": p.end} for p in plan.partitions],
        }
        done = {}
        for table, mine in tables.items():
            files = tuple(s.file for s in mine)
            done[table] = DoneFile(
                topic=plan.topic, dataset=cfg.dataset, table=table, hour=plan.hour,
                rows=sum(f.rows for f in files), schema_ids=tuple(sorted({f.schema_id for f in files})),
                files=files, dead_letters=dl, slice=slice_info, topic_records_read=records_read,
                offsets_without_record=plan.records - records_read, attempt=attempt, landed_at=landed_at,
                skipped=tuple(s for s in plan.skipped if s["reason"] == RETENTION_AFTER_FREEZING),
            )
            # Written last, atomically: the hour of this table is now complete.
            rel = done_file_path(cfg.dataset, table, hour)
            content = done[table].to_bytes()
            if cfg.event_granularity:  # before the done file: no crash leaves a changed event partition unmarked
                mark_event_partitions(store, done[table], content_sha(content), _readable(store, rel),
                                      cfg.event_granularity)
            held.write_atomic(rel, content)
            mark_pending(store, rel, content)  # the bytes just written: no second read of the bucket
            crash_point("landing:done_written")
        for dataset, table in retired:
            _retire(store, plan, dataset, table, attempt, done, held)
        crash_point("landing:published")
        # Only now that every new done file is in place: remove what none of them lists.
        for table, d in done.items():
            _remove_unlisted(store, table_hour_dir(cfg.dataset, table, hour), {f.path for f in d.files}, held)
        for dataset, table in retired:
            _remove_unlisted(store, table_hour_dir(dataset, table, hour), set(), held)
        _remove_unlisted(store, dead_letter_dir(plan.topic, hour), {f.path for f in dl.files}, held)
    return done


def _readable(store: LandingStore, rel: str) -> DoneFile | None:
    """The done file being replaced, for the event partitions it fed; None if absent or not a done
    file of its path (one nobody can read feeds nothing a versioning could find). A storage error
    that may pass fails the publish, transient."""
    try:
        found = read_done_file_or_none(store, rel)
    except DoneFileError as exc:
        if exc.transient:
            raise
        return None
    return found[0] if found else None


def _retired(store: LandingStore, topic: str, hour: Hour, before: dict | None,
             feeds: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The tables an earlier landing of the hour fed (or retired) that the topic's routing no
    longer feeds: their done files must stop listing the hour's records, or they count twice."""
    if before is None:
        return []
    fed = before["tables"] if "tables" in before else tables_fed_by(store, topic, hour)
    earlier = {tuple(t) for t in [*fed, *before.get("retired", ())]}
    return sorted(earlier - set(feeds))


def _retire(store: LandingStore, plan: SlicePlan, dataset: str, table: str, attempt: str,
            fed: dict[str, DoneFile], held: HeldLock) -> None:
    """An empty done file in place of the old one, marked pending: the table is in no topic's
    config now, so no asset loads it; the retired-hours sensor asks `retire_hours` to load the
    empty hour, which drops its rows from the warehouse. The landing conservation check counts
    it. Written once, not on every re-land; the marker goes first, so a crash between the two
    leaves the old done file, retired again by the next re-land."""
    rel = done_file_path(dataset, table, plan.hour)
    if not store.exists(rel):
        return
    before, new = _readable(store, rel), next(iter(fed.values()), None)
    if before is not None and before.retired:
        return
    # One that is not a done file of its path is retired all the same, from what the hour is now.
    old = before or (replace(new, dataset=dataset, table=table) if new else None)
    if old is None:
        return
    why = (f"routing changed: re-landed by attempt {attempt}, hour {plan.hour} of topic {plan.topic} now feeds "
           f"{', '.join(f'{d.dataset}.{d.table}' for d in fed.values()) or 'no table'}")
    content = DoneFile(
        topic=old.topic, dataset=dataset, table=table, hour=plan.hour, rows=0, schema_ids=(), files=(),
        dead_letters=new.dead_letters if new else old.dead_letters, slice=old.slice,
        topic_records_read=old.topic_records_read, offsets_without_record=old.offsets_without_record, attempt=attempt,
        landed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), retired=why,
    )
    body = content.to_bytes()
    if granularity := granularity_of(store, dataset, table):
        # Its event-time table held the hour's records too: re-version the partitions they were in, so
        # they leave that table as they leave this one (before the done file, as publish marks them).
        mark_event_partitions(store, content, content_sha(body), before, granularity)
    held.fence()  # the marker is the pending lock's write: still ours before marking for our done file
    mark_pending(store, rel, body)
    held.write_atomic(rel, body)
