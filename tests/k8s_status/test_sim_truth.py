"""Stories a new user would try on the default simulated cluster, judged by the simulator's own
upstream rules (gpujobs_sim.rules), not by gpujobs' status mapping."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.handle import Job
from tests.support import MPI_IMAGE

pytestmark = pytest.mark.slow


def world_info():
    import torch.distributed as dist
    import gpujobs as g
    return (dist.get_world_size(), dist.get_rank(), g.context().world_size)


def test_ddp_gpus2_on_the_default_cluster_runs_two_ranks(make_cluster):
    """Was world_size 1: the default SimCluster ran the runner directly, one process per pod;
    now its pods run their real container command (bootstrap.py), which starts one rank per GPU."""
    sim, be = make_cluster()
    job = Job(be.submit(gpujobs.job(world_info).ddp(gpus=2).queue("q").return_all().spec()), be)
    results = job.result(timeout=120)
    assert sorted(results) == [(2, 0, 2), (2, 1, 2)]
    st = job.status()
    assert st.phase == "succeeded" and st.extra["kind"] == "TrainJob"
    wl = sim.store.list("kueue.x-k8s.io/v1beta2", "Workload", "default")[0]
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 1)]


def say_rank():
    import os
    print(f"hello from rank {os.environ['RANK']}", flush=True)
    return int(os.environ["RANK"])


def mpi_say_rank():
    from mpi4py import MPI
    r = MPI.COMM_WORLD.Get_rank()
    print(f"hello from rank {r}", flush=True)
    return r


@pytest.mark.parametrize("framework", ["ddp", "mpi"])
def test_log_prefixes_are_the_global_rank(make_cluster, framework):
    """Were per pod: '[rank 0] hello from rank 1' (two DDP ranks in one pod, or an MPI launcher's
    log holding every rank's output)."""
    sim, be = make_cluster()
    b = gpujobs.job(say_rank if framework == "ddp" else mpi_say_rank).queue("q")
    b = b.ddp(gpus=2) if framework == "ddp" else b.mpi(ranks=2, gpus_per_rank=1, ranks_per_node=2).image(MPI_IMAGE)
    job = Job(be.submit(b.spec()), be)
    assert job.result(timeout=120) == 0
    text = "".join(be.logs(job.id))
    assert "[rank 0] hello from rank 0" in text and "[rank 1] hello from rank 1" in text, text
    assert "[rank 0] hello from rank 1" not in text
    one = "".join(be.logs(job.id, rank=1))
    assert "[rank 1] hello from rank 1" in one and "rank 0" not in one, one
