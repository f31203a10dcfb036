"""The report as Markdown: one section per `SECTIONS` (a case not measured says so), the goals
last; and the docs page it goes into. A full run writes it into docs/benchmark.md as the latest
run, between the page's two markers (`LATEST_BEGIN`, `LATEST_END`); the text around them is
written by hand and stays."""

from __future__ import annotations

from pathlib import Path

from kafka_landing_tools.bench.data import day_tables
from kafka_landing_tools.bench.world import ROOT

#: The page a full run writes its report into, as the latest run: between these two lines, which
#: the page holds once each.
DOCS_PAGE = ROOT / "docs" / "benchmark.md"
LATEST_BEGIN = "<!-- bench: latest run begin: `make bench` rewrites what follows, up to the end marker -->"
LATEST_END = "<!-- bench: latest run end -->"
SECTIONS = ("Setup", "Summary", "Producing the data", "Landing throughput", "Fixed cost",
            "Where the per-record time goes", "Backfill",
            "Warehouse load", "Amending an event day", "Many topics", "Freshness", "Memory", "Goals")
NOT_MEASURED = ["Not measured in this run."]


def _n(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,.2f}"


def _table(header: list[str], rows: list[list], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|",
            *("| " + " | ".join(_n(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else str(c)
                                 for c in row) + " |" for row in rows)]


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[met]


def _rate_row(label: str, m: dict) -> list:
    """A measurement as a row: its records, seconds, records per second and peak memory."""
    return [label, m["records"], m["seconds"], round(m["records"] / m["seconds"]), m["peak_rss_mb"]]


def _ratio_row(label: str, a: float, b: float) -> list:
    return [label, "-", f"{a / b:.2f}", "-", "-"]


def _setup(report: dict) -> list[str]:
    p, mc = report["parameters"], report["machine"]
    frozen = report.get("freeze_seconds")
    return [f"{mc['cores']} cores, {mc['memory_gb']} GB, Python {mc['python']}; "
            + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".",
            f"{p['messages']:,} messages per 1x case over {p['hours']} hours and {p['partitions']} partitions "
            f"(4x: four times as many per hour); the day: {p['day_hours']} hours. Whole run "
            f"{report['seconds_total']} s, "
            + (f"slices frozen once in {frozen} s." if frozen is not None else "no slices frozen.")
            + (f" **{p['workers']} measurements ran at once: the timings mean nothing.**" if p["workers"] > 1 else "")]


def _summary(report: dict) -> list[str]:
    """The issue's table: one row per case, one column per contender; then kafka_landing's
    backfill, empty hour and warehouse load."""
    p = report["parameters"]
    names = list(dict.fromkeys(r["contender"] for r in report["throughput"])) or ["kafka_landing"]
    by_case: dict[str, dict] = {}
    for r in report["throughput"]:
        by_case.setdefault(r["case"], {})[r["contender"]] = r
    rows = [[f"{case}, {next(iter(rs.values()))['messages']:,} messages",
             *(f"{rs[n]['seconds']:.1f} s ({rs[n]['messages_per_s']:,} msg/s{', a sample' if rs[n].get('sample') else ''})"
               if n in rs else "-" for n in names)]
            for case, rs in by_case.items()]
    blank = ["" for _ in names[1:]]
    if b := report.get("backfill"):
        one, many = b["one_run"], b["single_runs"]
        rows.append([f"{b['hours']} hours, {one['records']:,} messages, {len(day_tables())} tables",
                     (f"one run {one['seconds']:.1f} s; {b['hours']} single-hour runs {many['seconds']:.1f} s "
                      f"({one['seconds'] / many['seconds']:.2f})"), *blank])
    if f := report.get("fixed_cost"):
        e, s = f["empty_hour"]["seconds"], f["process_start"]["seconds"]
        rows.append(["empty hour", f"{e:.1f} s ({e - s:.1f} s beyond a {s:.1f} s process start)", *blank])
    if w := report.get("warehouse"):
        a, one, h = w["all_hours"]["seconds"], w["one_hour"]["seconds"], w["hours"]
        s = w.get("single_runs", {}).get("seconds")
        runs = f"; {h} single-hour runs {s:.1f} s ({a / s:.2f})" if s else ""
        rows.append([f"warehouse load, {len(w['tables'])} tables",
                     f"Iceberg: {h} hours in one run {a:.1f} s{runs}; one hour {one:.1f} s ({a / one:.2f}x)", *blank])
    return _table([f"case ({p['hours']} hours, {p['partitions']} partitions)", *names], rows)


def _throughput(report: dict) -> list[str]:
    rows = report["throughput"]
    if not rows:
        return NOT_MEASURED
    kl = {r["case"]: r["messages_per_s"] for r in rows if r["contender"] == "kafka_landing"}
    return [("MB are the Confluent-framed Avro values as produced; per core divides by the machine's cores. "
             "The last column is how many times faster kafka_landing is than the contender (above 1: faster), "
             "msg/s against msg/s. The 10x cases are run by kafka_landing, the raw reads and python_valve on a "
             "sample (the first hour's first partition, its records in the messages column); spark_by_hand and "
             "kafka_landing_cold sit them out (minutes each at that size, and their 1x and 4x rows say how they "
             "scale)."), "",
            *_table(["case", "messages", "contender", "seconds", "msg/s", "MB/s", "msg/s per core", "MB/s per core",
                     "peak RSS MB", "kafka_landing speed / this"],
                    [[r["case"], r["records"] if r.get("sample") else r["messages"],
                      f"{r['contender']} (sample)" if r.get("sample") else r["contender"], r["seconds"],
                      r["messages_per_s"], r["mb_per_s"], r["messages_per_s_per_core"], r["mb_per_s_per_core"],
                      r["peak_rss_mb"], f"{kl[r['case']] / r['messages_per_s']:.2f}" if r["case"] in kl else "-"]
                     for r in rows], right_from=3)]


def _fixed_cost(report: dict) -> list[str]:
    f = report.get("fixed_cost")
    if not f:
        return NOT_MEASURED
    s, e = f["process_start"], f["empty_hour"]
    return [*_table(["measurement (fresh process each)", "seconds", "peak RSS MB"], [
        ["process start: imports, definitions, instance; no run", s["seconds"], s["peak_rss_mb"]],
        ["empty hour: slices + landing of an hour with no record", e["seconds"], e["peak_rss_mb"]],
        ["empty hour beyond process start", round(e["seconds"] - s["seconds"], 2), "-"]]),
        "", "An hour with no record opens no Spark session, on either engine: the warm engine's "
        "saving shows in the throughput table (kafka_landing against kafka_landing_cold). Peak RSS is "
        "the contender's own process tree: the warm Spark Connect server's memory is not in it (the "
        "server is shared by every run, as a cluster is)."]


def stage_table(report: dict) -> list[str]:
    """Each case's records through kafka_landing's own read, decode and route on the warm engine (one Spark
    job each, nothing written, timed with the session open), its whole pass (its run less an empty hour's)
    and librdkafka's raw read, as msg/s; each stage's share of the pass's time. Without the pass (the
    stages measured alone), the stages' rates."""
    stages, f = report.get("stages"), report.get("fixed_cost")
    if not stages:
        return []
    by = {(r["case"], r["contender"]): r for r in report["throughput"]}
    rows = []
    for st in stages:
        kl, raw = by.get((st["case"], "kafka_landing")), by.get((st["case"], "librdkafka_raw"))
        whole = kl["seconds"] - f["empty_hour"]["seconds"] if kl and f else None
        cells = [f"{st['records'] / s:,.0f}" + (f" ({s / whole:.0%})" if whole else "") for s in st["seconds"].values()]
        rows.append([st["case"], st["records"], *cells,
                     f"{st['records'] / whole:,.0f} ({whole:.2f} s)" if whole else "-",
                     f"{raw['messages_per_s']:,}" if raw else "-"])
    names = list(stages[0]["seconds"])
    return [*_table(["case", "records", *[f"{n}: msg/s (share of the pass)" for n in names],
                     "the pass: msg/s (kafka_landing less an empty hour)", "librdkafka_raw msg/s"], rows),
            "", "Each stage is one Spark job on the warm engine over the case's frozen offsets, writing nothing "
            "(`noop`); it includes the stages before it. The stages are the decoding way, one Spark row per record: "
            "Spark's Kafka source, the body check as a function, `from_avro` for the bodies it leaves to the "
            "decode, the routing. The pass lands the likely schema id without rows (one operator per Spark task "
            "reads, checks and writes), so it can beat the stages' read; the decoding way is what records of "
            "other schema ids, topics split by event hour (the day's) and bodies the check is not sure of cost."]


def _backfill(report: dict) -> list[str]:
    b = report.get("backfill")
    if not b:
        return NOT_MEASURED
    one, many, h = b["one_run"], b["single_runs"], b["hours"]
    rows = [_rate_row(f"{h} hours in one run", one), _rate_row(f"{h} single-hour runs, one process", many),
            _ratio_row("one run / single-hour runs", one["seconds"], many["seconds"])]
    if pr := b.get("processes"):
        rows += [_rate_row(f"{h} single-hour runs, a fresh process each (as the schedule launches them)", pr),
                 _ratio_row("hourly processes / one run", pr["seconds"], one["seconds"])]
    if plain := b.get("plain"):
        rows += [_rate_row(f"{h} hours in one run, as one table without event time", plain),
                 _ratio_row("one run / as one table", one["seconds"], plain["seconds"])]
    if r := report.get("replay"):
        rows += [_rate_row(f"{r['hours']} landed hours landed again from Kafka, one run (replay job)", r["from_kafka"]),
                 _rate_row(f"{r['hours']} landed hours landed again from their archive, one run", r["from_archive"]),
                 _ratio_row("from the archive / from Kafka", r["from_archive"]["seconds"], r["from_kafka"]["seconds"])]
    return _table(["way (kafka_landing)", "records", "seconds", "msg/s", "peak RSS MB"], rows)


def _warehouse(report: dict) -> list[str]:
    w = report.get("warehouse")
    if not w:
        return NOT_MEASURED
    a, one, h, n = w["all_hours"], w["one_hour"], w["hours"], len(w["tables"])
    rows = [_rate_row(f"Iceberg: {h} hours x {n} tables, one run", a)]
    if runs := w.get("single_runs"):
        rows += [_rate_row(f"Iceberg: {h} hours x {n} tables, a run per hour (one process)", runs),
                 _ratio_row("Iceberg: one run / single-hour runs", a["seconds"], runs["seconds"])]
    rows += [_rate_row(f"Iceberg: 1 hour x {n} tables, one run", one),
             _ratio_row("Iceberg: all hours / one hour", a["seconds"], one["seconds"])]
    return [(f"The day's topic is routed into {n} tables ({', '.join(w['tables'])}); each load is one Dagster run "
             "of the Iceberg warehouse assets of all of them (or one such run per hour), in a fresh process and a "
             "warehouse of its own: every hour in one run (the range load), the same hours one by one (the "
             "single-hour load, one run per hour in one process), and one hour alone."), "",
            *_table(["load", "rows", "seconds", "rows/s", "peak RSS MB"], rows)]


def amendment_table(report: dict) -> list[str]:
    """A late hour's cost to the event-time tables beside its cost to the landing-hour tables: Iceberg
    replaces only the late hour's part of the amended days."""
    a = report.get("amendment")
    if not a or not a.get("stages"):
        return []
    (first, first_s), (late, late_s), (amend, amend_s) = a["stages"].items()
    rows = [[first, f"{first_s:.2f}", "-"], [late, f"{late_s:.2f}", f"{a['late_records']:,}"],
            [amend, f"{amend_s:.2f}", f"{a.get('written', a['records']):,}"],
            ["amendment / landing-hour load", f"{amend_s / late_s:.2f}" if late_s else "-", "-"]]
    return [(f"The day's topic has an event-time table by day beside each of its tables. After its {a['hours']} "
             f"hours, a late hour brings {a['late_records']:,} records whose event time is in its middle hour: "
             f"that hour's event day ({a['records']:,} rows in all, after it) is versioned again in each table, "
             "and loaded: only the late hour's part of it is written to the Iceberg tables, while the landing-hour "
             "tables load one new hour. One process, the warm engine, each load a Dagster run as the sensors "
             "request them."), "",
            *_table(["what", "Iceberg seconds", "Iceberg rows written"], rows)]


def _many_topics(report: dict) -> list[str]:
    mt = report.get("many_topics")
    if not mt:
        return NOT_MEASURED
    rows = [_rate_row(f"{mt['topics']} topics x {mt['hours']} hours", mt)]
    if one := mt.get("as_one_topic"):
        rows.append(_rate_row(f"the same records as 1 topic x {mt['hours']} hours", one))
    return [(f"{mt['topics']} topics x {mt['hours']} hours x {mt['per_hour']:,} records, all the topics' "
             "hours landed by one asset backfill (one run for them all) and loaded by the done-file sensor's runs, "
             "through a real daemon and the queued run coordinator of the repo's dagster.yaml (at most two Spark "
             "runs at once); wall time from the daemon's start to every table loaded and every run ended."), "",
            *_table(["case", "rows loaded", "seconds", "rows/s", "peak RSS MB"], rows)]


def _freshness(report: dict) -> list[str]:
    f = report.get("freshness")
    if not f:
        return NOT_MEASURED
    stages = ("landing_started", "landing_ended", "first_load_asked", "last_load_asked")
    rows = [[f"{v['topics']} topic(s), {v['tables']} tables", v["median_s"], v["worst_s"],
             *(v["median_hour"][s] for s in stages), v["median_hour"]["load_runs"]]
            for v in (f["one"], f["many"]) if v]
    return [(f"Each hour triggered as the hourly schedule triggers it (its run requests, made as the scheduler "
             f"makes them) through a real daemon on the repo's dagster.yaml, one hour after the other; "
             f"{f['partitions']} partitions and {f['per_topic_hour']} records per topic-hour, each topic with "
             "its landing-hour table and its event-time table by day. Seconds from the trigger to every table's "
             "hour loaded and every run, with its checks, ended; and the median hour's timeline, in seconds from "
             "its trigger: when the landing run started and ended, when the sensors asked for the first and the "
             "last load run."), "",
            *_table(["case", "median s", "worst s", "landing started", "landing ended", "first load asked",
                     "last load asked", "load runs"], rows)]


def _memory(report: dict) -> list[str]:
    if not report["memory"]:
        return ["Not measured in this run (it needs two small-record cases)."]
    lo, hi = report["memory"][0]["low_case"], report["memory"][0]["high_case"]
    return _table(["contender", f"peak RSS MB, {lo}", f"peak RSS MB, {hi}", "ratio"],
                  [[r["contender"], r["low_mb"], r["high_mb"], f"{r['ratio']:.2f}"] for r in report["memory"]])


def _goals(report: dict) -> list[str]:
    return ["The goals of the warm engine (issues 21 and 36), of the Iceberg warehouse (issues 35 and 47) and of "
            "freshness and the 10x cases (issue 48), from this run's numbers.", "",
            *_table(["goal", "target", "measured", "verdict"],
                    [[g["goal"], g["target"], g["measured"], _verdict(g["met"])] for g in report["goals"]],
                    right_from=99)]


def _producing(report: dict) -> list[str]:
    return _table(["topic", "messages", "MB", "seconds", "msg/s"],
                  [[r["case"], r["messages"], r["mb"], r["seconds"], r["messages_per_s"]] for r in report["production"]])


_WRITERS = {"Setup": _setup, "Summary": _summary, "Producing the data": _producing, "Landing throughput": _throughput,
            "Fixed cost": _fixed_cost, "Where the per-record time goes": lambda r: stage_table(r) or NOT_MEASURED,
            "Backfill": _backfill, "Warehouse load": _warehouse,
            "Amending an event day": lambda r: amendment_table(r) or NOT_MEASURED,
            "Many topics": _many_topics, "Freshness": _freshness, "Memory": _memory, "Goals": _goals}


def markdown(report: dict) -> str:
    """The report as Markdown: one table per section (`SECTIONS`), the goals last."""
    out = []
    for section in SECTIONS:
        out += ["", f"### {section}", "", *_WRITERS[section](report)]
    return "\n".join(out[1:]) + "\n"


def latest_run(report: dict) -> str:
    """The report as the docs page's latest run: the day it ran, then every section."""
    return (f"The latest run on this machine ({report['when'][:10]}; the runs before it are in git history):\n\n"
            + markdown(report))


def latest_run_span(text: str, page: Path) -> tuple[int, int]:
    """Where the latest run sits in the page's text: after the begin marker's line, up to the end marker."""
    begin, end = text.find(LATEST_BEGIN), text.find(LATEST_END)
    if text.count(LATEST_BEGIN) != 1 or text.count(LATEST_END) != 1 or end < begin:
        raise ValueError(f"{page}: the latest run goes between one line {LATEST_BEGIN!r} and one line "
                         f"{LATEST_END!r} after it; put them back where the run should go")
    return begin + len(LATEST_BEGIN), end


def write_latest_run(report: dict, page: Path = DOCS_PAGE) -> None:
    """Replace the page's latest run by this report's; everything outside the markers stays as it was."""
    text = page.read_text()
    begin, end = latest_run_span(text, page)
    page.write_text(f"{text[:begin]}\n\n{latest_run(report)}\n{text[end:]}")
