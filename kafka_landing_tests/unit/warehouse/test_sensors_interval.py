"""The load sensors tick at every wake of Dagster's sensor loop (every 5 s), judged by Dagster's own
rule: it skips a sensor whose interval has not passed since its last tick ended, and a wake comes
5 s after the last one started, so a tick's own duration short of 5 s."""

from types import SimpleNamespace

import pytest
from dagster._daemon import sensor as daemon

from kafka_landing.warehouse.sensors import LOAD_SENSOR_INTERVAL_SECONDS


@pytest.mark.parametrize("tick_seconds", [0.01, 0.5, 3.0])
def test_a_load_sensor_is_due_at_every_wake_of_the_daemons_loop(monkeypatch, tick_seconds):
    elapsed_at_next_wake = daemon.MIN_INTERVAL_LOOP_TIME - tick_seconds
    monkeypatch.setattr(daemon, "get_elapsed", lambda state: elapsed_at_next_wake)
    sensor = SimpleNamespace(min_interval_seconds=LOAD_SENSOR_INTERVAL_SECONDS)
    assert not daemon.is_under_min_interval(None, sensor), "the wake after a tick would be skipped: a tick every 10 s"
