"""kind='BatchJob' (a plain batch/v1 Indexed Job) end to end on the simulated cluster: Kueue's
batch/job integration admits it, the simulated Job controller (gpujobs_sim/batch_job.py) makes
one pod per index with JOB_COMPLETION_INDEX as the node rank, and gpujobs reads the Job's own
conditions; one failed rank fails the gang."""
from __future__ import annotations

import re

import pytest
from tests.support import wait_for

import gpujobs
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def _rank():
    import os
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _fail_on_rank_1():
    import os
    import time
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 broke")
    time.sleep(60)


def _sleepy():
    import time
    time.sleep(60)


def _started_then_sleepy():
    import time
    print("function started", flush=True)
    time.sleep(60)


def _workload(sim, name):
    wls = [w for w in sim.store.list("kueue.x-k8s.io/v1beta2", "Workload", "default")
           if w["metadata"]["ownerReferences"][0]["name"] == name]
    return wls[0] if wls else None


def _cond(obj, t):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == t), {})


def test_a_two_node_batch_job_is_admitted_runs_each_index_and_succeeds(make_cluster):
    sim, be = make_cluster(gpus=2)
    spec = gpujobs.job(_rank).ddp(nodes=2, gpus_per_node=1).kubernetes(kind="BatchJob").queue("q").spec()
    job = Job(be.submit(spec), be)
    name = job.id.split("/")[-1]
    svc = sim.store.get("v1", "Service", name, "default")
    assert svc is not None and svc["spec"]["clusterIP"] == "None"
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "Job"
    wait_for(lambda: _workload(sim, name) is not None, timeout=30)
    wl = _workload(sim, name)
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("main", 2)]
    assert job.result(timeout=120) == (0, 2)  # rank 0's value; WORLD_SIZE 2 in each rank
    bjob = sim.store.get("batch/v1", "Job", name, "default")
    order = [c["type"] for c in bjob["status"]["conditions"] if c["status"] == "True"]
    assert order.index("SuccessCriteriaMet") < order.index("Complete")
    assert _cond(bjob, "Suspended")["status"] == "False" and _cond(bjob, "Suspended")["reason"] == "JobResumed"
    assert bjob["status"]["succeeded"] == 2 and bjob["status"]["completedIndexes"] == "0,1"
    assert _cond(_workload(sim, name), "Admitted")["status"] == "True"
    wait_for(lambda: _cond(_workload(sim, name), "Finished").get("status") == "True", timeout=30)
    pods = [p for p in sim.store.list("v1", "Pod", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name]
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    assert {p["spec"]["hostname"] for p in pods} == {f"{name}-0", f"{name}-1"}
    assert {p["spec"]["subdomain"] for p in pods} == {name}
    st = job.status()
    assert st.phase == "succeeded" and st.gang_size == 2


def test_one_failed_rank_fails_the_batch_job_and_stops_the_other(make_cluster):
    sim, be = make_cluster(gpus=2)
    spec = gpujobs.job(_fail_on_rank_1).ddp(nodes=2, gpus_per_node=1).kubernetes(kind="BatchJob").queue("q").spec()
    job = Job(be.submit(spec), be)
    name = job.id.split("/")[-1]
    wait_for(lambda: job.status().phase == "failed", timeout=120)
    bjob = sim.store.get("batch/v1", "Job", name, "default")
    failed = _cond(bjob, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "PodFailurePolicy"
    assert re.fullmatch(rf"Container node for pod default/{name}-1-\w+ failed with exit code [1-9]\d* matching "
                        "FailJob rule at index 1", failed["message"]), failed["message"]
    assert _cond(bjob, "FailureTarget")["status"] == "True"
    wait_for(lambda: not [p for p in sim.store.list("v1", "Pod", "default")
                          if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name
                          and p["status"].get("phase") in ("Pending", "Running")], timeout=60)
    with pytest.raises(ValueError, match="rank 1 broke"):
        job.result(timeout=30)


def test_the_simulated_job_controller_creates_no_pods_while_suspended(make_cluster):
    """Kueue holds the Job suspended while the quota is taken: the Job controller makes no pods."""
    sim, be = make_cluster(gpus=2)
    b = gpujobs.job(_sleepy).ddp(nodes=2, gpus_per_node=1).kubernetes(kind="BatchJob").queue("q")
    first = Job(be.submit(b.spec()), be)
    wait_for(lambda: first.status().phase == "running", timeout=90)
    job = Job(be.submit(b.spec()), be)
    name = job.id.split("/")[-1]
    wait_for(lambda: _workload(sim, name) is not None, timeout=30)
    wait_for(lambda: _cond(sim.store.get("batch/v1", "Job", name, "default"), "Suspended").get("status") == "True",
             timeout=30)
    bjob = sim.store.get("batch/v1", "Job", name, "default")
    assert bjob["spec"]["suspend"] is True and _cond(bjob, "Suspended")["reason"] == "JobSuspended"
    assert not [p for p in sim.store.list("v1", "Pod", "default")
                if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name]
    assert job.status().phase == "queued"
    job.cancel()
    first.cancel()


def _until_stopped():
    import time
    import gpujobs as g
    ctx = g.context()
    print("function started", flush=True)
    while not ctx.should_stop():
        time.sleep(0.05)
    raise RuntimeError("stopped before the end")  # no checkpoint: the run goes, the job runs again


@pytest.mark.parametrize("fn", [_until_stopped, _started_then_sleepy], ids=["exits-on-the-sigterm", "ignores-the-stop"])
def test_a_preempted_batch_job_is_requeued_not_failed(make_cluster, fn):
    """Kueue preempts the low job: its Job is suspended and its pods deleted. The Job controller's
    podFailurePolicy judges those pods too while they are there (kubernetes@v1.37.2
    getFailJobMessage, as the simulated one now does), so their exit codes must not match the
    FailJob rule. Ranks that raise on the SIGTERM exited 1, which failed the Job (seen on the real
    control plane); a function that never asks ``should_stop()`` was SIGKILLed at the end of the
    pod's grace period, and its 137 failed it too. Now a stopped rank exits 143 (STOPPED_EXIT), the
    latter shortly before its grace period ends (``RankEnv.grace_s``), which the policy ignores:
    the job is requeued and waits for its quota."""
    sim, be = make_cluster(gpus=2, priorities={"low": 100, "high": 1000})
    kubelet = sim.controllers.kubelet
    kubelet.graceful_deletion = True  # the pods stay until their ranks have exited
    kubelet.grace_s = 30.0  # the pod's own grace period decides when the SIGKILL comes: 4 s below
    # (the ranks exit 143 from 2.7 s, a margin for a loaded machine)
    b = gpujobs.job(fn).ddp(nodes=2, gpus_per_node=1).kubernetes(kind="BatchJob").queue("q")
    low = Job(be.submit(b.priority("low").options(grace_period_s=4).spec()), be)
    wait_for(lambda: "function started" in low.logs(), timeout=90)  # its SIGTERM handler is in place
    high = Job(be.submit(gpujobs.job(_sleepy).ddp(nodes=2, gpus_per_node=1).kubernetes(kind="BatchJob")
                         .queue("q").priority("high").spec()), be)
    wait_for(lambda: high.status().phase == "running", timeout=90)
    name = low.id.split("/")[-1]
    wait_for(lambda: not [p for p in sim.store.list("v1", "Pod", "default")  # its ranks have ended
                          if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name],
             timeout=60)
    bjob = sim.store.get("batch/v1", "Job", name, "default")
    assert not _cond(bjob, "FailureTarget") and bjob["spec"]["suspend"] is True, bjob["status"]
    st = low.status()
    assert st.phase in ("queued", "preempted") and "preempted" in [e.kind for e in st.events], st
    high.cancel()
    low.cancel()
