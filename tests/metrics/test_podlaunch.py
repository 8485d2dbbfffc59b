"""The pod launcher: child output intact, GPUJOBS-METRICS lines between its lines, exit code kept."""
from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from gpujobs.metrics import parse_metrics_line

pytestmark = pytest.mark.slow

CHILD = r"""
import sys, time
end = time.time() + 1.5
n = 0
while time.time() < end:
    n += 1
    if n % 200000 == 0:
        sys.stdout.write("part-"); sys.stdout.flush()
        sys.stdout.write("of-one-line %d\n" % n); sys.stdout.flush()
print("done", flush=True)
sys.exit(3)
"""


def test_launcher_interleaves_whole_lines_and_keeps_exit_code(tmp_path):
    env = dict(os.environ, RANK="2", CUDA_VISIBLE_DEVICES="")
    p = subprocess.Popen([sys.executable, "-m", "gpujobs.rank.podlaunch", "--interval", "0.2",
                          "--", sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, err
    lines = out.splitlines()
    metrics = [parse_metrics_line(line) for line in lines]
    rounds = [m for m in metrics if m]
    child_lines = [line for line, m in zip(lines, metrics) if m is None]
    assert child_lines[-1] == "done"
    assert all(line.startswith("part-of-one-line") for line in child_lines[:-1])
    assert len(rounds) >= 4  # ~1.5 s at 0.2 s
    assert all(s.rank == 2 and s.source == "psutil" and s.device == -1 for r in rounds for s in r)
    assert max(s.util or 0 for r in rounds for s in r) > 10  # the child was spinning


def test_launcher_needs_a_command():
    p = subprocess.run([sys.executable, "-m", "gpujobs.rank.podlaunch"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "give the command" in p.stderr


def test_sigterm_reaches_the_child():
    p = subprocess.Popen([sys.executable, "-m", "gpujobs.rank.podlaunch", "--interval", "5",
                          "--", sys.executable, "-c", "import time; print('up', flush=True); "
                          "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:  # metric lines may come first
            if line.strip() == "up":
                break
        kids = psutil.Process(p.pid).children()
        assert len(kids) == 1
        p.terminate()
        assert p.wait(timeout=20) == 128 + 15  # the child died of SIGTERM, as a shell reports it
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    psutil.wait_procs(kids, timeout=5)
    assert not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids)
