"""Runtime history on Kubernetes: gpujobs' own finished jobs (status.startTime to completionTime,
or their Complete/Failed condition's time) are the history of similar jobs, filed by the user
label, the job's name label and its LocalQueue, so that a running job of the same kind gets an
expected end from them rather than from its declared limit."""
from __future__ import annotations

from gpujobs.admission.gates import REQUEUE_BATCH_S
from gpujobs.backends.kubernetes.naming import LABEL_JOB, QUEUE_LABEL, USER_LABEL
from gpujobs.backends.kubernetes.status import kueue_model as f

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"


def iso(t):
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name, uid, start=None, end=None, failed=False, limit=3600):
    st: dict = {}
    if start is not None:
        st["startTime"] = iso(start)
    if end is not None and not failed:
        st["completionTime"] = iso(end)
    if end is not None and failed:
        st["conditions"] = [{"type": "Failed", "status": "True", "lastTransitionTime": iso(end)}]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-{uid}", "namespace": "team", "uid": uid,
                         "labels": {LABEL_JOB: name, USER_LABEL: "ann", QUEUE_LABEL: "lq"}},
            "spec": {"activeDeadlineSeconds": limit}, "status": st}


def workload(owner, gpus, created, admitted=None):
    conds = []
    st: dict = {"conditions": conds}
    if admitted is not None:
        conds += [{"type": t, "status": "True", "lastTransitionTime": iso(admitted)} for t in ("QuotaReserved", "Admitted")]
        st["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "flavors": {GPU: "default"}, "resourceUsage": {GPU: str(gpus)}}]}
    return {"metadata": {"name": f"wl-{owner['metadata']['name']}", "namespace": "team", "uid": f"w{owner['metadata']['uid']}",
                         "creationTimestamp": iso(created),
                         "ownerReferences": [{"controller": True, "name": owner["metadata"]["name"],
                                              "uid": owner["metadata"]["uid"], "kind": "Job"}]},
            "spec": {"queueName": "lq", "priority": 0, "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]}}}]},
            "status": st}


def objects(finished):
    cq = {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": "default", "resources": [{"name": GPU, "nominalQuota": 4}]}]}]}}
    lq = {"metadata": {"name": "lq", "namespace": "team"}, "spec": {"clusterQueue": "cq"}}
    run = job("train", "r1", start=NOW - 100)
    wait = job("eval", "p1")
    jobs = [*finished, run, wait]
    return f.KueueObjects("cluster", "team", cluster_queues=[cq], local_queues=[lq],
                          flavors=[{"metadata": {"name": "default"}, "spec": {}}],
                          workloads=[workload(run, 4, NOW - 200, admitted=NOW - 100), workload(wait, 4, NOW - 50)],
                          own_jobs={j["metadata"]["uid"]: j for j in jobs})


def test_finished_jobs_of_the_same_kind_give_a_running_job_its_expected_end():
    finished = [job("train", f"d{k}", start=NOW - 5000 + 1000 * k, end=NOW - 5000 + 1000 * k + rt, failed=k == 1)
                for k, rt in enumerate((590, 610, 600))]  # ~600 s each (one failed: it gave its quota back too)
    fc = f.forecasts(objects(finished), now=NOW)["team/eval-p1"]
    # the waiting job is parked (it does not fit); Kueue puts it back REQUEUE_BATCH_S after the end
    assert fc.expected_start == NOW - 100 + 600 + REQUEUE_BATCH_S
    assert fc.basis == "expected ends from history of similar jobs"
    h = f.history(objects(finished).own_jobs.values())
    assert h.runtime("ann", "train", "team/lq") == 600 and len(h) == 3


def test_without_finished_jobs_the_declared_limit_stays_the_basis():
    fc = f.forecasts(objects([]), now=NOW)["team/eval-p1"]
    assert fc.expected_start == NOW - 100 + 3600 + 30 + REQUEUE_BATCH_S
    assert fc.basis == "expected ends from declared limit + grace"
