"""`python -m kafka_landing_tools.bench`: every case, or the ones `--case` names, at the sizes of
`make bench` or of the smoke run (`--quick`). A full run (every case, not --quick, not --no-docs)
also writes its report into docs/benchmark.md as the latest run. With `--contender NAME` (the
run's own use) it is one measurement's process: it prints what it landed as its last line."""

from __future__ import annotations

import argparse
import json
import os
import resource
from pathlib import Path

from kafka_landing_tools.bench.cases import BY_NAME, chosen, contenders
from kafka_landing_tools.bench.options import parser, sizes_of
from kafka_landing_tools.bench.report import DOCS_PAGE
from kafka_landing_tools.bench.run import Options, run


def _parser() -> argparse.ArgumentParser:
    ap = parser("python -m kafka_landing_tools.bench")
    ap.add_argument("--case", action="append", choices=list(BY_NAME),
                    help="measure this case alone, with the data it needs (repeat for several); default: all")
    # Internal: one measurement's process.
    for name in ("--contender", "--topic", "--landing-root", "--warehouse-root", "--out-dir", "--freeze-spec",
                 "--late-hour", "--bootstrap", "--registry", "--topics-config", "--days"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    ap.add_argument("--hour-keys", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="range", choices=("range", "runs"), help=argparse.SUPPRESS)
    ap.add_argument("--source", default="kafka", choices=("kafka", "archive", "auto"), help=argparse.SUPPRESS)
    ap.add_argument("--sample", action="store_true", help=argparse.SUPPRESS)  # a sample of the hours (sample_part)
    return ap


def contend(args: argparse.Namespace) -> None:
    """One measurement's process: what it landed, as JSON on its last line, with the CPU seconds it
    and its children used, and the stack's warm engine (where kafka_landing's work runs) meanwhile."""
    from kafka_landing_tools import devstack

    args.bootstrap = args.bootstrap or devstack.BOOTSTRAP
    args.registry = args.registry or devstack.REGISTRY_URL
    engine = devstack.STACK_DIR / "spark" / "pid"
    engine0 = _cpu_of(engine)
    result = contenders()[args.contender](args)
    said = result if isinstance(result, dict) else {"records": result}
    own = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    said["cpu_s"] = round(sum(u.ru_utime + u.ru_stime for u in own), 2)
    if engine0 is not None and (engine1 := _cpu_of(engine)) is not None:
        said["engine_cpu_s"] = round(engine1 - engine0, 2)
    print(json.dumps(said))


def _cpu_of(pidfile: Path) -> float | None:
    """User and system CPU seconds of the process a pid file names, or None if it is not running."""
    try:
        fields = Path(f"/proc/{int(pidfile.read_text().strip())}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.contender:
        contend(args)
        return
    sizes = sizes_of(args, args.case or [])
    cases = tuple(c for c in chosen(args.case) if c.name != "many_topics" or sizes.many_topics)
    whole = args.case is None and not args.quick and not args.no_docs
    run(sizes, args.out, Options(cases, keep_work=args.keep_work, docs_page=DOCS_PAGE if whole else None))


if __name__ == "__main__":
    main()
