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


def _listening_inodes(grpc: dict, proc_root: str) -> set[str]:
    """Inodes of the sockets listening where the code server is reached: its TCP port (any
    local address, IPv4 or 6) or its unix socket path. /proc/net is this network namespace's."""
    found: set[str] = set()
    if grpc.get("port"):
        for name in ("tcp", "tcp6"):
            try:
                with open(os.path.join(proc_root, "net", name)) as f:
                    next(f, None)
                    for line in f:
                        cols = line.split()
                        if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == int(grpc["port"]):
                            found.add(cols[9])
            except OSError:
                continue
    elif grpc.get("socket"):
        try:
            with open(os.path.join(proc_root, "net", "unix")) as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 7 and cols[7] == grpc["socket"]:
                        found.add(cols[6])
        except OSError:
            pass
    return found


def _peer_pid(path: str) -> int | None:
    """The pid of the process listening on a unix socket, as this PID namespace numbers it (the
    kernel answers 0 for a process of another namespace); None when nobody answers."""
    import struct

    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(path)
            pid, _uid, _gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
            return pid
    except OSError:
        return None


def in_another_pid_namespace(grpc: dict, proc_root: str = "/proc") -> bool:
    """Whether the code server answers from a PID namespace other than ours: a sidecar container
    sharing the network or a socket volume, not the pids. The worker pids it reports then name
    nothing here (or another process) and must not be judged by os.kill. Only positive evidence
    counts: a code server that answers nowhere died (with its workers, as a restart does)."""
    if grpc.get("socket") and proc_root == "/proc":
        return _peer_pid(grpc["socket"]) == 0
    inodes = {f"socket:[{i}]" for i in _listening_inodes(grpc, proc_root)}
    if not inodes:
        return False
    for pid in filter(str.isdigit, os.listdir(proc_root)):
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            for fd in os.listdir(fd_dir):
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return False
        except OSError:
            continue  # gone meanwhile, or another user's process we may not inspect
    return True
