"""Status through watch faults (dropped streams, 410 Gone, 429/500 bursts) and gang k/N.

Jobs here are created as raw objects (no payload): the simulated kubelet runs scripted pods.
"""
from __future__ import annotations

import time

import pytest

from gpujobs.backends.kubernetes.status.hub import StatusHub
from gpujobs_sim import SimCluster


def pytorchjob(name, workers=1, seconds=1.0, queue="q"):
    tmpl = {"metadata": {"annotations": {"sim.gpujobs.dev/seconds": str(seconds)}},
            "spec": {"containers": [{"name": "pytorch", "image": "x",
                                     "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    labels = {"gpujobs.dev/job": name}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "labels": labels},
            "spec": {"runPolicy": {"suspend": bool(queue)}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": tmpl}, "Worker": {"replicas": workers, "template": tmpl}}}}


@pytest.fixture
def sim_hub():
    made = []

    def make(**kw):
        sim = SimCluster(**kw).start()
        hub = StatusHub(sim.api_client(), "default").start()
        hub.track_kind("PyTorchJob")
        hub.wait_synced()
        made.append((sim, hub))
        return sim, hub
    yield make
    for sim, hub in made:
        hub.stop()
        sim.stop()
        assert not sim.controllers.errors


def until(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("not reached")


def test_gang_of_four_with_two_ready_pods_shows_2_of_4(sim_hub):
    sim, hub = sim_hub(gpus=8, pod_slots=2)
    sim.store.create(pytorchjob("gang", workers=3, seconds=30))
    st = until(lambda: (s := hub.status("gang")) and s.gang_ready == 2 and s)
    assert st.gang_size == 4 and st.phase == "starting" and "gang 2/4" in st.summary()


def test_volcano_podgroup_running_vs_min_member(sim_hub):
    sim, hub = sim_hub(gpus=8, pod_slots=3)
    job = pytorchjob("vg", workers=3, seconds=30)
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 4}
    sim.store.create(job)
    st = until(lambda: (s := hub.status("vg")) and s.gang_ready == 3 and s)
    pg = sim.store.list("scheduling.volcano.sh/v1beta1", "PodGroup", "default")[0]
    assert pg["spec"]["minMember"] == 4 and pg["status"]["running"] == 3
    assert (st.gang_ready, st.gang_size) == (3, 4) and st.phase == "starting"


def _run_jobs_with_faults(sim, hub, fault):
    seen: dict[str, list[str]] = {}
    names = [f"j{i}" for i in range(4)]
    for n in names:
        seen[n] = []
        hub.subscribe(n, lambda s, n=n: seen[n].append(s.phase))
    for n in names:
        sim.store.create(pytorchjob(n, workers=0, seconds=0.6))
    fault()
    until(lambda: all(hub.status(n) and hub.status(n).phase == "succeeded" for n in names), 40)
    time.sleep(0.3)  # let the last coalesced flush reach the subscribers
    assert not hub.errors, hub.errors
    for n in names:
        updates = seen[n]
        assert updates[-1] == "succeeded", (n, updates)
        phases = [p for i, p in enumerate(updates) if i == 0 or updates[i - 1] != p]  # transitions
        assert phases.count("succeeded") == 1, phases  # no duplicated or reverted transition
        order = [p for p in ("queued", "running", "succeeded") if p in phases]
        assert [p for p in phases if p in order] == sorted([p for p in phases if p in order], key=order.index)
    assert sorted(s.job_id for s in hub.all()) == sorted(f"default/{n}" for n in names)  # no duplicate job


def test_watch_dropped_mid_stream(sim_hub):
    sim, hub = sim_hub(gpus=1)

    def fault():
        for _ in range(5):
            time.sleep(0.4)
            sim.server.drop_watches()
    _run_jobs_with_faults(sim, hub, fault)
    assert sim.server.counts["watch"] > 8  # every informer reconnected


def test_410_gone_relists(sim_hub):
    sim, hub = sim_hub(gpus=1)
    lists_before = sim.server.counts["list"]

    def fault():
        for i in range(3):
            time.sleep(0.5)
            # a write the watches do not follow: each of them is now behind, whether or not the
            # jobs changed anything in the last 0.5 s (they wait a second between starts)
            sim.store.create({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": f"behind-{i}", "namespace": "default"}})
            sim.server.compact()
            sim.server.drop_watches()  # resume from a compacted resourceVersion -> 410 -> relist
    _run_jobs_with_faults(sim, hub, fault)
    assert sim.server.counts["list"] >= lists_before + 2 * 3  # at each compaction, more than one watch


def test_bursts_of_429_and_500(sim_hub):
    sim, hub = sim_hub(gpus=1)

    def fault():
        sim.server.inject(429, count=10, verb="watch", retry_after=1)
        sim.server.inject(500, count=10, verb="list")
        sim.server.drop_watches()
        time.sleep(1.0)
        sim.server.inject(500, count=10, verb="watch")
        sim.server.drop_watches()
    _run_jobs_with_faults(sim, hub, fault)


def test_cancel_is_foreground_delete(sim_hub, tmp_path):
    from gpujobs.backends.kubernetes.backend import KubernetesBackend
    sim, hub = sim_hub(gpus=2)
    sim.store.create(pytorchjob("c", workers=1, seconds=30))
    until(lambda: (s := hub.status("c")) is not None and s.phase == "running")
    be = KubernetesBackend(api_client=sim.api_client(), namespace="default")
    be.cancel("default/c")
    st = until(lambda: (s := hub.status("c")) and s.phase == "cancelled" and s)
    assert st.terminal
    assert sim.store.list("v1", "Pod", "default") == []
    assert sim.store.list("kueue.x-k8s.io/v1beta2", "Workload", "default") == []
    be.state.stop_watches()
