"""Kueue's waitForPodsReady over real HTTP: a gang whose pods cannot all start is evicted
(PodsReadyTimeout), backs off, is requeued and, past the requeuing limit, deactivated; a gang
that becomes ready in time is left alone. Jobs go through KubernetesBackend and run the real
runner in the simulated pods; the kubelet's single slot keeps the second pod unschedulable."""
from __future__ import annotations

import time

import pytest
from tests.support import wait_for

import gpujobs
from gpujobs.backends.kubernetes.status import mapping as sm
from gpujobs.backends.kubernetes.status.mapping import parse_time
from gpujobs.errors import GpuJobsError
from gpujobs.handle import Job

WL = "kueue.x-k8s.io/v1beta2"


def two_ranks(value):
    return value


def submit(be, value="v"):
    spec = gpujobs.job(two_ranks, value).ddp(nodes=2, gpus_per_node=1).queue("q").kubernetes(kind="PyTorchJob").spec()
    return Job(be.submit(spec), be)


def workload(sim, job):
    return sim.store.get(WL, "Workload", job.status().extra["workload"], "default")


def conds(wl):
    return {c["type"]: c for c in wl["status"].get("conditions") or []}


@pytest.mark.slow
def test_gang_that_never_starts_is_evicted_requeued_then_deactivated(make_cluster):
    sim, be = make_cluster(gpus=4, pod_slots=1, pods_ready_timeout_s=1.0, backoff_base_s=1.0, backoff_limit=1)
    job = submit(be)
    seen = []
    be.subscribe(job.id, seen.append)

    # the second pod is marked unschedulable at the kubelet's next pass, which can come after the
    # first is ready (a clean clone under load read "1/2 pods ready" between the two)
    st = wait_for(lambda: (s := job.status()).gang_ready == 1 and "unschedulable" in s.message and s, timeout=20)
    assert st.phase == "starting" and "gang 1/2" in st.summary()
    admitted = parse_time(conds(workload(sim, job))["Admitted"]["lastTransitionTime"])

    st = wait_for(lambda: (s := job.status()).reason == "PodsReadyTimeout" and s, timeout=20)
    evicted_at = time.time()
    wl = workload(sim, job)
    assert conds(wl)["Evicted"]["status"] == "True"
    assert 1.0 <= evicted_at - admitted < 5.0  # the timeout, not earlier (seconds in timestamps)
    assert wl["status"]["requeueState"]["count"] == 1
    requeue_at = parse_time(wl["status"]["requeueState"]["requeueAt"])
    assert st.phase == "queued" and st.restarts == 1
    assert "PodsReady timeout" in st.message and time.strftime("%H:%M:%S", time.localtime(requeue_at)) in st.message
    assert "requeue 1" in st.message

    # quota released and the job suspended while it backs off; no pods left
    wait_for(lambda: conds(workload(sim, job))["QuotaReserved"]["status"] == "False")
    wl = workload(sim, job)
    assert (conds(wl)["Requeued"]["status"], conds(wl)["Requeued"]["reason"]) == ("False", "PodsReadyTimeout")
    assert "admission" not in wl["status"]
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"))

    # back in the queue at requeueAt (BackoffFinished), admitted again, times out again: deactivated
    st = wait_for(lambda: (s := job.status()).phase == "failed" and s, timeout=30)
    assert any(s.phase == "starting" and s.restarts == 1 for s in seen if s.submitted_at)  # ran again
    wl = workload(sim, job)
    assert wl["spec"]["active"] is False and "requeueState" not in wl["status"]
    ev = conds(wl)["Evicted"]
    assert (ev["reason"], ev["status"]) == ("Deactivated", "True")
    assert "exceeding the maximum number of re-queuing retries" in ev["message"]
    assert {(e["reason"], e["underlyingCause"]): e["count"] for e in wl["status"]["schedulingStats"]["evictions"]} \
        == {("PodsReadyTimeout", "WaitForStart"): 1, ("Deactivated", "RequeuingLimitExceeded"): 1}
    assert st.restarts == 1 and st.reason == "Deactivated"
    assert "deactivated" in st.message and "2 times" in st.message and "requeuing limit" in st.message
    with pytest.raises(GpuJobsError, match="deactivated"):
        job.result(timeout=5)
    # it stays out of the queue: no pods, no quota, the job suspended
    time.sleep(1.5)
    wl = workload(sim, job)
    assert conds(wl)["QuotaReserved"]["status"] == "False" and not sim.store.list("v1", "Pod", "default")
    assert job.status().phase == "failed"


@pytest.mark.slow
def test_gang_ready_in_time_is_not_evicted(make_cluster):
    sim, be = make_cluster(gpus=4, pods_ready_timeout_s=3.0, backoff_base_s=1.0, backoff_limit=0)
    job = submit(be, "done")
    assert job.result(timeout=60) == "done"
    wl = workload(sim, job)
    assert conds(wl)["PodsReady"]["status"] == "True" and "Evicted" not in conds(wl)
    assert "schedulingStats" not in wl["status"] and job.status().restarts == 0
    assert not sim.controllers.changes.timers  # nothing left to wake the controllers


# ------------------------------------------------------------------ the mapping, object by object

def _job():
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {
        "name": "j", "uid": "u", "labels": {sm.QUEUE_LABEL: "q"}, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": {"replicas": 1},
                                                                          "Worker": {"replicas": 1}}}}


def _wl(conditions, active=True, requeue=None, evictions=()):
    st = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
          "schedulingStats": {"evictions": [{"reason": r, "underlyingCause": c, "count": n} for r, c, n in evictions]}}
    if requeue:
        st["requeueState"] = requeue
    return {"metadata": {"name": "w"}, "spec": {"active": active}, "status": st}


TIMEOUT = ("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/w")


def test_backing_off_shows_reason_requeue_time_and_restarts():
    wl = _wl([("QuotaReserved", "False", "Pending", ""), TIMEOUT,
              ("Requeued", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/w")],
             requeue={"count": 2, "requeueAt": "2025-01-01T10:00:05Z"},
             evictions=[("PodsReadyTimeout", "WaitForStart", 2)])
    st = sm.job_status("default/j", _job(), workload=wl)
    local = time.strftime("%H:%M:%S", time.localtime(parse_time("2025-01-01T10:00:05Z")))
    assert (st.phase, st.reason, st.restarts, st.queue_position) == ("queued", "PodsReadyTimeout", 2, None)
    assert f"back in the queue at {local} (requeue 2)" in st.message and "PodsReady timeout" in st.message
    # Kueue puts it back in the queue only at requeueAt: a start before then is impossible
    assert st.not_before == parse_time("2025-01-01T10:00:05Z") and st.expected_start is None


def test_backoff_finished_is_queued_again():
    wl = _wl([("QuotaReserved", "False", "Pending", ""), TIMEOUT,
              ("Requeued", "True", "BackoffFinished", "The workload backoff was finished")],
             requeue={"count": 1}, evictions=[("PodsReadyTimeout", "WaitForStart", 1)])
    st = sm.job_status("default/j", _job(), workload=wl, position=2)
    assert (st.phase, st.queue_position, st.restarts) == ("queued", 2, 1)
    assert st.message.startswith("requeued: its pods were not all ready") and "backoff finished" in st.message


@pytest.mark.parametrize("reason,evictions", [
    ("Deactivated", [("PodsReadyTimeout", "WaitForStart", 2), ("Deactivated", "RequeuingLimitExceeded", 1)]),
    ("DeactivatedDueToRequeuingLimitExceeded", [("PodsReadyTimeout", "", 2),
                                                ("DeactivatedDueToRequeuingLimitExceeded", "", 1)]),
    ("InactiveWorkloadRequeuingLimitExceeded", [("PodsReadyTimeout", "", 2)]),
])
def test_deactivated_at_the_requeuing_limit(reason, evictions):
    wl = _wl([("QuotaReserved", "False", "Pending", ""), ("Evicted", "True", reason,
              "The workload is deactivated due to exceeding the maximum number of re-queuing retries")],
             active=False, evictions=evictions)
    assert sm.workload_state(wl).cause == "RequeuingLimitExceeded"
    st = sm.job_status("default/j", _job(), workload=wl)
    assert (st.phase, st.reason, st.restarts) == ("failed", reason, 2)  # a deactivation is no restart
    assert "3 times (requeuing limit reached)" in st.message and st.terminal


def test_deactivated_by_hand_keeps_kueues_message():
    wl = _wl([("Evicted", "True", "Deactivated", "The workload is deactivated")], active=False)
    st = sm.job_status("default/j", _job(), workload=wl)
    assert st.phase == "failed" and st.message == "Kueue deactivated the workload: The workload is deactivated"


def _starting_gang(waiting_pod_status: dict):
    """Status of an admitted 2-pod gang: the master runs, the worker is Pending with
    ``waiting_pod_status``."""
    wl = _wl([("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""),
              ("PodsReady", "False", "WaitForStart", "")])
    job = _job()
    job["spec"]["runPolicy"]["suspend"] = False
    job["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
    pods = [{"metadata": {"name": "j-master-0"}, "status": {"phase": "Running"}},
            {"metadata": {"name": "j-worker-0"}, "status": {"phase": "Pending", **waiting_pod_status}}]
    return sm.job_status("default/j", job, workload=wl, pods=pods)


def test_starting_gang_names_the_unschedulable_pod():
    st = _starting_gang({"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: insufficient nvidia.com/gpu"}]})
    assert (st.phase, st.gang_ready, st.gang_size) == ("starting", 1, 2)
    assert st.message == "1/2 pods ready; pod j-worker-0 unschedulable: 0/1 nodes are available: insufficient " \
                         "nvidia.com/gpu"


@pytest.mark.parametrize("reason,words", [
    ("ImagePullBackOff", "image cannot be pulled"), ("ErrImagePull", "image cannot be pulled"),
    ("CreateContainerConfigError", "Secret or ConfigMap it needs is missing"),
    ("CrashLoopBackOff", "keeps crashing")])
def test_starting_gang_says_why_a_container_can_never_start(reason, words):
    """A wrong image is the most common reason a gang never starts: say so, not just '1/2'."""
    st = _starting_gang({"containerStatuses": [{"name": "pytorch", "ready": False, "state": {
        "waiting": {"reason": reason, "message": "Back-off pulling image \"pytorch/pytorhc:2\""}}}]})
    assert (st.phase, st.gang_ready, st.gang_size) == ("starting", 1, 2)
    assert st.message.startswith(f"1/2 pods ready; pod j-worker-0: {reason}: ") and words in st.message
    assert 'pytorch/pytorhc:2' in st.message
