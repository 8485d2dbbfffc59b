"""Each simulated operator's own activeDeadlineSeconds, on hand-written jobs (not gpujobs'
renderer; no Kueue label): the field, the status once it is past, and which pods go (sources in
gpujobs_sim/deadlines.py). Scripted pods run for 60 s; the deadline is 1 s."""
from __future__ import annotations

from tests.support import wait_for

from gpujobs_sim import SimCluster

LONG = {"sim.gpujobs.dev/seconds": "60"}


def _conds(obj: dict) -> dict:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _pods(sim) -> list[dict]:
    return sim.store.list("v1", "Pod", "default")


def test_a_pytorchjob_past_its_deadline_fails_and_every_pod_goes_whatever_its_clean_pod_policy():
    tmpl = {"metadata": {"annotations": LONG}, "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"runPolicy": {"activeDeadlineSeconds": 1, "cleanPodPolicy": "None"}, "pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "restartPolicy": "Never", "template": tmpl}}}}
    with SimCluster(gpus=None, cpus=None) as sim:
        sim.store.create(job)
        pj = wait_for(lambda: (j := sim.store.get("kubeflow.org/v1", "PyTorchJob", "p", "default"))
                      and "Failed" in _conds(j) and j, timeout=30)
        failed = _conds(pj)["Failed"]
        assert failed["reason"] == "PyTorchJobFailed" and "active longer than specified deadline" in failed["message"]
        wait_for(lambda: not _pods(sim), timeout=10)


def test_a_trainjob_past_its_deadline_fails_with_deadline_exceeded_and_its_pods_go():
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "t", "namespace": "default"},
           "spec": {"runtimeRef": {"name": "torch-distributed"}, "activeDeadlineSeconds": 1,
                    "trainer": {"numNodes": 1}}}
    with SimCluster(gpus=None, cpus=None, run_seconds=60) as sim:
        sim.store.create(job)
        tj = wait_for(lambda: (j := sim.store.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "t", "default"))
                      and "Failed" in _conds(j) and j, timeout=30)
        assert _conds(tj)["Failed"]["reason"] == "DeadlineExceeded"
        assert _conds(tj)["Failed"]["message"] == "TrainJob exceeded its active deadline"
        wait_for(lambda: not _pods(sim), timeout=10)


def test_a_rayjob_past_its_deadline_fails_and_keeps_its_submitter_pod():
    pod = {"metadata": {"annotations": LONG}, "spec": {"containers": [{"name": "ray-head", "image": "x"}]}}
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r", "namespace": "default"},
           "spec": {"entrypoint": "python x.py", "shutdownAfterJobFinishes": True, "activeDeadlineSeconds": 1,
                    "submitterPodTemplate": {"metadata": {"annotations": LONG}, "spec": {
                        "restartPolicy": "Never", "containers": [{"name": "ray-job-submitter", "image": "x"}]}},
                    "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": pod},
                                       "workerGroupSpecs": []}}}
    with SimCluster(gpus=None, cpus=None) as sim:
        sim.store.create(job)
        st = wait_for(lambda: ((sim.store.get("ray.io/v1", "RayJob", "r", "default") or {}).get("status") or {})
                      .get("jobDeploymentStatus") == "Failed"
                      and sim.store.get("ray.io/v1", "RayJob", "r", "default")["status"], timeout=30)
        assert st["reason"] == "DeadlineExceeded" and "activeDeadlineSeconds" in st["message"]
        wait_for(lambda: [p["metadata"]["labels"].get("batch.kubernetes.io/job-name") for p in _pods(sim)] == ["r"],
                 timeout=10)  # the RayCluster's pods went; the submitter's stays, with its log


def test_an_mpijob_past_its_deadline_fails_through_its_launcher_job():
    img = "mpioperator/openmpi:v0.8.0"
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "m", "namespace": "default"},
           "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running", "activeDeadlineSeconds": 1},
                    "mpiReplicaSpecs": {
                        "Launcher": {"replicas": 1, "template": {"metadata": {"annotations": LONG}, "spec": {
                            "containers": [{"name": "mpi-launcher", "image": img, "command": ["sleep", "60"]}]}}},
                        "Worker": {"replicas": 1, "template": {"spec": {"containers": [
                            {"name": "mpi-worker", "image": img}]}}}}}}
    with SimCluster(gpus=None, cpus=None) as sim:
        sim.store.create(job)
        mj = wait_for(lambda: (j := sim.store.get("kubeflow.org/v2beta1", "MPIJob", "m", "default"))
                      and "Failed" in _conds(j) and j, timeout=30)
        assert _conds(mj)["Failed"]["reason"] == "DeadlineExceeded"
        launcher = sim.store.get("batch/v1", "Job", "m-launcher", "default")
        assert launcher["spec"]["activeDeadlineSeconds"] == 1 and _conds(launcher)["Failed"]["reason"] == "DeadlineExceeded"
        wait_for(lambda: not [p for p in _pods(sim) if p["status"].get("phase") in ("Running", "Pending")],
                 timeout=10)  # the launcher (Job controller) and the running workers (cleanPodPolicy) went
