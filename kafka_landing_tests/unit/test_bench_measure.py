"""The sampler of peak memory: a measurement's peak is the sum of its processes' own peaks
(VmHWM), so the sampling interval decides nothing, and processes run one after another are not
added up."""

import os
import subprocess
import sys
import time

from kafka_landing_tools.bench.measure import Job, Running, high_water_marks, tree

GRANDCHILD_HOLDS_THEN_FREES = (
    "import subprocess, sys\n"
    "code = 'b = bytearray(150 * 2**20); del b; import time; print(\"freed\", flush=True); time.sleep(30)'\n"
    "subprocess.run([sys.executable, '-c', code])\n"
)


def test_peak_memory_counts_every_descendant_and_a_peak_already_given_back():
    """The sampler reads each process's own peak (VmHWM): a grandchild's 150 MB held and freed
    between two reads still counts, so the sampling interval decides nothing."""
    child = subprocess.Popen([sys.executable, "-c", GRANDCHILD_HOLDS_THEN_FREES])
    try:
        deadline = time.monotonic() + 30
        while len(tree(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = tree(child.pid)
        assert len(found) == 2 and found[0] == child.pid
        time.sleep(1.5)  # the grandchild has allocated and freed by now
        marks = high_water_marks(child.pid)
        assert set(marks) == set(found)
        assert marks[found[1]] >= 150 * 2**20 > marks[child.pid]
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(child.pid)])
        child.kill()
        child.wait()


TWO_CHILDREN_ONE_AFTER_THE_OTHER = (
    "import subprocess, sys\n"
    "code = 'b = bytearray(150 * 2**20); import time; time.sleep(1.5)'\n"
    "subprocess.run([sys.executable, '-c', code])\n"
    "subprocess.run([sys.executable, '-c', code])\n"
)


def test_processes_run_one_after_the_other_are_not_added_up():
    """The hourly processes run one at a time: the peak is one of them, not their sum."""
    proc = subprocess.Popen([sys.executable, "-c", TWO_CHILDREN_ONE_AFTER_THE_OTHER])
    running = Running(Job("t", "c", []), proc, None, None, time.monotonic())
    samples = 0
    while proc.poll() is None:
        running.sample()
        samples += 1
        time.sleep(0.3)
    assert samples >= 5
    assert 150 * 2**20 <= running.peak < 2 * 150 * 2**20


def test_the_cpu_of_a_running_process_is_read_from_its_pid_file_and_of_none_is_none(tmp_path):
    from kafka_landing_tools.bench.__main__ import _cpu_of

    pidfile = tmp_path / "pid"
    pidfile.write_text(str(os.getpid()))
    sum(range(3_000_000))  # some CPU of our own
    assert _cpu_of(pidfile) > 0
    assert _cpu_of(tmp_path / "missing") is None
    pidfile.write_text("not a pid")
    assert _cpu_of(pidfile) is None
