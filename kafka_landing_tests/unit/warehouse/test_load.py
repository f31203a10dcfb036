"""A warehouse that cannot be written is named before any load starts."""

import pytest

from kafka_landing.warehouse.iceberg import IcebergWarehouse
from kafka_landing.warehouse.load import LoadError


def test_a_writable_iceberg_root_passes(tmp_path):
    IcebergWarehouse(str(tmp_path / "wh")).check_writable()
    assert (tmp_path / "wh").is_dir() and not [p for p in (tmp_path / "wh").iterdir() if p.name != "_catalog.db"], \
        "the probe is removed"


def test_an_unwritable_iceberg_root_names_itself_and_the_variable(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")  # permissions mean nothing to root; a file in the way does
    with pytest.raises(LoadError) as err:
        IcebergWarehouse(str(blocker / "wh")).check_writable()
    assert str(blocker / "wh") in str(err.value) and "KAFKA_LANDING_WAREHOUSE_ROOT" in str(err.value)
