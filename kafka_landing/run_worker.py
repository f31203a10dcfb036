"""Is a run worker process still alive on this machine? Pure: no Dagster here.

A SIGKILLed run worker leaves its run STARTED forever unless something notices the
process is gone; `kafka_landing.run_launcher` asks this module."""

import os
import socket

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def is_local_host(host: str | None, has_socket: bool) -> bool:
    """A code server reached by a unix socket or a loopback/own host name runs on this machine,
    and so do the run workers it starts."""
    if has_socket:
        return True
    if not host:
        return False
    return host in LOCAL_HOSTS or host in {socket.gethostname(), socket.getfqdn()}


def _boot_time(proc_root: str) -> float | None:
    try:
        with open(os.path.join(proc_root, "stat")) as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def _stat(pid: int, proc_root: str) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process, or None when /proc has no such pid."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat")) as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def process_alive(pid: int, started_before: float | None = None, proc_root: str = "/proc") -> bool:
    """True while `pid` is a live (not zombie) process that was already running at
    `started_before` (epoch seconds; the time the worker reported its pid), so a pid reused by a
    later process does not count as the run worker."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    if not os.path.isdir(proc_root):
        return True  # no /proc (macOS): os.kill is all we can tell
    st = _stat(pid, proc_root)
    if st is None:
        return False
    state, start_ticks = st
    if state in ("Z", "X", "x"):
        return False  # killed, not yet reaped by its parent (the code server)
    btime = _boot_time(proc_root)
    if started_before is not None and btime is not None:
        started_at = btime + start_ticks / os.sysconf("SC_CLK_TCK")
        if started_at > started_before + 2:  # tick rounding and clock granularity
            return False
    return True
