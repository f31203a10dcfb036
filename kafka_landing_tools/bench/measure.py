"""Each measurement is a fresh process, timed from start to exit; its peak memory is, over reads
once a second, the largest sum of the peak RSS (VmHWM, kept by the kernel) of the processes of
its tree alive at the read, the JVM included: each process's own peak is never missed between
reads, at the cost of a few /proc reads. A process that lands a wrong count fails the run: a
fast wrong answer cannot win."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Callable

SAMPLE_S = 1.0  # how often the process trees' peaks are read (the kernel keeps each peak)


class BenchError(RuntimeError):
    pass


def say(line: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {line}", flush=True)


def tree(pid: int) -> list[int]:
    """The process and its descendants, from each thread's `children` file (a JVM's children
    belong to the thread that started them): a few reads, not a walk of all of /proc."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return found


def high_water_marks(pid: int) -> dict[int, int]:
    """Each process's own peak RSS in bytes (VmHWM, kept by the kernel), for the tree of `pid`."""
    marks = {}
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        marks[p] = int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return marks


@dataclass
class Job:
    """One measurement: a contender in a fresh process, and the records it must land."""
    label: str
    contender: str
    argv: list[str]
    expected: int | None = None
    what: str = ""  # names the data, for the error when the count is wrong


@dataclass
class Running:
    job: Job
    proc: subprocess.Popen
    out: IO | None
    err: IO | None
    t0: float
    peak: int = 0

    def sample(self) -> None:
        """The sum of the own peaks of the processes alive now: at least the tree's memory now,
        and no peak between two reads is missed. Processes run one after another (the hourly
        processes) are not added up."""
        self.peak = max(self.peak, sum(high_water_marks(self.proc.pid).values()))


def _start(job: Job, env: dict, work: Path) -> Running:
    # Output goes to files, not pipes: a full pipe would stall the contender.
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name = job.label.replace(" ", "_")
    out, err = open(logs / f"{name}.out", "w+"), open(logs / f"{name}.log", "w+")  # noqa: SIM115 - closed in _finish
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kafka_landing_tools.bench", "--contender", job.contender, *job.argv],
                            stdout=out, stderr=err, text=True, env=env, start_new_session=True)
    return Running(job, proc, out, err, t0)


def _finish(r: Running, seconds: float, work: Path) -> dict:
    r.out.seek(0), r.err.seek(0)
    out, err = r.out.read(), r.err.read()
    r.out.close(), r.err.close()
    if r.proc.returncode != 0:
        raise BenchError(f"{r.job.label}: contender {r.job.contender} failed (exit {r.proc.returncode}); its log "
                         f"is {r.err.name} (the work dir {work} is kept). The end of it:\n{err[-4000:]}")
    # Its last JSON line: a code server it started may still log to stdout as the process exits.
    said = json.loads(next((line for line in reversed(out.splitlines()) if line.startswith("{")), "{}"))
    if "records" not in said:
        raise BenchError(f"{r.job.label}: contender {r.job.contender} said no result; its output is {r.out.name}")
    records = said["records"]
    if r.job.expected is not None and records != r.job.expected:
        verb = "loaded" if r.job.contender == "warehouse" else "landed"
        raise BenchError(f"{r.job.label}: {r.job.contender} {verb} {records} records of {r.job.what}, the frozen "
                         f"slices hold {r.job.expected}: a wrong count voids the benchmark. Its work dir {work} is "
                         "kept.")
    return {"contender": r.job.contender, "seconds": round(seconds, 2), "records": records,
            "peak_rss_mb": round(r.peak / 2**20), **{k: v for k, v in said.items() if k != "records"}}


def said_done(job: Job, m: dict) -> None:
    say(f"{job.label:<32} {m['seconds']:>8.1f} s {m['records']:>10,} records {m['peak_rss_mb']:>6,} MB peak")


def measure(jobs: list[Job], env: dict, work: Path, workers: int = 1,
            on_done: Callable[[Job, dict], None] | None = None) -> dict[str, dict]:
    """Run the jobs, each a fresh process, and return {label: measurement}. With workers > 1
    (the tests only) several run at once and their timings mean nothing."""
    pending, running, results = list(jobs), [], {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                running.append(_start(pending.pop(0), env, work))
            for r in running:
                r.sample()
            try:  # wakes the moment the oldest one ends, so a lone job's seconds are exact
                running[0].proc.wait(timeout=SAMPLE_S)
            except subprocess.TimeoutExpired:
                pass
            for r in [r for r in running if r.proc.poll() is not None]:
                seconds = time.monotonic() - r.t0
                running.remove(r)
                results[r.job.label] = _finish(r, seconds, work)
                if on_done:
                    on_done(r.job, results[r.job.label])
    finally:
        for r in running:  # only on an error: the others' results no longer count
            try:
                os.killpg(r.proc.pid, signal.SIGKILL)  # its group: the JVM and Python workers it started too
            except ProcessLookupError:
                pass
            r.proc.wait()
            r.out.close(), r.err.close()
    return results
