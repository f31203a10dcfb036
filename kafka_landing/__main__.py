"""Command line: `python -m kafka_landing plan --topic T --from 2026-11-20-10:00 --to 2026-11-20-15:00`.

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


def parse_hour(text: str) -> datetime:
    """An hourly partition key (2026-11-20-13:00) or an hour tag (2026-11-20T13)."""
    try:
        return Hour.from_key(text).start
    except ValueError:
        pass
    try:
        return Hour(text).start
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an hour: write it like 2026-11-20-13:00 (a partition key) or 2026-11-20T13 (UTC)"
        ) from None


def _resources():
    """The code location's own resources, so the CLI reads the same environment as the UI."""
    from kafka_landing.definitions import ready_resources

    return ready_resources("kafka", "landing", "warehouse")


def plan(args, parser) -> int:
    from kafka_landing.config import TopicConfigError
    from kafka_landing.kafka_slices.dry_run import dry_run, format_table, hours_between
    from kafka_landing.kafka_slices.freeze import load_frozen, settled_first_hour
    from kafka_landing.kafka_slices.plan import UnknownTopicError

    try:
        hours_between(args.first, args.last)
    except ValueError as exc:
        parser.error(str(exc))  # exits 2
    kafka, landing, warehouse = _resources()
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
            rows = dry_run(cfg, args.first, args.last, datetime.now(timezone.utc), log, store,
                           load_frozen(store, cfg.topic), warehouse.backend(store).loaded,
                           skip_retention_gaps=args.skip_retention_gaps,
                           first_hour=settled_first_hour(store, config, cfg.topic))
    except UnknownTopicError as exc:
        print(f"error: {exc}; check the topic name in {cfg.topic!r}'s config and the cluster at "
              f"{kafka.bootstrap_servers}", file=sys.stderr)
        return 1
    print(format_table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_landing")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="dry-run plan of a backfill: what landing these hours would read; writes nothing")
    p.add_argument("--topic", required=True, help="a topic of the topic config")
    p.add_argument("--from", dest="first", required=True, type=parse_hour, help="first hour, e.g. 2026-11-20-10:00 (UTC)")
    p.add_argument("--to", dest="last", required=True, type=parse_hour, help="last hour, included")
    p.add_argument("--skip-retention-gaps", action="store_true",
                   help="plan as a run with skip_retention_gaps=true would (gaps shown as notes, not errors)")
    args = parser.parse_args(argv)
    if args.command == "plan":
        return plan(args, p)
    return BAD_ARGUMENTS


if __name__ == "__main__":
    sys.exit(main())
