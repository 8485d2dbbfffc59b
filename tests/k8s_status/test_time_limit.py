"""A run stopped at its max_runtime_s says so in the same words on both backends: on Kubernetes
the job's own activeDeadlineSeconds (DeadlineExceeded, from the Job controller or the operator)
becomes reason ``time-limit`` and the local agent's message with the fix."""
from __future__ import annotations

from gpujobs.backends.kubernetes.status import mapping as sm
from gpujobs.status import TIME_LIMIT, time_limit_message


def _cond(t, reason, at="2026-12-05T00:00:14Z"):
    return {"type": t, "status": "True", "reason": reason, "message": "Job was active longer than specified deadline",
            "lastTransitionTime": at}


def test_a_batch_jobs_deadline_exceeded_is_the_time_limit_with_its_fix():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "uid": "u",
                                                                 "creationTimestamp": "2026-12-05T00:00:00Z"},
           "spec": {"activeDeadlineSeconds": 4, "parallelism": 2, "completions": 2},
           "status": {"startTime": "2026-12-05T00:00:10Z", "conditions": [_cond("FailureTarget", "DeadlineExceeded")]}}
    st = sm.job_status("ml/j", job)
    assert (st.phase, st.reason) == ("failed", TIME_LIMIT)
    assert st.message == time_limit_message(4.0, 4.0)
    assert st.message == ("stopped at its time limit: it ran 4 s, max_runtime_s is 4; for a longer run submit "
                          "with .max_runtime(SECONDS) (CLI: --time SECONDS)")


def test_a_pytorchjobs_run_policy_deadline_gives_the_limit_too():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p", "uid": "u",
                                                                               "creationTimestamp": "2026-12-05T00:00:00Z"},
           "spec": {"runPolicy": {"activeDeadlineSeconds": 60},
                    "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
           "status": {"startTime": "2026-12-05T00:00:10Z",
                      "conditions": [_cond("Failed", "DeadlineExceeded", "2026-12-05T00:01:10Z")]}}
    st = sm.job_status("ml/p", job)
    assert (st.phase, st.reason) == ("failed", TIME_LIMIT), st
    assert "max_runtime_s is 60;" in st.message


def test_other_failures_keep_their_own_reason():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "uid": "u"},
           "spec": {"activeDeadlineSeconds": 4},
           "status": {"conditions": [_cond("Failed", "PodFailurePolicy")]}}
    assert sm.job_status("ml/j", job).reason == "PodFailurePolicy"
