"""The benchmark's verdicts: each goal of issue 10 met or not from the two numbers it
compares, at its boundary too, and a report that shows every section and goal."""

import copy

import pytest

from kafka_landing_tools.bench import GOALS, SECTIONS, evaluate_goals, markdown, memory_rows


def _m(seconds, records=0, rss=100, contender="kafka_landing"):
    return {"contender": contender, "seconds": seconds, "records": records, "peak_rss_mb": rss}


def _row(case, messages, contender, seconds, rss):
    return {"case": case, "topic": f"t_{case}", "messages": messages, "mb": messages / 10_000, "contender": contender,
            "seconds": seconds, "records": messages, "peak_rss_mb": rss, "messages_per_s": round(messages / seconds),
            "mb_per_s": 1.0, "messages_per_s_per_core": 1, "mb_per_s_per_core": 0.5}


def _report(kl=10, valve=40, spark=20, raw=3, kl_rss_1x=1000, kl_rss_4x=1100, one_run=10, single_runs=60,
            start=4.0, empty=5.5, all_hours=30, one_hour=12):
    """Every goal met: kafka_landing 4x, 2x, 30%; backfill 1/6; 1.5 s; 2.5x; 1.1x."""
    rows = []
    for case, messages, secs, rss in (("small 1x", 300_000, (5, 10, 20, 2), (kl_rss_1x, 900, 60, 40)),
                                      ("large 1x", 300_000, (6, 12, 30, 3), (1500, 950, 80, 50)),
                                      ("small 4x", 1_200_000, (kl, spark, valve, raw), (kl_rss_4x, 990, 90, 60))):
        for name, s, r in zip(("kafka_landing", "spark_by_hand", "python_valve", "librdkafka_raw"), secs, rss):
            rows.append(_row(case, messages, name, s, r))
    report = {
        "when": "2026-11-21T20:00:00+00:00",
        "machine": {"cores": 2, "memory_gb": 23.5, "python": "3.11.7"},
        "versions": {"dagster": "1.13", "pyspark": "4.0.0"},
        "parameters": {"messages": 300_000, "hours": 4, "day_hours": 24, "partitions": 4, "workers": 1},
        "production": [{"case": "small 1x", "topic": "t", "messages": 300_000, "mb": 40.0, "seconds": 3.0,
                        "messages_per_s": 100_000}],
        "freeze_seconds": 9.0,
        "seconds_total": 900.0,
        "throughput": rows,
        "fixed_cost": {"process_start": _m(start, contender="startup"), "empty_hour": _m(empty)},
        "backfill": {"hours": 24, "one_run": _m(one_run, 300_000), "single_runs": _m(single_runs, 300_000)},
        "warehouse": {"tables": ["a", "b", "c"], "hours": 24, "all_hours": _m(all_hours, 300_000, contender="warehouse"),
                      "one_hour": _m(one_hour, 12_500, contender="warehouse")},
    }
    report["memory"] = memory_rows(rows)
    return report


def _verdicts(report) -> dict:
    return {g["key"]: g["met"] for g in evaluate_goals(report)}


def test_every_goal_met():
    assert _verdicts(_report()) == dict.fromkeys(GOALS, True)


@pytest.mark.parametrize("change, goal", [
    ({"valve": 29}, "vs_python_valve"),          # valve 41k msg/s, kafka_landing 120k: 2.9x
    ({"spark": 14}, "vs_spark_by_hand"),          # 1.4x
    ({"raw": 2}, "vs_librdkafka_raw"),            # 600k msg/s: 20%
    ({"single_runs": 49}, "backfill_one_run"),    # 10 s of 49 s
    ({"empty": 6.5}, "empty_hour"),               # 2.5 s beyond a 4 s start
    ({"all_hours": 37}, "warehouse_load"),        # 37 s against 12 s: 3.08x
    ({"kl_rss_4x": 1300}, "memory_4x"),           # 1.3x
])
def test_one_goal_missed_is_that_goal_alone_not_met(change, goal):
    assert _verdicts(_report(**change)) == {**dict.fromkeys(GOALS, True), goal: False}


@pytest.mark.parametrize("change, goal", [
    ({"valve": 30}, "vs_python_valve"),           # exactly 3x
    ({"spark": 15}, "vs_spark_by_hand"),          # exactly 1.5x
    ({"raw": 2.5}, "vs_librdkafka_raw"),          # exactly 25%
    ({"single_runs": 50}, "backfill_one_run"),    # exactly 1/5
    ({"all_hours": 36}, "warehouse_load"),        # exactly 3x
    ({"kl_rss_4x": 1200}, "memory_4x"),           # exactly 1.2x
])
def test_a_goal_reached_exactly_is_met(change, goal):
    assert _verdicts(_report(**change))[goal] is True


def test_an_empty_hour_of_exactly_two_seconds_beyond_start_is_not_under_two():
    assert _verdicts(_report(start=4.0, empty=6.0))["empty_hour"] is False


def test_each_verdict_shows_the_two_numbers_it_compares():
    measured = {g["key"]: g["measured"] for g in evaluate_goals(_report(valve=29, single_runs=49, empty=6.5))}
    assert "kafka_landing 120,000 msg/s" in measured["vs_python_valve"] and "python_valve 41,379 msg/s" in measured["vs_python_valve"]
    assert "one run 10 s" in measured["backfill_one_run"] and "24 single-hour runs 49 s" in measured["backfill_one_run"]
    assert "empty hour 6.5 s" in measured["empty_hour"] and "process start 4.0 s" in measured["empty_hour"]
    assert "2.50 s beyond start" in measured["empty_hour"]


def test_the_largest_small_record_case_is_the_one_judged():
    report = _report()
    # A 1x case where kafka_landing loses badly must not change the verdict on the 4x case.
    for r in report["throughput"]:
        if r["case"] == "small 1x" and r["contender"] == "kafka_landing":
            r.update(seconds=500, messages_per_s=600)
    assert _verdicts(report)["vs_python_valve"] is True


def test_what_a_run_did_not_measure_is_not_measured_rather_than_met():
    report = _report()
    for key in ("fixed_cost", "backfill", "warehouse"):
        del report[key]
    report["throughput"] = [r for r in report["throughput"] if r["case"] == "small 1x"]
    report["memory"] = memory_rows(report["throughput"])
    verdicts = _verdicts(report)
    assert {k for k, v in verdicts.items() if v is None} == {"backfill_one_run", "empty_hour", "warehouse_load",
                                                               "memory_4x"}
    report["goals"] = evaluate_goals(report)
    md = markdown(report)
    assert md.count("not measured in this run") == 4 and md.count("| not measured |") == 4


def test_memory_compares_the_smallest_and_the_largest_small_record_case_for_every_contender():
    rows = {r["contender"]: r for r in memory_rows(_report()["throughput"])}
    assert set(rows) == {"kafka_landing", "spark_by_hand", "python_valve", "librdkafka_raw"}
    assert (rows["kafka_landing"]["low_mb"], rows["kafka_landing"]["high_mb"], rows["kafka_landing"]["ratio"]) == (1000, 1100, 1.1)
    assert rows["kafka_landing"]["low_case"] == "small 1x" and rows["kafka_landing"]["high_case"] == "small 4x"


def test_the_report_has_every_section_and_every_goal_with_its_verdict():
    report = _report(raw=2)
    report["goals"] = evaluate_goals(report)
    md = markdown(report)
    headings = [line[4:] for line in md.splitlines() if line.startswith("### ")]
    assert headings == list(SECTIONS)
    goal_lines = [line for line in md.split("### Goals")[1].splitlines() if line.startswith("| ") and "target" not in line]
    assert [next(g for g in GOALS.values() if g in line) for line in goal_lines] == list(GOALS.values())
    assert sum("| **not met** |" in line for line in goal_lines) == 1
    assert "timings mean nothing" not in md


def test_a_run_with_measurements_at_once_says_its_timings_mean_nothing():
    report = copy.deepcopy(_report())
    report["parameters"]["workers"] = 2
    report["goals"] = evaluate_goals(report)
    assert "timings mean nothing" in markdown(report)
