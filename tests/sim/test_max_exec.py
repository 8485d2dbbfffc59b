"""The simulated Kueue's maximum execution time, on a hand-written job (not gpujobs' renderer):
kueue@v0.19.2 pkg/controller/core/workload_controller.go reconcileMaxExecutionTime counts from
admission and deactivates the Workload; the job is suspended and its operator deletes its pods."""
from __future__ import annotations

from tests.support import wait_for

from gpujobs_sim import SimCluster

WL = "kueue.x-k8s.io/v1beta2"


def job(name: str, max_exec: int | None) -> dict:
    tmpl = {"metadata": {"annotations": {"sim.gpujobs.dev/seconds": "60"}},
            "spec": {"containers": [{"name": "pytorch", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}
    labels = {"kueue.x-k8s.io/queue-name": "q"}
    if max_exec:
        labels["kueue.x-k8s.io/max-exec-time-seconds"] = str(max_exec)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": "default",
            "labels": labels}, "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": tmpl}}}}


def test_a_workload_past_its_maximum_execution_time_is_deactivated_and_its_pods_go():
    with SimCluster(gpus=None, cpus=8) as sim:
        sim.store.create(job("limited", 1))
        sim.store.create(job("free", None))
        wl = wait_for(lambda: next((w for w in sim.store.list(WL, "Workload", "default")
                                    if w["metadata"]["name"].startswith("pytorchjob-limited")
                                    and w["spec"].get("active") is False), None), timeout=30)
        assert wl["spec"]["maximumExecutionTimeSeconds"] == 1
        conds = {c["type"]: c for c in wl["status"]["conditions"]}
        assert conds["DeactivationTarget"]["reason"] == "MaximumExecutionTimeExceeded"
        assert conds["Evicted"]["reason"] == "Deactivated"
        assert "maximum execution time" in conds["Evicted"]["message"]
        pj = wait_for(lambda: (j := sim.store.get("kubeflow.org/v1", "PyTorchJob", "limited", "default"))
                      ["spec"]["runPolicy"]["suspend"] and j)  # suspended, not failed
        assert not any(c["type"] == "Failed" for c in (pj.get("status") or {}).get("conditions") or [])
        wait_for(lambda: not sim.store.list("v1", "Pod", "default", f"sim.gpujobs.dev/owner-uid={pj['metadata']['uid']}"))
        free = sim.store.get("kubeflow.org/v1", "PyTorchJob", "free", "default")
        assert free["spec"]["runPolicy"]["suspend"] is False  # no label, no timer
