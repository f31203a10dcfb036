"""The command line every run takes: the sizes (`make bench`'s, or the smoke run's with `--quick`)
and where the report goes. `__main__` adds the choice of cases to it; a case module run as a
script (`python -m kafka_landing_tools.bench.<case>`) runs its case alone with it."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from pathlib import Path

from kafka_landing_tools.bench.report import DOCS_PAGE
from kafka_landing_tools.bench.run import OUT, Options, run
from kafka_landing_tools.bench.world import MESSAGES, QUICK, ROOT, Case, Sizes

QUICK_MANY_TOPICS = 2  # the many-topics case named in a quick run, which otherwise leaves it out


def parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Landing throughput, fixed costs, backfills, warehouse loads "
                                                        "and memory, side by side with the alternatives, and the goals.")
    ap.add_argument("--messages", type=int, help=f"messages of each 1x case and of the day (default {MESSAGES:,})")
    ap.add_argument("--hours", type=int, help="hours of each case (default 4)")
    ap.add_argument("--day-hours", type=int, help="hours of the backfilled day (default 24)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run: {QUICK.messages:,} messages, {QUICK.hours} hours, a {QUICK.day_hours}-hour "
                         "day, the small cases only")
    ap.add_argument("--out", type=Path, default=OUT, help="where bench.md and bench.json go")
    ap.add_argument("--keep-work", action="store_true", help="keep the landed files under --out/work_*")
    ap.add_argument("--many-topics", type=int, help=f"topics of the many-topics case, 0 to leave it out "
                                                    f"(default {Sizes.many_topics}; the quick run leaves it out)")
    ap.add_argument("--freshness-topics", type=int,
                    help=f"topics of the freshness case's many-topics variant (default {Sizes.freshness_topics}; "
                         f"the quick run: {QUICK.freshness_topics})")
    ap.add_argument("--no-tenfold", dest="tenfold", action="store_const", const=False,
                    help="leave out the 10x throughput cases (12M small and 3M ~1 KB records at the default size; "
                         "the quick run leaves them out)")
    ap.add_argument("--no-docs", action="store_true",
                    help=f"leave {DOCS_PAGE.relative_to(ROOT)} as it is (a --quick run or a case alone always does)")
    return ap


def sizes_of(args: argparse.Namespace, named: list[str]) -> Sizes:
    """The defaults, or the smoke run's, with what the options set; the many-topics case, when
    `named`, gets topics even in a quick run."""
    sizes = replace(QUICK if args.quick else Sizes(),
                    **{f.name: getattr(args, f.name) for f in fields(Sizes)
                       if getattr(args, f.name, None) is not None})
    if "many_topics" in named and not sizes.many_topics:
        sizes = replace(sizes, many_topics=QUICK_MANY_TOPICS)
    return sizes


def run_alone(case: Case, argv: list[str] | None = None) -> None:
    """`python -m kafka_landing_tools.bench.<case>`: that case alone; docs/benchmark.md untouched."""
    args = parser(f"python -m kafka_landing_tools.bench.{case.name}").parse_args(argv)
    run(sizes_of(args, [case.name]), args.out, Options(cases=(case,), keep_work=args.keep_work))
