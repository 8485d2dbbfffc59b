"""Opt-in end-to-end tests on a real cluster (kind + Kueue + Volcano + operators).

Set up with ``scripts/kind-e2e-setup.sh``, then::

    KUBECONFIG=~/.kube/config GPUJOBS_E2E_NAMESPACE=gpujobs-e2e GPUJOBS_E2E_QUEUE=gpujobs-e2e \
        .venv/bin/python -m pytest tests/e2e -m e2e -q

Skipped (with the reason) when KUBECONFIG is not set or no cluster answers.
CPU-only: every job asks for 0 GPUs. MPI jobs run gpujobs' MPI image (docker/mpi, built and loaded
into kind by the setup script for its $PYTHON; ``GPUJOBS_E2E_MPI_IMAGE`` names another), which
must hold the Python you run pytest with.
"""
from __future__ import annotations

import os
import sys
import time

import pytest

import gpujobs
from gpujobs.backends.kubernetes import keys, naming
from gpujobs.backends.kubernetes.kinds import KINDS

pytestmark = pytest.mark.e2e

NS = os.environ.get("GPUJOBS_E2E_NAMESPACE", "gpujobs-e2e")
QUEUE = os.environ.get("GPUJOBS_E2E_QUEUE", "gpujobs-e2e")
MPI_IMAGE = os.environ.get("GPUJOBS_E2E_MPI_IMAGE", "gpujobs-mpi:py%d%d" % sys.version_info[:2])


def _cluster_or_skip():
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG is not set: the e2e suite needs a real cluster "
                    "(scripts/kind-e2e-setup.sh creates one)")
    try:
        from kubernetes import client, config
        config.load_kube_config()
        client.VersionApi().get_code(_request_timeout=(3, 3))
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no Kubernetes cluster reachable through KUBECONFIG: {exc}")


@pytest.fixture(scope="module")
def backend():
    _cluster_or_skip()
    from gpujobs.backends.kubernetes import KubernetesBackend
    return KubernetesBackend(namespace=NS, default_queue=QUEUE)


def add(a, b):
    ctx = gpujobs.context()
    return a + b + ctx.world_size


def _workload_for(uid: str, timeout: float = 60.0) -> dict | None:
    from kubernetes import client
    api = client.CustomObjectsApi()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wl = api.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads",
                                               label_selector=f"kueue.x-k8s.io/job-uid={uid}")
        if wl["items"]:
            return wl["items"][0]
        time.sleep(2)
    return None


def _uid(kind: str, name: str) -> str:
    from kubernetes import client
    i = KINDS[kind]
    obj = client.CustomObjectsApi().get_namespaced_custom_object(i.group, i.version, NS,
                                                                 i.plural, name)
    return obj["metadata"]["uid"]


def _delete(kind: str, name: str) -> None:
    from kubernetes import client
    i = KINDS[kind]
    try:
        client.CustomObjectsApi().delete_namespaced_custom_object(
            i.group, i.version, NS, i.plural, name, body={"propagationPolicy": "Foreground"})
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.mark.parametrize("kind, builder", [
    ("TrainJob", lambda: gpujobs.job(add, 1, 2).ddp(nodes=2, gpus_per_node=0, procs_per_node=1)),
    ("MPIJob", lambda: gpujobs.job(add, 1, 2).mpi(ranks=2, gpus_per_rank=0, ranks_per_node=1).image(MPI_IMAGE)),
    ("RayJob", lambda: gpujobs.job(add, 1, 2).ray(workers=1, gpus_per_worker=0)),
    ("AppWrapper", lambda: gpujobs.job(add, 1, 2).ddp(nodes=2, gpus_per_node=0, procs_per_node=1)
        .kubernetes(volcano="appwrapper")),
])
def test_submit_is_queued_by_kueue(backend, kind, builder):
    spec = builder().queue(QUEUE).spec()
    job_id = backend.submit(spec)
    ns, name = naming.parse_job_id(job_id)
    try:
        rec = keys.load_record(ns, name, backend.home)
        assert rec.kind == kind
        wl = _workload_for(_uid(kind, name))
        assert wl is not None, f"Kueue made no Workload for {kind} {name}"
        assert wl["spec"]["queueName"] == QUEUE
        try:  # results need the status/results modules (k8s-status); use them when present
            result = gpujobs.attach(job_id, "kubernetes").result(timeout=600)
        except NotImplementedError:
            return
        assert result == 1 + 2 + spec.world_size
    finally:
        _delete(kind, name)


def test_preflight_rejects_unknown_queue(backend):
    from gpujobs.errors import PreflightError
    with pytest.raises(PreflightError, match="LocalQueue"):
        backend.submit(gpujobs.job(add, 1, 2).ddp(gpus_per_node=0, procs_per_node=1)
                       .queue("no-such-queue").spec())


def rank_hosts():
    import socket

    from mpi4py import MPI
    return MPI.COMM_WORLD.gather(socket.gethostname())


def test_mpi_ranks_run_on_the_workers_not_the_launcher(backend):
    """mpi-operator v0.8 sets only ORTE-era variables, which Open MPI 5 ignores; gpujobs passes
    --hostfile, so the ranks run in the worker pods (hostnames <job>-worker-<i>), 2 per worker."""
    spec = gpujobs.job(rank_hosts).mpi(ranks=4, gpus_per_rank=0, ranks_per_node=2).image(MPI_IMAGE) \
        .queue(QUEUE).spec()
    job_id = backend.submit(spec)
    _, name = naming.parse_job_id(job_id)
    try:
        hosts = gpujobs.attach(job_id, "kubernetes").result(timeout=600)
        assert sorted(hosts) == [f"{name}-worker-0"] * 2 + [f"{name}-worker-1"] * 2, hosts
    finally:
        _delete("MPIJob", name)


def test_mpi_worker_without_sshd_is_reported_not_silent(backend):
    """launcherCreationPolicy WaitForWorkersReady: a worker whose image has no sshd never gets
    ready, the MPI Operator never creates the launcher, and gpujobs' status says why."""
    image = "python:%d.%d-slim" % sys.version_info[:2]  # Python, but no sshd/ssh/mpirun
    spec = gpujobs.job(add, 1, 2).mpi(ranks=2, gpus_per_rank=0, ranks_per_node=1).image(image).queue(QUEUE).spec()
    job_id = backend.submit(spec)
    _, name = naming.parse_job_id(job_id)
    try:
        deadline = time.monotonic() + 300
        st = backend.status(job_id)
        while time.monotonic() < deadline and "does not recreate" not in st.message:
            time.sleep(3)
            st = backend.status(job_id)
        assert st.reason == "WaitingForWorkers" and "ready (sshd)" in st.message, st
        assert "no sshd" in st.message, st.message
    finally:
        _delete("MPIJob", name)


def test_mpi_volcano_gang_has_a_podgroup_or_status_names_the_operator_flag(backend):
    """volcano='gang' needs mpi-operator's --gang-scheduling=volcano (the setup script sets it with
    MPI_GANG_SCHEDULING=volcano; the release manifest does not)."""
    from kubernetes import client
    spec = gpujobs.job(add, 1, 2).mpi(ranks=2, gpus_per_rank=0, ranks_per_node=1).image(MPI_IMAGE) \
        .options(volcano="gang").queue(QUEUE).spec()
    job_id = backend.submit(spec)
    _, name = naming.parse_job_id(job_id)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                pg = client.CustomObjectsApi().get_namespaced_custom_object(
                    "scheduling.volcano.sh", "v1beta1", NS, "podgroups", name)
                assert pg["spec"]["minMember"] == 3
                break
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise
            st = backend.status(job_id)
            if "--gang-scheduling=volcano" in st.message:
                break
            time.sleep(3)
        else:
            pytest.fail("neither a PodGroup nor a status naming --gang-scheduling=volcano")
    finally:
        _delete("MPIJob", name)
