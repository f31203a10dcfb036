"""The benchmark keeps working: in a tiny run every contender lands exactly the slices'
records and the report holds every section and goal; a wrong count fails it."""

import json

import pytest

from kafka_landing_tools.bench import (
    CONTENDERS,
    GOALS,
    SECTIONS,
    SHORT_READ_ENV,
    BenchError,
    run,
)


def test_every_contender_lands_the_slices_records_and_the_report_is_complete(tmp_path, stack):
    # One case and a two-hour day, two measurements at a time: the sizes and the timings
    # belong to `make bench`, not to every test run.
    report = run(messages=200, hours=1, out=tmp_path, cases=(("small", 1),), day_hours=2, workers=2)
    assert {(r["case"], r["contender"], r["records"]) for r in report["throughput"]} == {
        ("small 1x", c, 200) for c in CONTENDERS}
    assert report["fixed_cost"]["empty_hour"]["records"] == 0
    stages = report["stages"]
    assert [(st["case"], st["records"], list(st["seconds"])) for st in stages] == [
        ("small 1x", 200, ["read", "read + decode", "read + decode + route"])]
    backfill = report["backfill"]
    assert backfill["one_run"]["records"] == backfill["single_runs"]["records"] == backfill["processes"]["records"] == 200
    warehouse = report["warehouse"]
    assert len(warehouse["tables"]) == 3, "the day is routed into several tables, and all of them are loaded"
    assert (warehouse["all_hours"]["records"], warehouse["one_hour"]["records"]) == (200, 100)
    amendment = report["amendment"]
    # The late hour's 10 records all belong to one event day of the day, in each of the 3 tables it
    # feeds: those event days are replaced whole, holding their hours' records and the late ones.
    assert amendment["late_records"] == 10 and amendment["records"] >= 10
    assert [k.split(" (")[0] for k in amendment["stages"]] == [
        "first versions of the day", "the late hour's landing-hour load", "the amendment"]

    md = (tmp_path / "bench.md").read_text()
    assert [s for s in SECTIONS if f"### {s}\n" not in md] == []
    assert [text for text in GOALS.values() if text not in md] == []
    goals = {g["key"]: g for g in json.loads((tmp_path / "bench.json").read_text())["goals"]}
    assert set(goals) == set(GOALS)
    # Every goal is evaluated from this run's numbers but memory, which needs a 4x case, the ~1 KB
    # case's, which needs that case, and the many-topics ones, which need their topics; and the
    # per-record pass, if 200 records landed no slower than an empty hour (no rate to judge).
    unmeasured = ("memory_4x", "vs_python_valve_large", "many_topics", "many_topics_vs_one")
    kl = next(r for r in report["throughput"] if r["contender"] == "kafka_landing")
    if kl["seconds"] <= report["fixed_cost"]["empty_hour"]["seconds"]:
        unmeasured += ("pass_vs_librdkafka_raw",)
    assert [k for k, g in goals.items() if (g["met"] is None) != (k in unmeasured)] == []
    # The warm server of the small case was one of its own: its peak memory is measured.
    assert [(m["case"], m["records"]) for m in report["server_memory"]] == [("small 1x", 200)]
    assert report["server_memory"][0]["server_peak_rss_mb"] > 100
    assert not list(tmp_path.glob("work_*")), "the landed files of a passed run are removed"


def test_a_contender_landing_one_record_too_few_fails_the_bench(tmp_path, stack, monkeypatch):
    monkeypatch.setenv(SHORT_READ_ENV, "1")
    with pytest.raises(BenchError, match=r"librdkafka_raw landed 39 records of .*the frozen slices hold 40"):
        run(messages=40, hours=1, out=tmp_path, cases=(("small", 1),), day_hours=1, contenders=("librdkafka_raw",))
    assert not (tmp_path / "bench.md").exists()
