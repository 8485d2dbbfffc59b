"""The simulated Job controller's counts (gpujobs_sim/batch_job.py), on hand-written objects with
no kubelet running: which finished pods count (kubernetes@v1.37.2 pkg/controller/job/
job_controller.go getValidPodsWithFilter: a pod whose tracking finalizer was removed, as
deleteJobPods does on a suspend, is neither a success nor a failure of the Job)."""
from __future__ import annotations

from gpujobs_sim import SimCluster
from gpujobs_sim import batch_job
from gpujobs_sim.pod_templates import OWNER


def _pod(sim, job: dict, index: int, phase: str, uncounted: bool) -> None:
    md = job["metadata"]
    ann = {batch_job.INDEX: str(index), **({batch_job.UNCOUNTED: "true"} if uncounted else {})}
    sim.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{md['name']}-{index}-x", "namespace": md["namespace"], "annotations": ann,
        "labels": {OWNER: md["uid"], batch_job.INDEX: str(index)}},
        "spec": {"containers": [{"name": "node", "image": "x"}]}})
    sim.store.patch("v1", "Pod", f"{md['name']}-{index}-x", md["namespace"],
                    {"status": {"phase": phase}}, subresource="status")


def test_a_pod_that_succeeded_after_its_tracking_finalizer_went_does_not_complete_its_index():
    """A function that returned during its grace period after Kueue's suspend: its pod ends
    Succeeded, but the Job controller took its finalizer off before deleting it, so the index is
    not completed; once resumed the Job runs it again (the rank replays the kept outcome)."""
    sim = SimCluster(gpus=None, cpus=None)
    job = sim.store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b", "namespace": "default"},
                            "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                                     "template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}})
    _pod(sim, job, 0, "Succeeded", uncounted=True)
    _pod(sim, job, 1, "Succeeded", uncounted=False)
    batch_job.operate(sim.controllers, sim.store.get("batch/v1", "Job", "b", "default"))
    after = sim.store.get("batch/v1", "Job", "b", "default")
    assert not batch_job.is_true(after, "Complete"), after["status"]
    assert after["status"]["succeeded"] == 1 and after["status"].get("completedIndexes") == "1"
    new = [p["metadata"]["annotations"][batch_job.INDEX] for p in sim.store.list("v1", "Pod", "default")
           if (p.get("status") or {}).get("phase") != "Succeeded"]
    assert new == ["0"]  # index 0 runs again
