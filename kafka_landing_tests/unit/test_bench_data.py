"""The benchmark's data: the fast encoder writes exactly what fastavro writes, and the
records differ from each other (identical records would flatter compression and Spark)."""

import fastavro
import pytest

from kafka_landing.avro_landing.framing import frame
from kafka_landing_tools.bench.data import (
    DAY_ROUTE,
    N_SHAPES,
    SCHEMAS,
    RecordMaker,
    fastavro_encode,
)

TS = 1_780_000_000_000  # 2026


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_value_is_the_bytes_fastavro_writes_for_its_record(kind):
    maker = RecordMaker(kind, schema_id=42)
    parsed = fastavro.parse_schema(SCHEMAS[kind])
    # Many shapes, small and large ids (varints of every width), timestamps across an hour.
    for n in [*range(3 * N_SHAPES), 127, 128, 16_383, 16_384, 1_199_999, 2**40]:
        ts = TS + n % 3_600_000
        assert maker.value(n, ts) == frame(42, fastavro_encode(parsed, maker.record(n, ts))), (kind, n)


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_records_differ_from_each_other(kind):
    maker = RecordMaker(kind, schema_id=1)
    values = [maker.value(n, TS + n) for n in range(2000)]
    assert len(set(values)) == len(values)
    assert len({len(v) for v in values}) > 4, "records come in several shapes (sizes), not one"


def test_the_day_reaches_every_table_of_its_route():
    maker = RecordMaker("event", schema_id=1)
    types = {maker.record(n, TS)["type"] for n in range(500)}
    tables = {DAY_ROUTE["tables"].get(t, DAY_ROUTE["default"]) for t in types}
    assert tables == {*DAY_ROUTE["tables"].values(), DAY_ROUTE["default"]}
