"""The RayJob's submitter Job and a dropped `ray job logs --follow` (issue [real-kinds-2]).

KubeRay's submitter Job gets backoffLimit 2 unless spec.submitterConfig.backoffLimit is set
(kuberay@v1.7.0 rayjob_controller.go createNewK8sJob); a submitter pod whose follow drops fails,
and the Job controller starts another, which finds the Ray job submitted and follows its log again
from the start (common/job.go BuildJobSubmitCommand): ``logs()`` read both pods, the driver's
output twice. gpujobs renders backoffLimit 0: one submitter pod, the output once; the submitter
Job then fails, so KubeRay reports the RayJob Failed with reason SubmissionFailed although the Ray
job succeeded (checkSubmitterAndUpdateStatusIfNeeded), which this story shows too.
"""
from __future__ import annotations

import pytest
from tests.support import wait_for

import gpujobs
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def _driver(x):
    print("hello from the driver", flush=True)
    return x * 2


def _submitters(sim):
    return [p for p in sim.store.list("v1", "Pod", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")]


def _ray_job(be):
    return Job(be.submit(gpujobs.job(_driver, 21).ray(workers=1, gpus_per_worker=1).queue("q").spec()), be)


def test_a_dropped_follow_shows_the_drivers_output_once(make_cluster):
    sim, be = make_cluster(gpus=2)
    sim.controllers.kubelet.ray_follow_drops = 1
    job = _ray_job(be)
    st = wait_for(lambda: (s := job.status()).terminal and s, timeout=300, every=0.2)
    out = "".join(job.logs())
    assert out.count("hello from the driver") == 1, out
    assert len(_submitters(sim)) == 1
    assert st.phase == "failed" and st.reason == "SubmissionFailed"  # KubeRay's word for it


def test_without_gpujobs_backoff_limit_the_retried_submitter_doubles_the_output(make_cluster):
    """The same drop with KubeRay's default backoffLimit (submitterConfig left out, as before
    gpujobs set it): a second submitter pod, the driver's lines twice in ``logs()``."""
    sim, be = make_cluster(gpus=2)
    sim.controllers.kubelet.ray_follow_drops = 1
    admit = sim.store.admission

    def without_submitter_config(res, new, old):
        if res.kind == "RayJob" and old is None:
            new["spec"].pop("submitterConfig", None)
        if admit is not None:
            admit(res, new, old)
    sim.store.admission = without_submitter_config
    job = _ray_job(be)
    assert job.result(timeout=300) == 42
    assert len(_submitters(sim)) == 2
    assert "".join(job.logs()).count("hello from the driver") == 2
