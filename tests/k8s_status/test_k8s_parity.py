"""[k8s-parity] stories on the simulated cluster: the promises the local backend keeps, kept on
Kubernetes too (start times per kind, checkpoints across preemption, preemption visible on the
victim, stall evidence from the pods' clocks, a usable render)."""
from __future__ import annotations

import warnings

import pytest
from support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.errors import DeprecatedPathWarning
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def sleepy(seconds, value):
    import time as _t
    print(f"working on {value}", flush=True)
    _t.sleep(seconds)
    return value


def _builder(kind, fn, *args):
    b = gpujobs.job(fn, *args)
    if kind == "MPIJob":
        return b.mpi(ranks=1, gpus_per_rank=1).image(MPI_IMAGE).queue("q")
    if kind == "RayJob":
        return b.ray(workers=1, gpus_per_worker=1).queue("q")
    return b.ddp(nodes=1, gpus_per_node=1).kubernetes(kind=kind).queue("q")


def _submit(be, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecatedPathWarning)
        return Job(be.submit(b.spec()), be)


# ------------------------------------------------------------------ 6. start and run times
@pytest.mark.parametrize("kind", ["TrainJob", "PyTorchJob", "MPIJob", "RayJob", "AppWrapper"])
def test_a_finished_job_keeps_its_start_time_and_admitted_event(make_cluster, kind):
    sim, be = make_cluster(gpus=2)
    job = _submit(be, _builder(kind, sleepy, 0.3, kind))
    job.wait(timeout=180)  # (a loaded machine can fail Ray's start-up: times are kept either way)
    st = wait_for(lambda: (s := job.status()).terminal and s.finished_at and s)
    assert st.phase in ("succeeded", "failed")
    assert st.started_at is not None and st.submitted_at <= st.started_at <= st.finished_at
    assert [e.kind for e in st.events][:2] == ["submitted", "admitted"]


# ------------------------------------------------------------------ 1. durable checkpoints
def counting(n_steps, step_s):
    """A resumable loop saving every 5 steps; returns (sum, resumed)."""
    import time as _t

    import gpujobs.checkpoint as ck
    loop = ck.resumable(n_steps, state={"total": 0}, every=5)
    for step in loop:
        loop.state["total"] += step * step
        if step % 10 == 0:
            print(f"step {step}", flush=True)
        _t.sleep(step_s)
    return loop.state["total"], loop.resumed


def _claim(sim, name, ns="default"):
    sim.store.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": name, "namespace": ns},
                      "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})


@pytest.mark.parametrize("volume", [True, False])
def test_a_preempted_job_resumes_from_its_checkpoint_only_on_a_claim(make_cluster, volume):
    from gpujobs.errors import CheckpointWarning
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    _claim(sim, "ckpt")
    n = 400
    b = _builder("MPIJob", counting, n, 0.02).priority("low").options(grace_period_s=5)
    if volume:
        low = _submit(be, b.volume("ckpt", "/mnt/ckpt"))
    else:
        with pytest.warns(CheckpointWarning, match="--volume CLAIM"):
            low = Job(be.submit(b.spec()), be)
    wait_for(lambda: "step 20" in low.logs(), timeout=120)  # checkpoints saved (every 5 steps)
    high = _submit(be, _builder("MPIJob", sleepy, 0.2, "high").priority("high"))
    assert high.result(timeout=120) == "high"
    total, resumed = low.result(timeout=180)
    assert total == sum(i * i for i in range(n))  # the same result as an uninterrupted run
    assert resumed is volume
    assert low.status().restarts >= 1
