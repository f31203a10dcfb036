"""Command line: `python -m kafka_landing plan --topic T --from 2026-11-20-10:00 --to 2026-11-20-15:00`,
`python -m kafka_landing replay --topic T --from ... --to ...` (land hours again under today's config,
from Kafka where it still holds them, else from their archive) and `python -m kafka_landing reload
[--topic T]` (every landed hour into the configured warehouse).

Why a CLI next to the UI job: an operator can see what a backfill would read before
launching it, from a shell, without a Dagster instance. Resources are built from the same
environment variables as `definitions.build_resources()`, with secrets read as plain values
(Dagster's EnvVar resolves only inside Dagster).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from kafka_landing.naming import Hour

BAD_ARGUMENTS = 2


def parse_hour(text: str) -> Hour:
    """An hourly partition key (2026-11-20-13:00) or an hour tag (2026-11-20T13)."""
    try:
        return Hour.from_key(text)
    except ValueError:
        pass
    try:
        return Hour(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an hour: write it like 2026-11-20-13:00 (a partition key) or 2026-11-20T13 (UTC)"
        ) from None


def _resources(*names: str) -> tuple | None:
    """The code location's own resources, so the CLI reads the same environment as the UI; None,
    said with what to set, where the environment names none it can use (a warehouse of before)."""
    from kafka_landing.definitions import ready_resources

    try:
        return ready_resources(*names)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def plan(args, parser) -> int:
    from kafka_landing.config import TopicConfigError
    from kafka_landing.kafka_slices.dry_run import TopicHistory, dry_run, format_table, hours_between
    from kafka_landing.kafka_slices.plan import UnknownTopicError

    try:
        hours_between(args.first, args.last)
    except ValueError as exc:
        parser.error(str(exc))  # exits 2
    if (resources := _resources("kafka", "landing", "warehouse")) is None:
        return 1
    kafka, landing, warehouse = resources
    try:
        config = landing.config()
        cfg = config.topic(args.topic)
    except TopicConfigError as exc:
        parser.error(str(exc))
    try:
        store = landing.store()
    except (ValueError, OSError) as exc:
        print(f"error: landing root {landing.landing_root}: {exc}", file=sys.stderr)
        return 1
    try:
        with kafka.log_view() as log:
            history = TopicHistory.read(store, config, cfg.topic, warehouse.backend(store).loaded)
            rows = dry_run(cfg, args.first, args.last, datetime.now(timezone.utc), log, history,
                           args.skip_retention_gaps)
    except UnknownTopicError as exc:
        print(f"error: {exc}; check the topic name in {cfg.topic!r}'s config and the cluster at "
              f"{kafka.bootstrap_servers}", file=sys.stderr)
        return 1
    print(format_table(rows))
    return 0


def reload(args, parser) -> int:
    """Every landed hour of every configured table (or `--topic`'s) loaded into the configured
    warehouse from its done file, and every event partition from its newest version: moving to a
    new warehouse (`KAFKA_LANDING_WAREHOUSE`), or filling one that was lost. Hours it holds already
    as their content are skipped, so it can be run again after a failure."""
    from kafka_landing.config import TopicConfigError
    from kafka_landing.handoff.units import event_unit
    from kafka_landing.naming import EVENTS_DIR, event_table
    from kafka_landing.warehouse.load import load_unit, reload_table

    if (resources := _resources("landing", "warehouse", "pyspark")) is None:
        return 1
    landing, warehouse, pyspark = resources
    try:
        config = landing.config()
        topics = [config.topic(t) for t in args.topic] if args.topic else list(config.topics.values())
    except TopicConfigError as exc:
        parser.error(str(exc))
    store = landing.store()
    backend = warehouse.backend(store)
    try:
        backend.check_writable()
    except Exception as exc:  # noqa: BLE001 - each backend names its own service and what to check
        print(f"error: the {backend.kind} warehouse cannot be written: {exc}", file=sys.stderr)
        return 1
    failures = 0
    for cfg in topics:
        for table in cfg.tables:
            name = f"{cfg.dataset}.{table}"

            def progress(done: int, total: int, failed: str | None, name=name) -> None:
                if failed:
                    print(f"{name}: hour {done}/{total} failed: {failed}", file=sys.stderr)
                elif done == total or done % 24 == 0:
                    print(f"{name}: {done}/{total} hours", flush=True)

            loaded, failed = reload_table(backend, store, cfg.dataset, table, lambda: pyspark.spark_session,
                                          progress, only_missing=not args.all)
            failures += len(failed)
            print(f"{name}: {loaded} hour(s) loaded into the {backend.kind} warehouse"
                  + (f", {len(failed)} failed (above)" if failed else ""), flush=True)
            if not cfg.event_granularity:
                continue
            loaded = held = 0
            for partition in store.subdirs(f"{EVENTS_DIR}/{cfg.dataset}/{table}"):
                try:
                    ev = load_unit(backend.by_event(cfg.event_granularity, cfg.event_time_field), store,
                                   event_unit(cfg.dataset, table, partition), lambda: pyspark.spark_session, cfg)
                except Exception as exc:  # noqa: BLE001 - one partition's failure must not cost the others
                    failures += 1
                    print(f"{cfg.dataset}.{event_table(table)} {partition} failed: {exc}", file=sys.stderr)
                    continue
                loaded, held = (loaded + 1, held) if ev.result is not None else (loaded, held + 1)
            print(f"{cfg.dataset}.{event_table(table)}: {loaded} event partition(s) loaded, {held} held already",
                  flush=True)
    return 1 if failures else 0


def replay(args, parser) -> int:
    """The topic's replay job over the range, in this process, on the Dagster instance of
    $DAGSTER_HOME (its runs and materialisations show in the UI as a backfill's would): every hour
    landed again under today's config, from `--source`. One line per hour: where it was read,
    its rows, its dead letters and how many of the archive's were re-driven."""
    import os

    from kafka_landing.config import TopicConfigError
    from kafka_landing.definitions import replay_hours
    from kafka_landing.kafka_slices.dry_run import hours_between

    try:
        hours = hours_between(args.first, args.last)
    except ValueError as exc:
        parser.error(str(exc))
    if args.dry_run:
        args.skip_retention_gaps = False
        return plan(args, parser)
    if not os.environ.get("DAGSTER_HOME"):
        print("error: DAGSTER_HOME is not set: set it to the Dagster instance's folder (`make demo` uses "
              ".local/dagster_home), so the replay's runs show in the UI", file=sys.stderr)
        return 1
    if (resources := _resources("landing")) is None:
        return 1
    try:
        cfg = resources[0].config().topic(args.topic)
    except TopicConfigError as exc:
        parser.error(str(exc))
    where = " (Kafka where it holds them, else their archive)" if args.source == "auto" else ""
    print(f"{cfg.topic}: replaying {len(hours)} hour(s) {hours[0].key} .. {hours[-1].key} from {args.source}{where}",
          flush=True)
    result = replay_hours(cfg.topic, hours[0], hours[-1], args.source)
    for e in result.get_asset_materialization_events():
        m = e.materialization.metadata
        redriven = f", {m['dead_letters_redriven'].value} re-driven" if "dead_letters_redriven" in m else ""
        print(f"{e.materialization.partition}: from {m['source'].value}, {m['dagster/row_count'].value} rows, "
              f"{m['dead_letters'].value} dead letters{redriven}")
    for e in result.all_events:
        if e.event_type_value == "STEP_FAILURE":
            print(f"error: {e.event_specific_data.error.message.strip()}", file=sys.stderr)
    print(f"run {result.run_id}: {'succeeded' if result.success else 'failed'}", flush=True)
    return 0 if result.success else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_landing")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="dry-run plan of a backfill: what landing these hours would read; writes nothing")
    p.add_argument("--topic", required=True, help="a topic of the topic config")
    p.add_argument("--from", dest="first", required=True, type=parse_hour, help="first hour, e.g. 2026-11-20-10:00 (UTC)")
    p.add_argument("--to", dest="last", required=True, type=parse_hour, help="last hour, included")
    p.add_argument("--skip-retention-gaps", action="store_true",
                   help="plan as a run with skip_retention_gaps=true would (gaps shown as notes, not errors)")
    r = sub.add_parser("reload", help="load every landed hour of every table into the configured warehouse "
                                      "(KAFKA_LANDING_WAREHOUSE) from its done file: moving to a new warehouse")
    r.add_argument("--topic", action="append", help="only this topic's tables (repeat for more)")
    r.add_argument("--all", action="store_true", help="load hours the warehouse already holds as their content too")
    rp = sub.add_parser("replay", help="land hours again under today's config (routing, event time, schemas now "
                                       "registered), from Kafka where it still holds them, else from their archive")
    rp.add_argument("--topic", required=True, help="a topic of the topic config")
    rp.add_argument("--from", dest="first", required=True, type=parse_hour, help="first hour (UTC)")
    rp.add_argument("--to", dest="last", required=True, type=parse_hour, help="last hour, included")
    rp.add_argument("--source", choices=("auto", "archive", "kafka"), default="auto",
                    help="auto (default): Kafka where it holds the hour, else its archive; archive: only the archive")
    rp.add_argument("--dry-run", action="store_true", help="print the plan (which hours have an archive, which are "
                                                           "stale against the config); land nothing")
    args = parser.parse_args(argv)
    if args.command == "plan":
        return plan(args, p)
    if args.command == "replay":
        return replay(args, rp)
    if args.command == "reload":
        return reload(args, r)
    return BAD_ARGUMENTS


if __name__ == "__main__":
    sys.exit(main())
