"""Spark reads and writes gs:// through the Hadoop GCS connector, configured only by
spark_config(): here on the GCS emulator (fake-gcs-server) that STORAGE_EMULATOR_HOST
names. The landing writer depends on what is checked: a partitioned Avro write with
mode("error") lands one object per partition folder and nothing else the reader would
pick up, the objects read back by explicit file list are exactly the rows written,
and a second write into the same path fails instead of adding files."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from kafka_landing.spark_setup import gcs_config

# The emulator fixtures; redundant (and harmless) once conftest.py loads this plugin itself.

SCHEMA = "id long, _kl_table string, _kl_part int, payload string"
KEYS = ["_kl_table", "_kl_part"]


@pytest.fixture(scope="module")
def gcs_spark(gcs_emulator, spark):
    """The suite's one Spark session, refused unless its engine sends gs:// to the emulator: a
    server started without it would send gs:// to real GCS."""
    root = spark.conf.get("spark.hadoop.fs.gs.storage.root.url", None)
    assert root == gcs_emulator.rstrip("/") + "/", (
        f"the shared Spark session sends gs:// to {root or 'real GCS'}, not to the emulator at {gcs_emulator}: "
        "the stack's Spark Connect server must be started with it (devstack does)")
    assert spark.conf.get("spark.hadoop.fs.gs.auth.type") == "UNAUTHENTICATED"
    return spark


@pytest.fixture(scope="module")
def bucket(gcs_client):
    """One bucket for the module (the property test writes many staging folders into it)."""
    # Imported here, after pytest_plugins loaded the module (with assertion rewriting).
    from kafka_landing_tests.gcs_support import drop_bucket, new_bucket

    name = new_bucket(gcs_client, "kl-spark")
    yield name
    drop_bucket(gcs_client, name)


def _write(spark, rows: list[tuple], target: str) -> None:
    """As the landing writer does: one task per partition folder, Avro, never over existing output."""
    df = spark.createDataFrame(rows, SCHEMA)
    df.repartition(*KEYS).write.partitionBy(*KEYS).format("avro").mode("error").save(target)


def _objects(gcs_client, bucket: str, prefix: str) -> dict[str, int]:
    """Object name -> generation under the prefix, as the bucket lists them."""
    return {b.name: b.generation for b in gcs_client.list_blobs(bucket, prefix=prefix + "/")}


def _read(spark, bucket: str, prefix: str, names) -> list[tuple]:
    """Read back by explicit file list, as the loader does; basePath turns the folders into columns."""
    files = [f"gs://{bucket}/{n}" for n in sorted(names)]
    df = spark.read.format("avro").option("basePath", f"gs://{bucket}/{prefix}").load(files)
    # Partition values come back as strings (spark_config turns type inference off).
    return sorted(tuple(r) for r in df.select("id", "_kl_table", F.col("_kl_part").cast("int"), "payload").collect())


def test_a_partitioned_avro_write_lands_one_object_per_folder_and_reads_back_exactly(gcs_spark, gcs_client, bucket):
    prefix = f"staging/{uuid.uuid4().hex}"
    rows = [(i, ("orders", "page_views", "other_events")[i % 3], i % 2, f"p{i}") for i in range(30)]
    _write(gcs_spark, rows, f"gs://{bucket}/{prefix}")

    names = _objects(gcs_client, bucket, prefix)
    data = sorted(n for n in names if n.endswith(".avro"))
    folders = sorted(n[len(prefix) + 1:].rsplit("/", 1)[0] for n in data)
    assert folders == sorted(f"_kl_table={t}/_kl_part={p}" for t, p in {(r[1], r[2]) for r in rows}), names
    # What else the write leaves: the classic committer's empty _SUCCESS marker and nothing of its
    # _temporary folder. The connector's "folder/" marker objects may stay on GCS (the emulator's
    # filesystem backend drops them); readers skip them.
    assert not [n for n in names if "_temporary" in n], names
    assert {n for n in names if n not in data and not n.endswith("/")} == {f"{prefix}/_SUCCESS"}

    assert _read(gcs_spark, bucket, prefix, data) == sorted(rows)
    # Exactly those files: leaving one out loses its folder's rows.
    assert _read(gcs_spark, bucket, prefix, data[1:]) != sorted(rows)


def test_a_second_write_into_existing_output_fails_and_changes_nothing(gcs_spark, gcs_client, bucket):
    prefix = f"staging/{uuid.uuid4().hex}"
    _write(gcs_spark, [(1, "orders", 0, "first")], f"gs://{bucket}/{prefix}")
    before = _objects(gcs_client, bucket, prefix)

    with pytest.raises(AnalysisException, match="PATH_ALREADY_EXISTS"):
        _write(gcs_spark, [(2, "orders", 0, "second"), (3, "web", 1, "second")], f"gs://{bucket}/{prefix}")

    assert _objects(gcs_client, bucket, prefix) == before  # same names, same generations
    assert _read(gcs_spark, bucket, prefix, [n for n in before if n.endswith(".avro")]) == [(1, "orders", 0, "first")]


# Partition values that need escaping in a folder name ('/', '%', '=', '#', '?', space, non-ASCII)
# must survive the trip through object names and back.
_TABLES = st.text(alphabet=st.sampled_from("ab_Z9 -.%=/#?+ü"), min_size=1, max_size=6)


@settings(max_examples=6, deadline=None)
@given(rows=st.lists(st.tuples(_TABLES, st.integers(0, 3), st.text(max_size=8)), min_size=1, max_size=25))
def test_any_partition_values_round_trip_through_gs(gcs_spark, gcs_client, bucket, rows):
    rows = [(i, t, p, payload) for i, (t, p, payload) in enumerate(rows)]
    prefix = f"staging/{uuid.uuid4().hex}"
    _write(gcs_spark, rows, f"gs://{bucket}/{prefix}")

    data = [n for n in _objects(gcs_client, bucket, prefix) if n.endswith(".avro")]
    folders = {n[len(prefix) + 1:].rsplit("/", 1)[0] for n in data}
    assert len(data) == len(folders) == len({(r[1], r[2]) for r in rows})
    assert _read(gcs_spark, bucket, prefix, data) == sorted(rows)


def test_the_emulator_gets_unauthenticated_access_and_the_operations_it_has():
    config = gcs_config({"STORAGE_EMULATOR_HOST": "127.0.0.1:18082"})
    assert config["spark.hadoop.fs.gs.storage.root.url"] == "http://127.0.0.1:18082/"
    assert config["spark.hadoop.fs.gs.auth.type"] == "UNAUTHENTICATED"
    assert config["spark.hadoop.fs.gs.hierarchical.namespace.folders.enable"] == "false"
    assert config["spark.hadoop.fs.gs.operation.move.enable"] == "false"


def test_production_names_the_key_file_and_never_carries_its_content(tmp_path):
    key = tmp_path / "sa.json"
    key.write_text('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----SECRET"}')
    config = gcs_config({"GOOGLE_APPLICATION_CREDENTIALS": str(key)})
    assert config["spark.hadoop.fs.gs.auth.type"] == "SERVICE_ACCOUNT_JSON_KEYFILE"
    assert config["spark.hadoop.fs.gs.auth.service.account.json.keyfile"] == str(key)
    assert "SECRET" not in repr(config)
    assert not any("storage.root.url" in k for k in config), "production must use the real GCS endpoint"
    assert gcs_config({})["spark.hadoop.fs.gs.auth.type"] == "APPLICATION_DEFAULT"


@pytest.mark.parametrize("env", [{}, {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:18082"}])
def test_the_classic_committer_is_used_on_gcs_and_on_the_emulator(env):
    """Hadoop's default for gs:// (the manifest committer) is bypassed by Spark's own commit protocol."""
    assert (gcs_config(env)["spark.hadoop.mapreduce.outputcommitter.factory.scheme.gs"]
            == "org.apache.hadoop.mapreduce.lib.output.FileOutputCommitterFactory")
