"""Kueue's maximum execution time on the real Kueue (issue [real-kinds-2]): the label gpujobs
renders (the job's own deadline plus a margin) becomes the Workload's
``maximumExecutionTimeSeconds``, and when it is up real Kueue deactivates the Workload and
suspends the job, as the simulated Kueue (gpujobs_sim/kueue.py) does. No operator runs here, so
the job's own deadline never fires: the margin is what keeps it first on a cluster."""
from __future__ import annotations

from gpujobs.backends.kubernetes import naming

from .kube import cond, is_true, job_obj, spec_of, suspended, wait_for, workload_of


def test_real_kueue_reads_the_margin_label_into_the_workload(controlplane, backend, monkeypatch):
    import dataclasses
    controlplane.require_kueue()
    spec = dataclasses.replace(spec_of("PyTorchJob"), max_runtime_s=3600)
    job_id = backend.submit(spec)
    _, name = naming.parse_job_id(job_id)
    api = backend.api_client
    try:
        wl = wait_for(lambda: workload_of(api, "PyTorchJob", name), 60, "the Workload")
        assert wl["spec"]["maximumExecutionTimeSeconds"] == 3600 + 360  # 10 % (more than 300 s) after
        assert job_obj(api, "PyTorchJob", name)["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    finally:
        backend.cancel(job_id)


def test_real_kueue_deactivates_at_the_maximum_execution_time_and_suspends_the_job(controlplane, backend,
                                                                                  monkeypatch):
    """The label shortened to 3 s: once admitted for 3 s, real Kueue sets spec.active false,
    Evicted (Deactivated) and suspends the job; gpujobs reports it failed with Kueue's reason."""
    import dataclasses

    from gpujobs.backends.kubernetes.render import job as render_job
    controlplane.require_kueue()
    monkeypatch.setattr(render_job, "kueue_max_exec_s", lambda kind, s: 3)
    spec = dataclasses.replace(spec_of("PyTorchJob"), max_runtime_s=2)
    job_id = backend.submit(spec)
    _, name = naming.parse_job_id(job_id)
    api = backend.api_client
    try:
        wait_for(lambda: is_true(workload_of(api, "PyTorchJob", name), "Admitted"), 60, "admitted")
        wl = wait_for(lambda: (w := workload_of(api, "PyTorchJob", name)) and w["spec"].get("active") is False
                      and w, 60, "deactivated by the max-exec timer")
        assert wl["spec"]["maximumExecutionTimeSeconds"] == 3
        ev = wait_for(lambda: cond(workload_of(api, "PyTorchJob", name), "Evicted"), 30, "Evicted")
        assert ev["status"] == "True" and "Deactivated" in ev["reason"], ev
        wait_for(lambda: suspended("PyTorchJob", job_obj(api, "PyTorchJob", name)), 30, "the job suspended")
        st = wait_for(lambda: (s := backend.status(job_id)).phase == "failed" and s, 30, "gpujobs to say so")
        assert "maximum execution time" in st.message or "MaximumExecutionTime" in st.reason + st.message, st
    finally:
        backend.cancel(job_id)
