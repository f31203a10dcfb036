"""An Iceberg warehouse root whose path a file URI escapes (a space, %, #, non-ASCII) keeps its
tables' metadata under the root (review 2026-11-28, S10, ported from `repro/s_iceberg_root_space.py`).
pyiceberg writes a table's metadata to its location as a string, never unquoted: a `%20` location
put it in a sibling folder, where no copy of the root and no upkeep looks. Pure Python: pyarrow
writes one Parquet file and the warehouse's commits make the table with it (`Commits.create`)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_landing.warehouse.iceberg import IcebergWarehouse, upkeep

SCHEMA = {"type": "struct", "fields": [{"name": "n", "type": "long", "nullable": True, "metadata": {}}]}


@pytest.mark.parametrize("name", ["s10 root", "per%20cent", "hash#tag", "été"])
def test_a_root_whose_path_a_uri_escapes_keeps_its_tables_metadata_under_it(tmp_path, name):
    root = tmp_path / name
    wh = IcebergWarehouse(str(root))
    data = root / "shop" / "orders" / "data" / "hour=H0" / "x" / "part-00000.parquet"
    data.parent.mkdir(parents=True)
    pq.write_table(pa.table({"n": pa.array([1, 2], pa.int64()), "hour": pa.array(["H0", "H0"])}), data)

    assert wh.commits.create(("shop", "orders"), SCHEMA, [([str(data)], {"kafka-landing.partition": "H0",
                                                                          "kafka-landing.column": "hour"})])

    t = IcebergWarehouse(str(root)).table("shop", "orders")
    assert t.current_snapshot().manifest_list.startswith(str(root / "shop" / "orders" / "metadata") + "/")
    metadata = [f for _, _, fs in os.walk(root) for f in fs if f.endswith((".avro", ".metadata.json"))]
    assert len(metadata) == 3  # the table's metadata, its manifest list and manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "a folder beside the root"
    assert sorted(t.scan().to_arrow().column("n").to_pylist()) == [1, 2]
    later = datetime.now(timezone.utc) + timedelta(days=2)
    assert [(u.snapshots_kept, u.files_removed) for u in upkeep(wh, timedelta(days=7), now=later)] == [(1, 0)]
