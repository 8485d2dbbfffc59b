"""A fake kube-apiserver over real HTTP (gpujobs_sim.apiserver) seeded with a small Kueue setup."""
from __future__ import annotations

import threading

import kubernetes
import pytest

from gpujobs.backends.kubernetes import KubernetesBackend
from gpujobs_sim.apiserver import FakeApiServer

NS = "ml"


def seed(store, gpus: int = 8, cohort: str | None = None, borrowing: str | None = None) -> None:
    gpu_res = {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}
    if borrowing is not None:
        gpu_res["borrowingLimit"] = borrowing
    cq_spec = {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                                   "flavors": [{"name": "a100", "resources": [
                                       {"name": "cpu", "nominalQuota": "256"},
                                       {"name": "memory", "nominalQuota": "2Ti"}, gpu_res]}]}]}
    if cohort:
        cq_spec["cohortName"] = cohort
    store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                  "metadata": {"name": "cq-a"}, "spec": cq_spec})
    store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                  "metadata": {"name": "team-a", "namespace": NS}, "spec": {"clusterQueue": "cq-a"}})
    store.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                  "metadata": {"name": "high"}, "value": 1000})
    store.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                  "metadata": {"name": "gpujobs-torch"}, "spec": {}})
    store.create({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                  "metadata": {"name": "gpujobs-torch-volcano"}, "spec": {}})
    store.create({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                  "metadata": {"name": "default"}, "spec": {"weight": 1}})


@pytest.fixture
def server():
    before = {t.ident for t in threading.enumerate()}
    s = FakeApiServer().start()
    seed(s.store)
    yield s
    s.stop()
    left = [t for t in threading.enumerate() if t.ident not in before and t.name == "fake-apiserver"]
    assert not left, f"fake apiserver thread survived: {left}"


@pytest.fixture
def backend(server, gpujobs_home):
    api = kubernetes.client.ApiClient(server.configuration())
    be = KubernetesBackend(api, namespace=NS, home=gpujobs_home, request_timeout=5.0)
    yield be
    api.close()


def namespaced_objects(server, ns: str = NS) -> dict[tuple[str, str], dict]:
    """(kind, name) -> object for everything in ``ns`` except the seeded LocalQueue."""
    out = {}
    for res, obj in server.store.all_objects():
        md = obj["metadata"]
        if md.get("namespace") == ns and res.kind != "LocalQueue":
            out[(res.kind, md["name"])] = obj
    return out


def shared_keys(r) -> set[tuple[str, str]]:
    """(kind, name) of the shared runtime ConfigMap and key Secret of a rendering."""
    return {(o["kind"], o["metadata"]["name"]) for o in r.shared}
