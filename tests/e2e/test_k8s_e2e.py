"""Opt-in end-to-end tests on a real cluster (kind + Kueue + Volcano + operators).

Set up with ``scripts/kind-e2e-setup.sh``, then::

    KUBECONFIG=~/.kube/config GPUJOBS_E2E_NAMESPACE=gpujobs-e2e GPUJOBS_E2E_QUEUE=gpujobs-e2e \
        .venv/bin/python -m pytest tests/e2e -m e2e -q

Skipped (with the reason) when KUBECONFIG is not set or no cluster answers.
CPU-only: every job asks for 0 GPUs.
"""
from __future__ import annotations

import os
import time

import pytest

import gpujobs
from gpujobs.backends.kubernetes import naming
from gpujobs.backends.kubernetes.kinds import KINDS

pytestmark = pytest.mark.e2e

NS = os.environ.get("GPUJOBS_E2E_NAMESPACE", "gpujobs-e2e")
QUEUE = os.environ.get("GPUJOBS_E2E_QUEUE", "gpujobs-e2e")


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
    ("MPIJob", lambda: gpujobs.job(add, 1, 2).mpi(ranks=2, gpus_per_rank=0, ranks_per_node=1)),
    ("RayJob", lambda: gpujobs.job(add, 1, 2).ray(workers=1, gpus_per_worker=0)),
    ("AppWrapper", lambda: gpujobs.job(add, 1, 2).ddp(nodes=2, gpus_per_node=0, procs_per_node=1)
        .kubernetes(volcano="appwrapper")),
])
def test_submit_is_queued_by_kueue(backend, kind, builder):
    spec = builder().queue(QUEUE).spec()
    job_id = backend.submit(spec)
    ns, name = naming.parse_job_id(job_id)
    try:
        rec = naming.load_record(ns, name, backend.home)
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
