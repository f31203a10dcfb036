"""Each case of the benchmark stands alone: its module names it and the processes its jobs run,
runs alone from the CLI or as a script, and its part of the report fits the report; a full run
(and only a full run) writes the docs page."""

import runpy
import warnings
from pathlib import Path

import pytest

from kafka_landing_tools.bench import __main__ as cli
from kafka_landing_tools.bench import cases, freshness, many_topics, options, processes
from kafka_landing_tools.bench.goals import GOALS, evaluate_goals, memory_rows
from kafka_landing_tools.bench.report import DOCS_PAGE, SECTIONS, markdown
from kafka_landing_tools.bench.run import Options, run
from kafka_landing_tools.bench.stack import Stack
from kafka_landing_tools.bench.world import QUICK, Bench, Case, Sizes

PACKAGE = Path(cases.__file__).parent
SUPPORT = {"__init__", "__main__", "cases", "data", "goals", "measure", "options", "processes", "report", "run", "stack",
           "world"}


def test_every_case_module_is_a_case_of_the_run_named_after_it():
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in SUPPORT)
    assert len(modules) == len(cases.CASES) == 12
    assert sorted(c.name for c in cases.CASES) == modules
    for case in cases.CASES:
        assert isinstance(case, Case) and callable(case.jobs) and callable(case.report)
        assert "run_alone(CASE)" in (PACKAGE / f"{case.name}.py").read_text(), case.name


def _bench(tmp_path, monkeypatch) -> Bench:
    """A run's world with two throughput topics and the many topics' own, nothing produced."""
    monkeypatch.setattr(Bench, "records", lambda self, topic, hour_keys: 7)
    bench = Bench(Sizes(), Stack("broker:9092", "http://registry"), tmp_path, "r1", ["2026-01-01-04:00"],
                  ["2026-01-01-00:00", "2026-01-01-01:00"], ("kafka_landing", "librdkafka_raw"), "2026-01-01T06:00")
    bench.throughput = {f"bench_small_{n}x_r1": {"case": f"small {n}x", "topic": f"bench_small_{n}x_r1",
                                                 "messages": 7 * n, "mb": float(n)} for n in (1, 4)}
    bench.kept["many_topics"] = many_topics.ManyTopics(many=["m0"], records=7, one_records=7)
    bench.kept["freshness"] = freshness.Topics(one=["f0"], many=["f1", "f2"], records={"one": 7, "many": 14})
    return bench


def _measured(contender: str) -> dict:
    """What any process says, with every figure some case reads."""
    return {"contender": contender, "seconds": 2.0, "records": 7, "peak_rss_mb": 100, "written": 7,
            "stages": {"one": 1.0, "two": 1.0, "three": 1.0}, "server_peak_rss_mb": 700, "hours": 3,
            "files_before": 2, "files_rewritten": 0, "files_added": 1, "load_seconds": 0.1,
            "tables": 2, "freshness_states": {"warehouse/d/t": "PASS"},
            "days": 365, "files_per_day_before": 24, "week_plan_ms": 5.0, "year_plan_ms_before": 200.0,
            "year_plan_ms": 7.0, "files_per_day_after": 1, "most_files_a_day": 1, "partitions_compacted": 363,
            "manifests_before": 68, "manifests": 70, "built_seconds": 90.0, "compact_seconds": 60.0,
            "by_hour": [{"hour": "2026-01-01-04:00", "seconds": 9.0, "landing_started": 1.0, "landing_ended": 4.0,
                         "first_load_asked": 5.0, "last_load_asked": 6.0, "load_runs": 2}]}


def test_each_cases_jobs_run_its_own_processes_and_its_report_fits_the_report(tmp_path, monkeypatch):
    bench = _bench(tmp_path, monkeypatch)
    report = {"when": bench.when, "machine": {"cores": 2, "memory_gb": 1.0, "python": "3"}, "versions": {},
              "parameters": {"messages": 7, "hours": 1, "day_hours": 2, "partitions": 4, "workers": 1},
              "production": [], "freeze_seconds": 1.0, "seconds_total": 9.0}
    labels = []
    for case in cases.CASES:
        jobs = case.jobs(bench)
        assert jobs, case.name
        assert {j.contender for j in jobs} <= {*case.contenders, *processes.CONTENDERS}, case.name
        labels += [j.label for j in jobs]
        part = case.report(bench, {j.label: _measured(j.contender) for j in jobs})
        assert part and not set(part) & set(report), case.name  # each case has a part of its own
        report |= part
    assert len(labels) == len(set(labels)), "every measurement's label is the run's only one"
    report["memory"] = memory_rows(report["throughput"], report["server_memory"])
    report["goals"] = evaluate_goals(report)
    md = markdown(report)
    assert [line[4:] for line in md.splitlines() if line.startswith("### ")] == list(SECTIONS)
    assert "Not measured in this run" not in md and len(report["goals"]) == len(GOALS)


def test_every_process_a_job_names_is_one_the_cli_runs():
    named = {c for case in cases.CASES for c in case.contenders}
    found = cases.contenders()
    assert {"kafka_landing", "freeze", "warehouse", "widening_year"} <= set(found)
    assert named | set(processes.CONTENDERS) == set(found)
    assert [name for name, f in found.items() if not callable(f)] == []


@pytest.fixture
def runs(monkeypatch):
    """The runs the CLI asks for, none made."""
    calls = []
    for cli_of in (cli, options):  # the benchmark's, and a case module's run as a script
        monkeypatch.setattr(cli_of, "run", lambda sizes, out, chosen: calls.append((sizes, out, chosen)))
    return calls


@pytest.mark.parametrize("name", [c.name for c in cases.CASES])
def test_each_case_module_runs_that_case_alone(name, runs, monkeypatch):
    """`python -m kafka_landing_tools.bench.<case> --quick`: the case's own module is the CLI for it."""
    monkeypatch.setattr("sys.argv", [f"{name}.py", "--quick"])
    with warnings.catch_warnings():  # the module is imported already (by `cases`): run again as a script
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module(f"kafka_landing_tools.bench.{name}", run_name="__main__")
    (sizes, _, chosen), = runs
    assert [c.name for c in chosen.cases] == [name] and chosen.docs_page is None
    assert (sizes.messages, sizes.hours, sizes.day_hours) == (QUICK.messages, QUICK.hours, QUICK.day_hours)


def test_cases_named_run_alone_in_the_runs_order(runs):
    cli.main(["--case", "widening", "--case", "throughput", "--messages", "1000"])
    (sizes, _, chosen), = runs
    assert [c.name for c in chosen.cases] == ["throughput", "widening"]
    assert sizes.messages == 1000 and chosen.docs_page is None


def test_the_quick_run_leaves_the_many_topics_out_unless_it_is_named(runs):
    cli.main(["--quick"])
    cli.main(["--quick", "--case", "many_topics"])
    cli.main(["--many-topics", "0", "--no-docs"])
    (quick, _, every), (named, _, alone), (_, _, none) = runs
    assert "many_topics" not in [c.name for c in every.cases] and quick.many_topics == 0
    assert [c.name for c in alone.cases] == ["many_topics"] and named.many_topics == options.QUICK_MANY_TOPICS
    assert [c.name for c in none.cases] == [c.name for c in cases.CASES if c.name != "many_topics"]


def test_an_unknown_case_is_refused_naming_the_cases(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--case", "parquet"])
    assert "warehouse_load" in capsys.readouterr().err


@pytest.mark.parametrize("argv, page", [([], DOCS_PAGE), (["--quick"], None), (["--no-docs"], None),
                                        (["--messages", "1000"], DOCS_PAGE), (["--case", "throughput"], None)])
def test_a_full_run_writes_the_docs_page_and_a_smoke_run_does_not(runs, argv, page):
    cli.main(argv)
    (_, _, chosen), = runs
    assert chosen.docs_page == page


def test_a_run_checks_the_pages_markers_before_it_measures_anything(tmp_path, monkeypatch):
    page = tmp_path / "benchmark.md"
    page.write_text("# Benchmark\n")
    monkeypatch.setattr("kafka_landing_tools.devstack.up", lambda: pytest.fail("the run started"))
    with pytest.raises(ValueError, match="the latest run goes between"):
        run(Sizes(), tmp_path, Options(cases.CASES, docs_page=page))
