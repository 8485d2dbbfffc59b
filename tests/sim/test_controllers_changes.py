"""The simulated controllers react to store changes: an idle cluster does no reconcile pass
(nothing is rescanned or copied on a timer), a change makes them look at the jobs it touches."""
from __future__ import annotations

import time

import pytest
from tests.support import wait_for as until

from gpujobs_sim import SimCluster

N = 30


def pytorchjob(name: str, seconds: float = 3600) -> dict:
    tmpl = {"metadata": {"annotations": {"sim.gpujobs.dev/seconds": str(seconds)}},
            "spec": {"containers": [{"name": "pytorch", "image": "x",
                                     "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": tmpl}}}}


def settle(sim: SimCluster, quiet: float = 0.5) -> dict:
    """Wait until the store has not changed for ``quiet`` s; the controllers' counters then."""
    last, since = sim.store.resource_version, time.time()
    while time.time() - since < quiet:
        time.sleep(0.05)
        if sim.store.resource_version != last:
            last, since = sim.store.resource_version, time.time()
    return dict(sim.controllers.stats)


def phase(sim: SimCluster, pod: str) -> str | None:
    p = sim.store.get("v1", "Pod", pod, "default")
    return p and p["status"].get("phase")


@pytest.fixture
def sim():
    s = SimCluster(gpus=1, cpus=1000).start()
    yield s
    pids = s.stop()
    assert not s.controllers.errors, s.controllers.errors
    import psutil
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_idle_cluster_makes_no_pass_and_a_change_touches_only_its_job(sim):
    for i in range(N):
        sim.store.create(pytorchjob(f"j{i}"))
    until(lambda: phase(sim, "j0-master-0") == "Running")
    before = settle(sim)
    assert before["jobs"] >= N  # every job was looked at
    time.sleep(1.0)  # idle: one job running, N-1 queued
    assert dict(sim.controllers.stats) == before, "the controllers worked while nothing changed"

    sim.store.patch("kubeflow.org/v1", "PyTorchJob", "j7", "default", {"metadata": {"annotations": {"a": "b"}}})
    after = settle(sim)
    assert 1 <= after["jobs"] - before["jobs"] <= 3, (before, after)  # j7, not all N jobs
    assert after["passes"] - before["passes"] <= 3

    # the running job goes: its quota admits the next one, whose pod starts
    sim.store.delete("kubeflow.org/v1", "PyTorchJob", "j0", "default")
    until(lambda: phase(sim, "j1-master-0") == "Running")
    done = settle(sim)
    assert phase(sim, "j2-master-0") is None  # still queued
    assert done["jobs"] - after["jobs"] < N, (after, done)


def test_job_created_on_an_idle_cluster_runs_to_completion(sim):
    settle(sim)
    time.sleep(0.3)
    sim.store.create(pytorchjob("late", seconds=0.2))
    until(lambda: phase(sim, "late-master-0") == "Succeeded")
    wl = until(lambda: [w for w in sim.store.list("kueue.x-k8s.io/v1beta2", "Workload", "default")
                        if any(c["type"] == "Finished" and c["status"] == "True"
                               for c in (w.get("status") or {}).get("conditions") or [])])
    assert wl[0]["metadata"]["ownerReferences"][0]["name"] == "late"
