"""Every upstream object with a real status (shared/crds/examples/*/status, visibility JSON)
parses into the expected JobStatus / WorkloadState."""
from __future__ import annotations

import json

import pytest
import yaml

from gpujobs_sim import crds
from gpujobs.backends.kubernetes.status import mapping as sm

EX = crds.crds_dir() / "examples"
pytestmark = pytest.mark.skipif(not EX.is_dir(), reason=f"upstream examples not found at {EX}")


def load(rel: str) -> dict:
    return yaml.load((EX / rel).read_text(), Loader=yaml.BaseLoader)  # timestamps stay strings


def job(kind="MPIJob", api="kubeflow.org/v2beta1", queue="q"):
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "j", "uid": "u1", "labels": {
        sm.QUEUE_LABEL: queue}, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}}}


WORKLOADS = {
    # file: (WorkloadState.state, reason, JobStatus.phase, words in the message)
    "kueue/status/workload-admission-podsetassignments.yaml": ("pending", "PendingEvaluation", "queued", ""),
    "kueue/status/workload-admissionchecks-pending.yaml": ("quota_reserved", "QuotaReserved", "queued",
                                                           "dws-prov: Pending"),
    "kueue/status/workload-admitted-conditions.yaml": ("admitted", "Admitted", "admitted", ""),
    "kueue/status/workload-dra-admission.yaml": ("pending", "PendingEvaluation", "queued", ""),
    "kueue/status/workload-misconfigured-v0.19.yaml": ("pending", "Misconfigured", "queued",
                                                       "LocalQueue local-queue doesn't exist"),
    "kueue/status/workload-pending-quota.yaml": ("pending", "Pending", "queued", "insufficient quota for cpu"),
    "kueue/status/workload-preempted-conditions.yaml": ("requeued", "Preempted", "queued", "requeued after being preempted"),
    "kueue/status/workload-preempted-evicted.yaml": ("requeued", "Preempted", "queued", "preempted"),
    "kueue/status/workload-waiting-for-quota-v0.19.yaml": ("pending", "WaitingForQuota", "queued",
                                                           "waiting for quota: couldn't assign flavors"),
}


@pytest.mark.parametrize("rel", sorted(WORKLOADS))
def test_workload_examples(rel):
    state, reason, phase, words = WORKLOADS[rel]
    wl = load(rel)
    ws = sm.workload_state(wl)
    assert (ws.state, ws.reason) == (state, reason)
    st = sm.job_status("ns/j", job(), workload=wl, position=3 if phase == "queued" and state == "pending" else None)
    assert st.phase == phase
    assert words in st.message
    if state == "pending":
        assert st.queue_position == 3 and st.summary().startswith("j: queued · 3rd in q")


def test_every_status_file_is_covered():
    files = {str(p.relative_to(EX)) for p in EX.glob("*/status/*.yaml")}
    covered = set(WORKLOADS) | {"volcano/status/podgroup-running.yaml", "volcano/status/podgroup-deployment-running.yaml",
                                "volcano/status/vcjob-running.yaml", "volcano/status/vcjob-completed.yaml",
                                "volcano/status/queue-open.yaml", "volcano/status/queue-allocated.yaml",
                                "mpi-operator/status/mpijob-succeeded.yaml",
                                "training-operator/status/pytorchjob-succeeded.yaml"}
    assert files <= covered, files - covered


def test_podgroups_give_gang_readiness():
    assert sm.gang_from_podgroup(load("volcano/status/podgroup-running.yaml")) == (1, 1)
    assert sm.gang_from_podgroup(load("volcano/status/podgroup-deployment-running.yaml")) == (2, 2)
    vc = load("volcano/status/vcjob-running.yaml")
    vc["metadata"]["uid"] = "u"
    pg = load("volcano/status/podgroup-running.yaml")
    pg["spec"]["minMember"] = 3
    pg["status"]["running"] = 2
    pg["status"]["phase"] = "Inqueue"
    st = sm.job_status("default/quickstart-job", dict(vc, status={}), podgroup=pg)
    assert (st.gang_ready, st.gang_size, st.phase) == (2, 3, "starting")


def test_volcano_jobs():
    st = sm.job_status("default/q", load("volcano/status/vcjob-running.yaml"))
    assert (st.phase, st.gang_ready, st.gang_size) == ("running", 3, 3)
    done = load("volcano/status/vcjob-completed.yaml")
    done["spec"] = {"tasks": [{"name": "t", "replicas": 3}], "minAvailable": 3}
    st = sm.job_status("default/q", done)
    assert st.phase == "succeeded" and st.finished_at is not None


def test_volcano_queues_are_not_jobs():
    for rel in ("volcano/status/queue-open.yaml", "volcano/status/queue-allocated.yaml"):
        q = load(rel)
        assert q["status"]["state"] == "Open"
        assert sm.kind_state(q).phase is None


def test_operator_jobs_succeeded():
    mpi = load("mpi-operator/status/mpijob-succeeded.yaml")
    st = sm.job_status("default/tensorflow-benchmarks", mpi)
    assert st.phase == "succeeded" and st.gang_size == 2 and st.started_at and st.finished_at
    pt = load("training-operator/status/pytorchjob-succeeded.yaml")
    pt.setdefault("kind", "PyTorchJob")
    st = sm.job_status("default/x", pt)
    assert st.phase == "succeeded" and st.finished_at is not None


@pytest.mark.parametrize("rel,expected", [
    ("kueue/visibility/localqueue-pendingworkloads.json", None),
    ("kueue/visibility/localqueue-pendingworkloads-limit1-offset1.json", {"job-sample-job-jg9dw-5f1a3": 2}),
])
def test_visibility_positions_are_one_based(rel, expected):
    summary = json.loads((EX / rel).read_text())
    got = sm.positions_from_summary(summary)
    want = {it["metadata"]["name"]: it["positionInLocalQueue"] + 1 for it in summary["items"]}
    assert got == want and min(got.values()) >= 1
    if expected:
        assert got == expected


def test_rayjob_states():
    base = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r", "uid": "u"},
            "spec": {"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "w", "replicas": 2}]}}}
    ok = dict(base, status={"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"})
    assert sm.job_status("n/r", ok).phase == "succeeded"
    bad = dict(base, status={"jobStatus": "FAILED", "jobDeploymentStatus": "Failed", "reason": "AppFailed",
                             "message": "boom"})
    st = sm.job_status("n/r", bad)
    assert (st.phase, st.reason, st.message) == ("failed", "AppFailed", "boom")
    # jobStatus terminal, deployment still Running: KubeRay waits for the submitter (kuberay #1919)
    for js in ("SUCCEEDED", "FAILED", "STOPPED"):
        following = dict(base, status={"jobStatus": js, "jobDeploymentStatus": "Running",
                                       "rayClusterStatus": {"state": "ready"}})
        assert sm.job_status("n/r", following).phase == "running", js
    invalid = dict(base, status={"jobDeploymentStatus": "ValidationFailed", "message": "no"})
    assert sm.job_status("n/r", invalid).phase == "failed"
    init = dict(base, status={"jobDeploymentStatus": "Initializing", "rayClusterStatus": {
        "readyWorkerReplicas": 1, "conditions": [{"type": "HeadPodReady", "status": "True"}]}})
    st = sm.job_status("n/r", init)
    assert (st.phase, st.gang_ready, st.gang_size) == ("starting", 2, 3)
