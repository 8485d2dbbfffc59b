"""The CPU reader forgets dead processes on every path (GPU ranks only call pids())."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from gpujobs.rank.cpu import CpuReader

pytestmark = pytest.mark.slow


def test_pids_path_forgets_dead_children():
    """Regression: pids() (used for GPU ranks) never pruned, so a job spawning many short
    children grew the reader without bound."""
    parent = subprocess.Popen(["bash", "-c", "for i in $(seq 400); do sleep 0.005; done"])
    reader = CpuReader()
    try:
        seen = set()
        deadline = time.monotonic() + 60
        while parent.poll() is None and time.monotonic() < deadline:
            seen.update(reader.pids(parent.pid))
        assert len(seen) > 300, "the test did not observe enough short-lived children"
        assert len(reader._procs) <= 256 + 2 and len(reader._new) <= 2
    finally:
        parent.kill()
        parent.wait()


def test_a_tree_is_read_from_the_kernels_children_lists_not_from_every_process(monkeypatch):
    """psutil's children(recursive=True) reads the stat file of every process on the machine,
    for each rank and round (most of a local agent's CPU per tiny job on a busy machine): the
    reader and the agent's liveness check follow /proc/PID/task/TID/children instead."""
    import psutil

    from gpujobs.backends.local.liveness import GangWatch
    from gpujobs.rank.cpu import descendants
    parent = subprocess.Popen(["bash", "-c", "sleep 30 & (sleep 30 & wait) & wait"])
    want: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(want) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
            want = sorted(c.pid for c in psutil.Process(parent.pid).children(recursive=True))
        assert sorted(descendants(parent.pid) or []) == want

        def scan_of_every_process(self, recursive=False):
            raise AssertionError("children() read every process on the machine")
        monkeypatch.setattr(psutil.Process, "children", scan_of_every_process)
        assert sorted(CpuReader().pids(parent.pid)) == sorted([parent.pid, *want])
        watch = GangWatch.__new__(GangWatch)
        watch._cpu = {}
        assert watch._cpu_busy(0, parent.pid, time.time())  # first reading: alive
    finally:
        for pid in want:  # the test's own processes, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        parent.kill()
        parent.wait()
    assert descendants(parent.pid) == []
