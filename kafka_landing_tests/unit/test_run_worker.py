"""Pure parts of 'runs never hang': is a run worker alive, is a registry failure transient."""

import os
import subprocess
import sys
import time

from kafka_landing.avro_landing import registry_answers as answers
from kafka_landing.run_worker import is_local_host, process_alive


def test_a_live_process_is_alive_a_killed_one_is_not_even_before_it_is_reaped():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_alive(p.pid, started_before=time.time() + 1)
        p.kill()
        time.sleep(0.3)
        assert not process_alive(p.pid)  # a zombie: killed, not yet waited for
    finally:
        p.kill()
        p.wait()
    assert not process_alive(p.pid)


def test_a_pid_reused_by_a_later_process_is_not_the_run_worker():
    # This process started before now, not an hour ago: "reported an hour ago" means another process.
    assert process_alive(os.getpid(), started_before=time.time())
    assert not process_alive(os.getpid(), started_before=time.time() - 3600)
    assert not process_alive(0) and not process_alive(-1)


def test_only_a_socket_or_a_loopback_host_is_this_machine():
    assert is_local_host(None, has_socket=True)
    assert is_local_host("localhost", False) and is_local_host("127.0.0.1", False)
    assert not is_local_host("code-server.example", False)
    assert not is_local_host(None, False)


def test_registry_away_or_failing_is_transient_a_4xx_answer_is_not():
    url = "http://registry:8081"
    assert answers.unreachable_error(url, 7, ConnectionRefusedError("refused")).transient
    assert answers.answer_error(url, 7, 503, None, "unavailable").transient
    for status in (401, 403, 404, 422):
        assert not answers.answer_error(url, 7, status, None, "no").transient
