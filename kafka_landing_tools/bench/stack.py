"""What the benchmark stands on: the local stack's broker and registry, a Spark Connect server
of a case's own, the machine and the versions the report names, and the topics a run leaves."""

from __future__ import annotations

import os
import platform
import signal
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kafka_landing_tools.bench.measure import say

#: The heap of the memory case's servers: what one landing needs, not the stack's 3 GB (sized for
#: the test suite's many sessions at once), and fixed, its young generation too (-Xms = -Xmx, -Xmn),
#: as a production server is run. A heap or young generation that may grow says more about G1's
#: ergonomics than about the work: G1 grows them as a run's garbage grows and keeps what it touched
#: (docs/benchmark.md has the figures). What bounded memory means is that 4x the data runs in the
#: memory 1x runs in, as fast per record.
SERVER_HEAP = "1g"


@dataclass(frozen=True)
class Stack:
    """Where the broker and the schema registry answer."""
    bootstrap: str
    registry: str


def up() -> Stack:
    """The local stack, started if it is not running (the warm Spark Connect server with it)."""
    from kafka_landing_tools import devstack

    devstack.up()
    return local()


def local() -> Stack:
    from kafka_landing_tools import devstack

    return Stack(devstack.BOOTSTRAP, devstack.REGISTRY_URL)


@dataclass(frozen=True)
class Server:
    url: str
    pid: int


@contextmanager
def own_connect_server(folder: Path) -> Iterator[Server]:
    """A Spark Connect server of its own (heap SERVER_HEAP) on a free port, stopped on the way out:
    the stack's long-lived server keeps what earlier cases took, so it cannot say what one needs."""
    from kafka_landing_tools import devstack

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = devstack.start_spark_connect(port=port, sdir=folder, memory=SERVER_HEAP, fixed_heap=True)
    pid = int((folder / "pid").read_text())
    try:
        yield Server(url, pid)
    finally:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def machine() -> dict:
    return {"cores": os.cpu_count(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version()}


def versions() -> dict:
    from importlib.metadata import version

    return {p: version(p) for p in ("dagster", "pyspark", "confluent-kafka", "fastavro")}


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """The bench's topics hold hundreds of MB with retention off: they go when the run ends."""
    if not topics:
        return
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: the futures die with their client
    try:
        for topic, fut in admin.delete_topics(topics).items():
            try:
                fut.result(timeout=30)
            except Exception as exc:  # noqa: BLE001 - a leftover topic must not hide the run's outcome
                say(f"could not delete topic {topic} on {bootstrap}: {exc}; delete it by hand")
    except Exception as exc:  # noqa: BLE001
        say(f"could not delete the bench topics {topics} on {bootstrap}: {exc}; delete them by hand")
