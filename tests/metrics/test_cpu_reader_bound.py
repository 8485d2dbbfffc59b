"""The CPU reader forgets dead processes on every path (GPU ranks only call pids())."""
from __future__ import annotations

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
