"""The whole flow in production's shape, on the GCS emulator: a gs:// landing root (Spark writes
the hour's files through the GCS connector, the store publishes them without rename, the sensor
finds the done files in the bucket) and a gs:// warehouse root named by a REST catalog (the
stack's Iceberg REST server, BigLake's part), the Iceberg warehouse loading from gs://; then
BigQuery from the same bucket. The same records as on a local root, exactly once."""

from __future__ import annotations

import uuid

import pandas as pd
import yaml
from google.cloud import storage
from pyiceberg.catalog.rest import RestCatalog

from kafka_landing.definitions import build_definitions, build_resources
from kafka_landing_tools.demo.generate import ORDERS, WEB, demo_hours, generate
from kafka_landing.naming import Hour, hour_key
from kafka_landing.warehouse.iceberg.gcs_io import emulator_host, gcs_properties
from kafka_landing_tests.bigquery_fake import FakeBigQuery
from kafka_landing_tests.conftest import utcnow
from kafka_landing_tests.helpers import table_rows
from kafka_landing_tests.integration.test_end_to_end import covered_hours, land, run_requests
from kafka_landing_tests.sensor_ticks import tick

HOURS = 2


def event_runs(defs, instance) -> list[str]:
    """One tick of the event sensor and its runs, each passing its conservation check; the days loaded."""
    from kafka_landing.warehouse.sensors import EVENT_SENSOR_NAME
    from kafka_landing_tools.demo.loads import run_event_requests

    result = tick(defs, instance, sensor=EVENT_SENSOR_NAME)
    assert result.run_requests, "the landed orders marked their event days"
    for run in run_event_requests(defs, result, instance):
        assert run.success
    return sorted(r.partition_key for r in result.run_requests)


def assert_checks_download_no_landing_file(bucket: str, topic: str, dataset: str, hour, monkeypatch) -> None:
    """N12: the landing check, the loader's verification and the warehouse check read each landed
    file's CRC32C, recorded when it was written, not its bytes; a cut file still fails them."""
    from google.cloud.storage.blob import Blob

    from kafka_landing.avro_landing.conservation import check_landed_hour
    from kafka_landing.config import TopicConfig
    from kafka_landing.errors import KafkaLandingError
    from kafka_landing.kafka_slices.freeze import frozen_slice
    from kafka_landing.handoff.manifests import DoneFile
    from kafka_landing.naming import done_file_path
    from kafka_landing.store import open_store
    from kafka_landing.warehouse.load import verify_files

    store = open_store(f"gs://{bucket}/landing")
    cfg, plan = TopicConfig(topic=topic, dataset=dataset, table="orders"), frozen_slice(store, topic, Hour(hour))
    done = DoneFile.from_dict(store.read_json(done_file_path(dataset, "orders", hour)))
    assert done.files and all(f.crc32c for f in done.files), "every landed file records its CRC32C"
    fetched: list[str] = []
    download = Blob.download_as_bytes

    def counting(self, *args, **kwargs):
        fetched.append(self.name)
        return download(self, *args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(Blob, "download_as_bytes", counting)
        assert check_landed_hour(store, cfg, plan).passed
        verify_files(store, done)
        assert not [n for n in fetched if n.endswith(".avro")], fetched
    cut = done.files[0].path
    whole = store.read_bytes(cut)
    store.write_atomic(cut, whole[:-9])
    try:
        assert not check_landed_hour(store, cfg, plan).passed
        try:
            verify_files(store, done)
            raise AssertionError("a cut file passed the loader's verification")
        except KafkaLandingError as exc:
            assert "not a whole Avro file" in str(exc)
    finally:
        store.write_atomic(cut, whole)


def test_whole_flow_on_a_gs_landing_root(gcs_emulator, gcs_bucket, instance, bootstrap, registry_url, spark,  # noqa: F811
                                         tmp_path, monkeypatch, iceberg_rest_url):
    suffix = uuid.uuid4().hex[:6]
    topics = {ORDERS: f"gorders_{suffix}", WEB: f"gweb_{suffix}"}
    now = utcnow()
    sent = generate(bootstrap, registry_url, hours=HOURS, per_hour=60, now=now, topics=topics)
    config = tmp_path / "topics.yaml"
    config.write_text(yaml.safe_dump({"defaults": {"grace_minutes": 5, "dead_letter_limit": 0.5}, "topics": {
        topics[ORDERS]: {"dataset": f"gshop_{suffix}", "table": "orders", "event_time_field": "created_at"},
        topics[WEB]: {"dataset": f"gweb_{suffix}", "route": {"field": "type", "tables": {"page_view": "page_views"},
                                                              "default": "other_events"}},
    }}))
    monkeypatch.setenv("KAFKA_LANDING_TOPICS_CONFIG", str(config))
    monkeypatch.setenv("KAFKA_LANDING_ROOT", f"gs://{gcs_bucket}/landing")
    # Production's shape: the tables in the bucket too, named by a REST catalog (BigLake's part, here
    # the stack's Iceberg REST server, which writes their metadata to the bucket itself).
    warehouse = f"gs://{gcs_bucket}/warehouse"
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE_ROOT", warehouse)
    monkeypatch.setenv("KAFKA_LANDING_ICEBERG_CATALOG_URI", iceberg_rest_url)
    monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "iceberg")  # the default: Iceberg tables loaded from the bucket
    catalog = RestCatalog("kafka_landing", uri=iceberg_rest_url, **gcs_properties(emulator_host()))
    defs = build_definitions()
    hours = demo_hours(now, HOURS)
    for hour in hours:
        result = land(defs, instance, hour_key(hour))
        assert result.success
        conserved = [ev.passed for ev in result.get_asset_check_evaluations() if ev.check_name == "conservation"]
        assert conserved and all(conserved), conserved

    names = [b.name for b in storage.Client().list_blobs(gcs_bucket)]
    assert not [n for n in names if n.startswith("landing/staging/")], "an attempt's staging was left behind"
    assert any(n.endswith("_DONE.json") for n in names) and any(n.endswith(".avro") for n in names)

    first = tick(defs, instance)
    assert sorted(k.path[-1] for r in first.run_requests for k in r.asset_selection) == [
        "orders", "other_events", "page_views"], "each table in one run (the tables of the same hours together)"
    assert all(covered_hours(r) == [hour_key(h) for h in hours] for r in first.run_requests)
    run_requests(defs, instance, first.run_requests)
    assert not tick(defs, instance, cursor=first.cursor).run_requests
    assert_checks_download_no_landing_file(gcs_bucket, topics[ORDERS], f"gshop_{suffix}", hours[0], monkeypatch)

    rows = pd.concat([table_rows(warehouse, f"gshop_{suffix}", "orders", catalog),
                      table_rows(warehouse, f"gweb_{suffix}", "page_views", catalog),
                      table_rows(warehouse, f"gweb_{suffix}", "other_events", catalog)])
    assert catalog.load_table(f"gshop_{suffix}.orders").metadata_location.startswith(f"{warehouse}/gshop_{suffix}/")
    got = sorted(zip(rows["_kafka_topic"], rows["_kafka_partition"], rows["_kafka_offset"]))
    assert got == sorted((s.topic, s.partition, s.offset) for s in sent.records if not s.bad)

    # The orders' event-time table, from the same files in the bucket: every landed order exactly once.
    event_days = event_runs(defs, instance)
    by_event = table_rows(warehouse, f"gshop_{suffix}", "orders__by_event", catalog)
    order_keys = sorted((s.topic, s.partition, s.offset) for s in sent.records
                        if s.topic == topics[ORDERS] and not s.bad)
    assert sorted(zip(by_event["_kafka_topic"], by_event["_kafka_partition"], by_event["_kafka_offset"])) == order_keys
    assert set(by_event["event_day"].astype(str)) == set(event_days)

    # The same landed hours into BigQuery, by configuration only: the sensor finds them not loaded in
    # BigQuery, the loads run as free load jobs from the bucket, and the conservation checks read
    # each partition back. The BigQuery fake serves the REST API; the client is real.
    fake = FakeBigQuery(lambda uri: storage.Client().bucket(uri[5:].split("/", 1)[0])
                        .blob(uri[5:].split("/", 1)[1]).download_as_bytes())
    fake.start()
    try:
        monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", fake.url)
        monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "bigquery")
        monkeypatch.setenv("KAFKA_LANDING_BIGQUERY_PROJECT", "kl-flow")
        monkeypatch.setenv("KAFKA_LANDING_BIGQUERY_LOCATION", "US")
        bq_defs = build_definitions()
        requested = []
        for _ in range(3):  # the reconciliation marks what BigQuery has not loaded, a bounded number per tick
            requested += tick(bq_defs, instance).run_requests
        # A repeated tick asks for the same runs again (Dagster launches each run key once).
        unique = list({r.run_key: r for r in requested}.values())
        assert sorted(k.path[-1] for r in unique for k in r.asset_selection) == [
            "orders", "other_events", "page_views"], "each table in one run"
        assert all(covered_hours(r) == [hour_key(h) for h in hours] for r in unique)
        run_requests(bq_defs, instance, unique)  # every hour's conservation check evaluated, and passed
        loaded = sum(sum(fake.partition_counts("kl-flow", ds, t).values())
                     for ds, t in [(f"gshop_{suffix}", "orders"), (f"gweb_{suffix}", "page_views"),
                                   (f"gweb_{suffix}", "other_events")])
        assert loaded == len(got)
        days = {h.strftime("%Y%m%d") for h in hours}
        assert len(fake.job_ids("kl-flow")) == len(days) * 3, "one load job per (table, day)"
        assert not tick(bq_defs, instance).run_requests

        # The event-time table in BigQuery: each event day one decorator load of its version's files
        # into a table partitioned on created_at; every landed order exactly once.
        from kafka_landing.config import load_config
        from kafka_landing.store import open_store
        from kafka_landing.warehouse.by_event.load import load_event_partition
        from kafka_landing.warehouse.by_event.measures import event_conservation

        store = open_store(f"gs://{gcs_bucket}/landing")
        cfg = load_config().topic(topics[ORDERS])
        backend = build_resources()["warehouse"].backend(store)
        for day in event_days:
            load_event_partition(backend, store, cfg, "orders", day, lambda: None)
            c = event_conservation(store, backend, cfg, "orders", day)
            assert c.ok, c.why
        rows_bq = [r for pid in fake.partition_counts("kl-flow", f"gshop_{suffix}", "orders__by_event")
                   for r in fake.partition_rows("kl-flow", f"gshop_{suffix}", "orders__by_event", pid)]
        assert sorted((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows_bq) == order_keys
    finally:
        fake.stop()
        monkeypatch.delenv("BIGQUERY_EMULATOR_HOST")
        monkeypatch.setenv("KAFKA_LANDING_WAREHOUSE", "iceberg")

    # Re-landing an hour over the bucket replaces its files, never adds to them (the hours' files: not
    # the BigQuery loads' reader schemas under tables/<dataset>/<table>/_reader_schemas/).
    before = sorted(n for n in names if n.endswith(".avro") and "/hour=" in n)
    assert land(defs, instance, hour_key(hours[0])).success
    after = sorted(b.name for b in storage.Client().list_blobs(gcs_bucket)
                   if b.name.endswith(".avro") and "/hour=" in b.name)
    assert after == before

    # The hours landed again from their archive in the bucket (the replay job, source archive): the
    # archive source reads the landing files and dead letters through Spark's gs:// connector, and
    # the hours come back as the same files, every hour conserved.
    from kafka_landing.definitions import replay_job_name

    for topic in topics.values():
        op = f"avro_landing__{topic}"
        replayed = defs.resolve_job_def(replay_job_name(topic)).execute_in_process(
            instance=instance, raise_on_error=False, run_config={"ops": {op: {"config": {"source": "archive"}}}},
            tags={"dagster/asset_partition_range_start": hour_key(hours[0]),
                  "dagster/asset_partition_range_end": hour_key(hours[-1])})
        assert replayed.success
        stories = [e.materialization.metadata for e in replayed.get_asset_materialization_events()]
        assert len(stories) == HOURS and {m["source"].value for m in stories} == {"archive"}
        conserved = [ev.passed for ev in replayed.get_asset_check_evaluations() if ev.check_name == "conservation"]
        assert len(conserved) == HOURS and all(conserved), conserved
    assert sorted(b.name for b in storage.Client().list_blobs(gcs_bucket)
                  if b.name.endswith(".avro") and "/hour=" in b.name) == before
