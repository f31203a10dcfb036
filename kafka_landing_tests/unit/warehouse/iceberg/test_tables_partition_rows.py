"""A landing day compacted into one file still tells each hour's rows exactly: from the data
file's statistics when it holds one hour (every load's file), from its row groups otherwise."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from kafka_landing.warehouse.iceberg.catalogs import CatalogConfig
from kafka_landing.warehouse.iceberg.tables import HOUR_COLUMN, Tables

SCHEMA = Schema(NestedField(1, "v", StringType(), required=False), NestedField(2, HOUR_COLUMN, StringType(), required=False))
TABLE = SimpleNamespace(schema=lambda: SCHEMA)
HOURS = [f"2026-01-31T{h:02d}" for h in range(24)]


def _file(path, hours: list[str], group: int, sort: bool):
    hours = sorted(hours) if sort else hours
    pq.write_table(pa.table({"v": ["x"] * len(hours), HOUR_COLUMN: hours}), path, row_group_size=group)
    low, high = min(hours).encode(), max(hours).encode()
    return SimpleNamespace(file_path=str(path), record_count=len(hours), lower_bounds={2: low}, upper_bounds={2: high},
                           null_value_counts={2: 0})


@settings(max_examples=60, deadline=None)
@given(hours=st.lists(st.sampled_from(HOURS), min_size=1, max_size=300), group=st.integers(1, 64), sort=st.booleans())
def test_each_hours_rows_of_a_file_of_many_hours_are_exact(tmp_path_factory, hours, group, sort):
    root = tmp_path_factory.mktemp("root")
    tables = Tables(str(root), CatalogConfig(), HOUR_COLUMN)
    data_file = _file(root / "day.parquet", hours, group, sort)

    counted = {h: tables.partition_rows(TABLE, data_file, h) for h in HOURS}

    assert counted == {h: Counter(hours).get(h, 0) for h in HOURS}


def test_a_file_of_one_hour_is_counted_from_its_statistics_without_being_opened(tmp_path):
    tables = Tables(str(tmp_path), CatalogConfig(), HOUR_COLUMN)
    one = SimpleNamespace(file_path=str(tmp_path / "absent.parquet"), record_count=7, lower_bounds={2: b"2026-01-31T05"},
                          upper_bounds={2: b"2026-01-31T05"}, null_value_counts={2: 0})

    assert tables.partition_rows(TABLE, one, "2026-01-31T05") == 7
