"""Stories of a job's end by time or by Kueue (issue [real-kinds-2]): the operator's own
activeDeadlineSeconds fires before Kueue's max-exec timer (DeadlineExceeded, the job failed and
its quota released, not suspended for ever), and a watching gpujobs process keeps the logs of
pods about to be deleted (preemption, Kueue's timer, the operator's deadline), so ``logs()``
still shows the partial output and the traceback afterwards (status/log_keeper.py). The
simulated cluster deletes running pods gracefully, as the API server does (store.graceful)."""
from __future__ import annotations

import pytest
from tests.support import wait_for

import gpujobs
from gpujobs.handle import Job

pytestmark = pytest.mark.slow
WL = "kueue.x-k8s.io/v1beta2"


def _step_then_hang():
    import time as _t
    print("step 1 done", flush=True)
    _t.sleep(600)


def _workload(sim, job):
    name = job.id.split("/")[-1]
    return next(w for w in sim.store.list(WL, "Workload", "default")
                if w["metadata"]["ownerReferences"][0]["name"] == name)


def _trainjob(be, fn, max_runtime=None, priority=None):
    b = gpujobs.job(fn).ddp(nodes=1, gpus_per_node=1).queue("q")
    if max_runtime:
        b = b.max_runtime(max_runtime)
    if priority:
        b = b.priority(priority)
    return Job(be.submit(b.spec()), be)


def test_the_trainjobs_own_deadline_fires_before_kueues_timer_and_its_output_is_kept(make_cluster, monkeypatch):
    """max_runtime(12): activeDeadlineSeconds 12 and the max-exec label a margin later (here 4 s,
    300 s by default): the Trainer fails the TrainJob with DeadlineExceeded (counted from its
    resume, trainer@v2.3.0 reconcileDeadline) and deletes its JobSet; Kueue's timer (counted from
    admission, earlier) never fires, the Workload is Finished, not deactivated. The pods go with
    the JobSet; the watching process kept what they printed."""
    from gpujobs.backends.kubernetes.render import job as render_job
    monkeypatch.setattr(render_job, "MAX_EXEC_MARGIN_S", 4)
    sim, be = make_cluster(gpus=2)
    sim.controllers.kubelet.graceful_deletion = True
    job = _trainjob(be, _step_then_hang, max_runtime=12)
    st = job.wait(timeout=120)
    # the Trainer's DeadlineExceeded, said as the local agent says a run stopped at its limit
    assert st.phase == "failed" and st.reason == "time-limit", (st.phase, st.reason, st.message)
    assert st.message.startswith("stopped at its time limit: it ran ") and "max_runtime_s is 12;" in st.message
    wl = wait_for(lambda: (w := _workload(sim, job)) and any(
        c["type"] == "Finished" and c["status"] == "True" for c in w["status"]["conditions"]) and w, timeout=30)
    assert wl["spec"]["maximumExecutionTimeSeconds"] == 16 and wl["spec"]["active"] is True
    assert not any(c["type"] == "DeactivationTarget" for c in wl["status"]["conditions"])
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"), timeout=30)  # the JobSet's pods went
    text = wait_for(lambda: (t := "".join(job.logs())) and "step 1" in t and t, timeout=30)
    assert "[rank 0] step 1 done" in text and text.count("step 1 done") == 1, text  # kept once


def _train_until_stopped():
    import time as _t

    import gpujobs as g
    ctx = g.context()
    print("epoch 1 of 10", flush=True)
    while not ctx.should_stop():
        _t.sleep(0.05)
    raise RuntimeError("stopped during epoch 1")


def test_with_the_label_at_the_deadline_kueues_timer_wins_and_only_the_watcher_keeps_the_logs(make_cluster,
                                                                                              monkeypatch):
    """What the margin prevents: Kueue counts from admission, before the operator's start, so a
    label equal to activeDeadlineSeconds deactivates the Workload first (kueue@v0.19.2
    workload_controller.go reconcileMaxExecutionTime): the TrainJob is suspended, not failed, and
    its pods are deleted (SIGTERM: the rank raises). The watching process saw the deadline coming
    and kept what the pod printed, traceback included."""
    from gpujobs.backends.kubernetes.render import job as render_job
    from gpujobs.backends.kubernetes.render.podspec import deadline_s
    monkeypatch.setattr(render_job, "kueue_max_exec_s", lambda kind, s: deadline_s(s))
    sim, be = make_cluster(gpus=2)
    sim.controllers.kubelet.graceful_deletion = True
    job = _trainjob(be, _train_until_stopped, max_runtime=10)
    name = job.id.split("/")[-1]
    job.status()  # a watching process (status, wait, the lab panel)
    wl = wait_for(lambda: (w := _workload(sim, job)) and w["spec"].get("active") is False and w, timeout=90)
    assert wl["spec"]["maximumExecutionTimeSeconds"] == 10
    # Kueue's job reconciler suspends the TrainJob after it has deactivated the Workload
    tj = wait_for(lambda: (t := sim.store.get("trainer.kubeflow.org/v1alpha1", "TrainJob", name, "default"))
                  and t["spec"].get("suspend") is True and t, timeout=30)
    assert not any(c["type"] == "Failed" for c in (tj.get("status") or {}).get("conditions") or [])
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"), timeout=30)
    text = wait_for(lambda: (t := "".join(job.logs())) and "RuntimeError" in t and t, timeout=30)
    assert "[rank 0] epoch 1 of 10" in text and "RuntimeError: stopped during epoch 1" in text
    job.cancel()


def test_a_preempted_jobs_partial_output_and_traceback_are_kept(make_cluster):
    """Kueue preempts the low-priority TrainJob: Evicted/Preempted on its Workload, the job
    suspended, the operator deletes its pods (gracefully: SIGTERM, the rank raises). The watching
    process followed them from the eviction on, so once the pods are gone ``logs()`` still shows
    what the run printed, its traceback included."""
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    sim.controllers.kubelet.graceful_deletion = True
    low = _trainjob(be, _train_until_stopped, priority="low")
    wait_for(lambda: low.status().phase == "running", timeout=120)
    wait_for(lambda: "epoch 1 of 10" in "".join(low.logs()), timeout=120)
    uid = sim.store.list("v1", "Pod", "default")[0]["metadata"]["uid"]
    high = _trainjob(be, _step_then_hang, priority="high")
    wait_for(lambda: not any(p["metadata"]["uid"] == uid for p in sim.store.list("v1", "Pod", "default")),
             timeout=60)  # the first run's pod is gone, its log with it
    text = wait_for(lambda: (t := "".join(low.logs())) and "RuntimeError" in t and t, timeout=30)
    assert "[rank 0] epoch 1 of 10" in text
    assert "RuntimeError: stopped during epoch 1" in text and "Traceback" in text
    assert text.index("epoch 1 of 10") < text.index("RuntimeError") and text.count("epoch 1 of 10") == 1
    high.cancel()
    low.cancel()


def test_the_watcher_follows_the_pods_before_a_known_deadline_even_with_no_grace_period(make_cluster, monkeypatch):
    """Pods deleted at once (grace period 0, the simulator's default): neither a deletionTimestamp
    nor the Workload's eviction can be seen before they are gone. The max-exec deadline is known
    from admission: the watcher follows the pods from LEAD_S before it and keeps what they said."""
    from gpujobs.backends.kubernetes.render import job as render_job
    from gpujobs.backends.kubernetes.render.podspec import deadline_s
    monkeypatch.setattr(render_job, "kueue_max_exec_s", lambda kind, s: deadline_s(s))
    sim, be = make_cluster(gpus=2)
    job = _trainjob(be, _step_then_hang, max_runtime=15)
    job.status()  # a watching process
    wait_for(lambda: "step 1 done" in "".join(job.logs()), timeout=60)
    wait_for(lambda: (w := _workload(sim, job)) and w["spec"].get("active") is False, timeout=60)
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"), timeout=30)
    text = wait_for(lambda: (t := "".join(job.logs())) and "step 1" in t and t, timeout=30)
    assert "[rank 0] step 1 done" in text and text.count("step 1 done") == 1, text  # kept once
    job.cancel()
