"""Stopping the detached agent does not wait for PID 1 to reap it: the agent and its zygotes are
children of PID 1 (double fork), which reaps when it likes (a container's PID 1 may never), and
`gpujobs agent stop` waited out its 15 s timeout on the zombie (the test suite's teardowns: 2-3 s
each here, 15 s once)."""
from __future__ import annotations

import subprocess
import sys

import psutil

from gpujobs.backends.local.procs import exited

# A parent that never reaps its child: the child's zombie stays while the parent sleeps.
NO_REAP = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'pass']); " \
          "print(p.pid, flush=True); time.sleep(120)"


def test_an_exited_process_its_parent_has_not_reaped_counts_as_exited():
    parent = subprocess.Popen([sys.executable, "-c", NO_REAP], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert exited(child, timeout=30)
        assert child.status() == psutil.STATUS_ZOMBIE  # returned before any reap
    finally:
        parent.kill()
        parent.wait(10)


def test_a_running_process_has_not_exited_until_it_ends():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        p = psutil.Process(proc.pid)
        assert not exited(p, timeout=0.2)
        proc.kill()
        assert exited(p, timeout=30)  # a zombie of ours until reaped below
    finally:
        proc.kill()
        proc.wait(10)
    assert exited(p, timeout=0.0)  # gone
