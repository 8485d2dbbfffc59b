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
    assert job.result(timeout=180) == kind
    st = wait_for(lambda: (s := job.status()).terminal and s.finished_at and s)
    assert st.phase == "succeeded"
    assert st.started_at is not None and st.submitted_at <= st.started_at <= st.finished_at
    assert [e.kind for e in st.events][:2] == ["submitted", "admitted"]
