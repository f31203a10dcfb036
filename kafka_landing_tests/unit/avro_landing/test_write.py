"""A written file the read-back cannot read (write._written) fails the landing naming the file,
the topic, partition and offsets, and what to do: fastavro could not read it back, whoever
wrote it (Spark's Avro writer, the splice writer, the direct operator), so it never says Spark
wrote it (review 2026-11-28 S3)."""

from __future__ import annotations

import pytest

from kafka_landing.avro_landing.write import staged_files
from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError, is_transient
from kafka_landing_tests.mem_store import MemStore
from kafka_landing_tests.unit.test_avro_files import avro_long, container, landing_schema

CFG = TopicConfig("web", "w", table="events")
HOUR = "2026-11-20T13"
SRC = "staging/web/hour=2026-11-20T13/a/schema_id=7/_kl_hour=2026-11-20T13/_kl_chunk=1200/_kl_part=3/part-0.avro"


def test_a_file_that_cannot_be_read_back_fails_naming_it_its_offsets_and_what_to_do():
    store = MemStore()
    # A union branch that does not exist where the offset should be read: not a readable record.
    store.files[SRC] = container({"type": "record", "name": "R", "fields": [
        {"name": "u", "type": ["null", "long"]}, {"name": "_kafka_offset", "type": "long"}]}, [avro_long(5) + avro_long(1) + avro_long(10)])
    with pytest.raises(LandingError) as err:
        staged_files(store, CFG, 7, {(HOUR, 1200, "events", 3, None): SRC})
    said = str(err.value)
    assert "cannot be read back by fastavro" in said and "Spark wrote" not in said
    assert store.location(SRC) in said
    assert "topic 'web' partition 3" in said and "from offset 1200" in said and HOUR in said
    assert "Nothing was published" in said and "report" in said
    assert not is_transient(err.value)


def test_a_file_whose_values_fastavro_refuses_is_still_named_by_its_offsets():
    store = MemStore()
    store.files[SRC] = container(landing_schema({"type": "int", "logicalType": "time-millis"}),
                                 [avro_long(90_000_000) + avro_long(off) + avro_long(0) for off in (40, 41)])
    [staged] = staged_files(store, CFG, 7, {(HOUR, 1200, "events", 3, None): SRC})
    assert (staged.file.rows, staged.file.first_offset, staged.file.last_offset) == (2, 40, 41)
