"""The benchmark keeps working: a tiny run, every contender landing the same records."""

import json

from kafka_landing.bench import run


def test_bench_runs_end_to_end_on_tiny_data(tmp_path, stack):
    # One case and a two-hour "day": the full matrix belongs to `make bench`, not to every test run.
    report = run(messages=200, hours=1, out=tmp_path, cases=(("small", 1),), day_hours=2)
    contenders = {r["contender"] for r in report["results"]}
    assert contenders == {"kafka_landing", "spark_by_hand", "python_valve", "librdkafka_raw"}
    by_case = {}
    for r in report["results"]:
        by_case.setdefault(r["case"], set()).add(r["records"])
    assert by_case == {"small 1x": {200}}, by_case
    assert report["backfill_24h"]["one_run"]["records"] == report["backfill_24h"]["24_runs_one_process"]["records"] > 0
    assert json.loads((tmp_path / "bench.json").read_text())["parameters"]["messages"] == 200
    assert "| small 1x | kafka_landing |" in (tmp_path / "bench.md").read_text()
