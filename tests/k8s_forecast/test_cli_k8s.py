"""`gpujobs plan` and the START column of `gpujobs queue` against the simulated cluster, as a user
runs them (the CLI in a subprocess, KUBECONFIG pointing at the cluster)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.k8s_forecast.k8s_objects import queue, theirs
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.handle import Job

pytestmark = pytest.mark.slow  # starts the CLI processes
GPUJOBS = Path(sys.executable).parent / "gpujobs"


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def test_cli_plan_and_queue_start_column(make_cluster, tmp_path):
    t0 = time.time() - 60

    def setup(sim):
        queue(sim, "q", "cq-q", 2, preemption="Never")
        queue(sim, "q2", "cq-q", 2, namespace="other")
        theirs(sim, "other", "r", "q2", 2, cq="cq-q", admitted_at=t0, max_s=600)
    sim, be = make_cluster(setup)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
    env.update(KUBECONFIG=sim.write_kubeconfig(tmp_path / "kubeconfig"), GPUJOBS_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "train.py").write_text("def main():\n    pass\n")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(GPUJOBS), *args], env=env, capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
    # the simulated job controller gives their unsuspended Job its pod in the background: count
    # once it has (under load it came after the count, and the count was one short)
    wait_for(lambda: sim.store.list("v1", "Pod", "other"))
    before = sum(len(sim.store.list_res(r)[0]) for r in sim.store.resources())
    out = cli("plan", "train.py:main", "--backend", "kubernetes", "--gpus", "2", "--queue", "q", "--time", "60")
    assert out.returncode == 0, out.stderr
    assert "would wait 1st in q" in out.stdout and "Blocked by: other/r" in out.stdout, out.stdout
    assert "needs 2 GPUs, 0 free in cq-q" in out.stdout
    assert sum(len(sim.store.list_res(r)[0]) for r in sim.store.resources()) == before  # nothing created

    mine = Job(be.submit(gpujobs.job(nap, 1).mpi(ranks=1, gpus_per_rank=2).image(MPI_IMAGE).queue("q").name("mine")
                         .max_runtime(60).spec()), be)
    wait_for(lambda: mine.status().queue_position == 1)
    out = cli("queue", "--backend", "kubernetes", "-n", "default")
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if "START" in line)
    row = next(line for line in out.stdout.splitlines() if "mine" in line)
    start = row[header.index("START"):].split("  ")[0]  # the one start text: in ~N min (HH:MM)
    assert start.startswith("in ~") and "now" not in start, out.stdout
    hm = [int(x) for x in start.split("(")[1].rstrip(")").split(":")]
    want = time.localtime(t0 + 600 + 30)  # r's maximumExecutionTimeSeconds + its 30 s grace
    d = ((hm[0] * 60 + hm[1]) - (want.tm_hour * 60 + want.tm_min)) % 1440
    assert min(d, 1440 - d) <= 1, out.stdout
