"""MPIJob stories as the MPI Operator (v0.8.0) and Open MPI run them (the simulator's
gpujobs_sim/mpi_operator.py and mpirun_shim.py, written from their source and docs):

- Open MPI 5 ignores the operator's ORTE-era hostfile variable, so without an explicit
  ``--hostfile`` every rank runs on the launcher (and succeeds);
- with ``launcherCreationPolicy: WaitForWorkersReady`` the launcher exists only once every
  worker is Ready; a worker whose sshd never comes up keeps the job in Created, which gpujobs
  must say rather than sit in "starting";
- ``volcano='gang'`` needs the operator's ``--gang-scheduling=volcano``: no PodGroup otherwise.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.backends.kubernetes.kinds import mpijob
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def where_ranks_ran():
    import os

    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    # the simulated mpirun passes the host it placed each rank on (mpirun_shim.py)
    return comm.gather(os.environ["GPUJOBS_SIM_RANK_HOSTS"].split(",")[comm.Get_rank()])


def submit(be, fn, *, ranks, per_node, image=MPI_IMAGE, volcano=None):
    b = gpujobs.job(fn).mpi(ranks=ranks, gpus_per_rank=0, ranks_per_node=per_node).image(image).queue("q")
    if volcano:
        b = b.options(volcano=volcano)
    return Job(be.submit(b.spec()), be)


@pytest.mark.parametrize("openmpi", [4, 5])
def test_mpi_ranks_run_on_the_workers_two_per_worker_not_on_the_launcher(make_cluster, openmpi):
    """Open MPI 5 (mpi-operator's own images, Debian trixie) would put every rank on the launcher
    without --hostfile; Open MPI 4 (gpujobs' image, Debian bookworm) reads the operator's variable."""
    sim, be = make_cluster(gpus=0, images={MPI_IMAGE: {"openmpi": openmpi}})
    job = submit(be, where_ranks_ran, ranks=4, per_node=2)
    hosts = job.result(timeout=90)
    name = job.status().name
    assert hosts == [f"{name}-worker-0.{name}.default.svc"] * 2 + [f"{name}-worker-1.{name}.default.svc"] * 2
    # the launcher's hostfile was written in its own container, not in this machine's /tmp
    assert not [f for f in Path(tempfile.gettempdir()).glob("gpujobs-hostfile-*") if name in f.read_text()]
    # the ended launcher stays with its log; the running workers go (cleanPodPolicy: Running)
    wait_for(lambda: sorted(p["metadata"]["labels"]["training.kubeflow.org/job-role"] for p in sim.store.list(
        "v1", "Pod", "default", f"training.kubeflow.org/job-name={name}")) == ["launcher"], timeout=30)


def test_mpi_on_an_image_of_mpi_operator_s_own_is_refused_before_submit(make_cluster):
    sim, be = make_cluster(gpus=0)
    with pytest.raises(gpujobs.SpecError) as ei:
        submit(be, where_ranks_ran, ranks=2, per_node=1, image="mpioperator/openmpi:v0.8.0")
    assert ei.value.field == "image" and "python3" in ei.value.problem and "mpi4py" in ei.value.problem
    assert f".image('{MPI_IMAGE}')" in ei.value.fix
    assert not sim.store.list("kubeflow.org/v2beta1", "MPIJob", "default")


def test_a_worker_whose_sshd_never_starts_keeps_the_job_waiting_and_status_says_why(make_cluster):
    sim, be = make_cluster(gpus=0, images={"registry.example/no-sshd:*": {"sshd": False}})
    job = submit(be, where_ranks_ran, ranks=2, per_node=1, image="registry.example/no-sshd:1")
    st = wait_for(lambda: (s := job.status()).reason == "WaitingForWorkers" and "does not recreate" in s.message
                  and s, timeout=30)
    assert st.phase == "starting"
    assert "waiting for 2 MPI workers to be ready (sshd): 0/2 ready" in st.message
    assert "no-sshd" in st.message or "sshd" in st.message.split("exited", 1)[1]
    name = st.name
    pods = sim.store.list("v1", "Pod", "default", f"training.kubeflow.org/job-name={name}")
    assert all(p["metadata"]["labels"]["training.kubeflow.org/job-role"] == "worker" for p in pods)  # no launcher
    mpijob = sim.store.get("kubeflow.org/v2beta1", "MPIJob", name, "default")
    conds = {c["type"]: c["status"] for c in mpijob["status"]["conditions"]}
    assert conds.get("Created") == "True" and "Failed" not in conds and "Running" not in conds
    job.cancel()


def slow_ranks():
    import time

    from mpi4py import MPI
    time.sleep(4)
    return MPI.COMM_WORLD.Get_size()


def test_volcano_gang_without_the_operator_flag_has_no_podgroup_and_status_says_so(make_cluster, monkeypatch):
    monkeypatch.setattr(mpijob, "MPI_GANG_HINT_S", 0.0)
    sim, be = make_cluster(gpus=0)  # the MPI Operator as its release manifest runs it: no --gang-scheduling
    job = submit(be, slow_ranks, ranks=2, per_node=1, volcano="gang")
    st = wait_for(lambda: (s := job.status()).phase == "running" and s, timeout=60)
    assert "--gang-scheduling=volcano" in st.message and "not gang-scheduled" in st.message
    assert not sim.store.list("scheduling.volcano.sh/v1beta1", "PodGroup", "default")
    assert job.result(timeout=90) == 2


def test_volcano_gang_with_the_operator_flag_gets_a_podgroup_named_after_the_job(make_cluster):
    sim, be = make_cluster(gpus=0, mpi_gang_scheduling="volcano")
    job = submit(be, where_ranks_ran, ranks=2, per_node=1, volcano="gang")
    name = wait_for(lambda: job.status().name)
    pg = wait_for(lambda: sim.store.get("scheduling.volcano.sh/v1beta1", "PodGroup", name, "default"))
    assert pg["spec"]["minMember"] == 3  # 2 workers + the launcher
    assert len(job.result(timeout=90)) == 2


def test_under_kueue_wait_for_pods_ready_a_job_whose_workers_never_get_ready_is_evicted_and_requeued(make_cluster):
    """Kueue counts an MPIJob PodsReady only with Running=True (kueue mpijob_controller.go), which
    needs the launcher: with workers that never get ready the Workload times out (PodsReadyTimeout),
    the job is suspended again and requeued with backoff (docs/kubernetes-kinds.md, MPIJob)."""
    sim, be = make_cluster(gpus=0, images={"registry.example/no-sshd:*": {"sshd": False}},
                           pods_ready_timeout_s=2.0, backoff_base_s=60.0)
    job = submit(be, where_ranks_ran, ranks=2, per_node=1, image="registry.example/no-sshd:1")
    st = wait_for(lambda: (s := job.status()).reason == "PodsReadyTimeout" and s, timeout=60)
    assert st.phase == "queued" and "back in the queue" in st.message
    name = st.name
    wait_for(lambda: not sim.store.list("v1", "Pod", "default", f"training.kubeflow.org/job-name={name}"))
    job.cancel()


def test_after_an_mpijob_its_workers_release_their_slots_so_the_next_job_runs(make_cluster):
    """Workers run ``sshd -D``, which never exits: mpi-operator deletes them after the launcher
    ends only for cleanPodPolicy All/Running (mpi-operator@v0.8.0 mpi_job_controller.go syncHandler,
    isCleanUpPods). With "None" Kueue freed the quota, yet the next job's pods found no room."""
    sim, be = make_cluster(gpus=0, pod_slots=3)  # room for one MPIJob: 2 workers + the launcher
    first = submit(be, where_ranks_ran, ranks=2, per_node=1)
    assert len(first.result(timeout=90)) == 2
    name = first.status().name
    mpijob = sim.store.get("kubeflow.org/v2beta1", "MPIJob", name, "default")
    assert mpijob["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    wait_for(lambda: not [p for p in sim.store.list("v1", "Pod", "default", f"training.kubeflow.org/job-name={name}")
                          if p["status"].get("phase") in ("Running", "Pending")], timeout=30)
    second = submit(be, where_ranks_ran, ranks=2, per_node=1)
    assert len(second.result(timeout=90)) == 2
