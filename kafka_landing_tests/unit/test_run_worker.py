"""Pure parts of 'runs never hang': is a run worker alive, is a registry failure transient."""

import os
import subprocess
import sys
import time

from kafka_landing.avro_landing import registry_answers as answers
from kafka_landing.run_worker import in_another_pid_namespace, is_local_host, process_alive


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


def fake_proc(tmp_path, port: int, inode: int, owner_pid: int | None):
    """A /proc where a socket with `inode` listens on 127.0.0.1:`port`, held by `owner_pid` if any:
    a code server in another PID namespace (a sidecar sharing the network) has no pid here."""
    (tmp_path / "net").mkdir(parents=True)
    (tmp_path / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n")
    (tmp_path / "net" / "tcp6").write_text("  sl  local_address\n")
    (tmp_path / "net" / "unix").write_text("Num       RefCount Protocol Flags    Type St Inode Path\n")
    if owner_pid is not None:
        (tmp_path / str(owner_pid) / "fd").mkdir(parents=True)
        os.symlink(f"socket:[{inode}]", tmp_path / str(owner_pid) / "fd" / "7")
    return str(tmp_path)


def test_a_code_server_in_another_pid_namespace_is_told_apart(tmp_path):
    """N16: a daemon and a code server sharing a network but not a PID namespace: the pids the code
    server reports mean nothing here, so run health must not call its live workers dead."""
    tcp = {"host": "localhost", "port": 4266}
    assert not in_another_pid_namespace(tcp, fake_proc(tmp_path / "same", 4266, 99, 4242))
    assert in_another_pid_namespace(tcp, fake_proc(tmp_path / "other", 4266, 99, None))
    # Nobody listens at all: the code server died (with its workers): judged by their pids.
    assert not in_another_pid_namespace({"host": "localhost", "port": 4267}, fake_proc(tmp_path / "gone", 4266, 99, None))


def test_a_real_code_server_of_this_namespace_is_ours_and_a_dead_one_is_not_elsewhere(tmp_path):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        assert not in_another_pid_namespace({"host": "localhost", "port": server.getsockname()[1]})
        path = str(tmp_path / "grpc.sock")
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(path)
        unix.listen()
        try:
            assert not in_another_pid_namespace({"socket": path})
        finally:
            unix.close()
        assert not in_another_pid_namespace({"socket": path})  # the file is left, nobody answers: died here
    finally:
        server.close()
