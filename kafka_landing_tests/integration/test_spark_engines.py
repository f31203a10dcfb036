"""Both engines a run can land on: the warm Spark Connect server (the default) and a classic
session the run starts (KAFKA_LANDING_SPARK=classic). pyspark marks a whole process as one or the
other, and this suite's process is on Connect, so the classic engine runs in processes of its own,
as `dagster asset materialize` starts them."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import fastavro
from confluent_kafka.schema_registry import Schema

from kafka_landing.avro_landing.framing import frame
from kafka_landing.handoff.manifests import DoneFile
from kafka_landing.naming import ONE_HOUR, asset_safe, floor_hour, hour_key, to_millis
from kafka_landing.spark_setup import CONNECT_MARK, default_parallelism, is_connect, pieces_of_a_range
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import content_key

SCHEMA = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}, {"name": "kind", "type": "string"}]}


def test_the_connect_engine_knows_how_many_pieces_a_read_is_cut_into(spark):
    assert is_connect(spark)
    assert default_parallelism(spark) == pieces_of_a_range(spark) >= 1


def test_a_classic_session_of_its_own_process_knows_it_too(spark):
    script = ("from kafka_landing.spark_setup import *\n"
              "s = open_session(None, spark_config())\n"
              "print(is_connect(s), default_parallelism(s), pieces_of_a_range(s))\n")
    # This process is on Connect, and pyspark marked it so: the child inherits the mark, and
    # must still start a classic session of its own.
    assert os.environ.get(CONNECT_MARK)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    connect, configured, pieces = out.stdout.split()[-3:]
    assert connect == "False" and int(configured) == int(pieces) >= 1


def _materialize(topic: str, hour: str, root: Path, tmp: Path, engine: str) -> subprocess.CompletedProcess:
    home = tmp / f"dagster_home_{engine}"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # The run's process inherits this one's environment, pyspark's mark of a Connect process included.
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env.update(DAGSTER_HOME=str(home), KAFKA_LANDING_ROOT=str(root), KAFKA_LANDING_SPARK=engine)
    select = f"kafka_slices/{asset_safe(topic)},avro_landing/{asset_safe(topic)}"
    return subprocess.run([Path(sys.executable).parent / "dagster", "asset", "materialize", "-m", "kafka_landing.definitions",
                           "--select", select, "--partition", hour], env=env, capture_output=True, text=True, timeout=600)


def _landed(root: Path) -> tuple[dict, list[tuple]]:
    """The hour's done files without when or by whom, and every landed row."""
    done = {p.parent.name: content_key(DoneFile.from_dict(json.loads(p.read_text())))
            for p in sorted(root.rglob("_DONE.json"))}
    rows = []
    for p in sorted((root / "tables").rglob("*.avro")):
        with open(p, "rb") as f:
            rows += [(r["_kafka_partition"], r["_kafka_offset"], r.get("n"), r.get("kind")) for r in fastavro.reader(f)]
    return done, sorted(rows, key=lambda r: (r[0], r[1], str(r[2])))


def _body(record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), record)
    return buf.getvalue()


def test_an_hour_lands_the_same_on_the_warm_engine_and_on_a_classic_session(
        code_location, make_topic, send, registry, spark, tmp_path):
    topic = make_topic(partitions=2)
    sid = registry.client().register_schema(f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO"))
    h = floor_hour(utcnow()) - ONE_HOUR * 3
    values = [frame(sid, _body({"n": i, "kind": "a" if i % 2 else "b"})) if i % 10 else b"\x01 bad magic"
              for i in range(40)]
    send([(topic, i % 2, to_millis(h + timedelta(minutes=i)), None, v) for i, v in enumerate(values)])
    code_location({topic: {"dataset": "eng", "table": "ticks", "dead_letter_limit": 1.0}})

    landed = {}
    for engine in ("connect", "classic"):
        root = tmp_path / f"landing_{engine}"
        out = _materialize(topic, hour_key(h), root, tmp_path, engine)
        assert out.returncode == 0, f"{engine}: {out.stderr[-4000:]}"
        landed[engine] = _landed(root)
    done, rows = landed["connect"]
    assert len(rows) == 36 and len(done) == 1  # 4 of the 40 are dead letters (bad magic byte)
    assert [f["rows"] for f in next(iter(done.values()))["files"]] and next(iter(done.values()))["dead_letters"]["rows"] == 4
    assert landed["classic"] == landed["connect"]
