"""Stories a new user would try on the default simulated cluster, judged by the simulator's own
upstream rules (gpujobs_sim.rules), not by gpujobs' status mapping."""
from __future__ import annotations

import pytest

import gpujobs
from gpujobs.handle import Job

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
