"""The psutil fallback against real busy processes (no NVML on this machine)."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from gpujobs.metrics import MetricsHistory, Sampler

pytestmark = pytest.mark.slow

BUSY = ("import time\nx = bytearray(64 * 2**20)\nprint('ready', flush=True)\n"
        "end = time.time() + 30\nwhile time.time() < end: pass\n")
IDLE = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"
# a parent that sleeps while its child (the real worker, like a launcher's rank) burns CPU
TREE = ("import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {BUSY!r}])\n"
        "time.sleep(30)\n")


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        try:
            kids = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        for k in kids:
            k.kill()
        p.kill()
        p.wait()
        psutil.wait_procs(kids, timeout=5)
    for p in started:
        assert not psutil.pid_exists(p.pid) or psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE


def test_busy_rank_reads_as_cpu_with_its_rss(no_nvml, procs):
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", IDLE], stdout=subprocess.PIPE, text=True)
    procs += [busy, idle]
    # an interpreter starting up burns CPU: on a loaded machine that outlasts the two skipped
    # readings (the idle rank once read 8 %), so sampling starts once both have started
    assert busy.stdout.readline() == idle.stdout.readline() == "ready\n"
    hist = MetricsHistory()
    with Sampler({0: (busy.pid, [0]), 1: (idle.pid, [])}, interval=0.25, sink=hist):
        time.sleep(1.6)
    by_rank = {r: [s for s in hist.samples() if s.rank == r] for r in (0, 1)}
    assert all(s.source == "psutil" and s.device == -1 for s in hist.samples())
    assert by_rank[0][0].util is None  # first reading has no interval to measure over
    busy_utils = [s.util for s in by_rank[0][2:]]
    idle_utils = [s.util for s in by_rank[1][2:]]
    # a spinning process gets a core's share (less on 2 loaded shared cores); a sleeper ~0
    assert sum(busy_utils) / len(busy_utils) > 10, busy_utils
    assert max(idle_utils) < 5, idle_utils
    assert by_rank[0][-1].mem_used > 64 * 2**20 > by_rank[1][-1].mem_used
    assert by_rank[0][-1].mem_total == psutil.virtual_memory().total


def test_process_tree_includes_the_busy_child(no_nvml, procs):
    parent = subprocess.Popen([sys.executable, "-c", TREE])
    procs.append(parent)
    s = Sampler({0: (parent.pid, [])}, interval=1.0)
    deadline = time.monotonic() + 10
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    s.sample_once()
    time.sleep(0.8)
    (x,) = s.sample_once()
    assert x.util > 10 and x.mem_used > 64 * 2**20  # the child's CPU and RSS count for the rank
    s.stop()


def test_rank_that_exited_yields_no_sample(no_nvml, procs):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    procs.append(p)
    p.wait()
    s = Sampler({0: (p.pid, [])})
    assert s.sample_once() == []
