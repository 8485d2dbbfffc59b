"""Progress, stalls, crash stacks and tracebacks on the simulated cluster: the pods run the
real bootstrap + runner; ``ctx.progress`` reports travel as GPUJOBS-PROGRESS pod-log lines."""
from __future__ import annotations

import time

import pytest
from tests.support import fails_on_rank_one, goes_quiet_then_moves, train, user_module, wait_for

import gpujobs
from gpujobs.errors import JobError
from gpujobs.handle import Job
from gpujobs.progress import PROGRESS_MARKER

pytestmark = pytest.mark.slow


def pod_job(be, fn, *args, nodes: int = 1, procs: int = 1, **env: str) -> Job:
    """``fn(*args)`` submitted as a PyTorchJob of ``nodes`` CPU pods x ``procs`` ranks (queue q)
    to the simulated cluster, with ``env`` in its pods."""
    b = gpujobs.job(fn, *args).ddp(nodes=nodes, gpus_per_node=0, procs_per_node=procs) \
        .kubernetes(kind="PyTorchJob").queue("q")
    return Job(be.submit((b.env(**env) if env else b).spec()), be)


def first_status(job: Job, pred, timeout: float, every: float = 0.3):
    """The job's first status that ``pred`` accepts, or its terminal one."""
    return wait_for(lambda: (lambda s: s if pred(s) or s.terminal else None)(job.status()),
                    timeout=timeout, every=every)


def test_progress_on_the_simulated_cluster(make_cluster):
    sim, be = make_cluster(bootstrap=True)
    job = pod_job(be, train, 60, 0.2, nodes=2, GPUJOBS_METRICS_INTERVAL="0.3", GPUJOBS_PROGRESS_INTERVAL="0.3")
    live = first_status(job, lambda s: s.progress is not None, timeout=120.0, every=0.2)
    assert not live.terminal, "the job ended before any progress was seen while it ran"
    assert live.progress.total == 60 and live.progress.step < 60 and "loss" in live.progress.metrics
    assert job.result(timeout=120) == 60
    final = job.status()
    assert final.phase == "succeeded" and final.progress.step == 60
    df = job.progress()
    assert len(df) >= 2 and df["step"].iloc[-1] == 60 and set(df["rank"]) == {0}
    assert PROGRESS_MARKER not in job.logs()  # status, not output


def test_stalled_rank_flagged_then_unflagged_on_the_cluster(make_cluster, monkeypatch):
    monkeypatch.setenv("GPUJOBS_STALL_FLOOR_S", "2")  # the client's setting on Kubernetes
    monkeypatch.setenv("GPUJOBS_STALL_FACTOR", "1")
    sim, be = make_cluster(bootstrap=True)
    job = pod_job(be, goes_quiet_then_moves, 7.0, 5.0, GPUJOBS_METRICS_INTERVAL="0.3",
                  GPUJOBS_PROGRESS_INTERVAL="0.2")
    flagged = first_status(job, lambda s: s.stalled_since is not None, timeout=90.0)
    assert flagged.phase == "running" and flagged.stalled_since is not None
    assert "rank 0" in flagged.extra["stall"]
    moving = first_status(job, lambda s: s.stalled_since is None, timeout=60.0)
    assert moving.phase == "running", "never unflagged while it ran"
    assert job.result(timeout=120) > 3


def crash_here():
    import ctypes
    ctypes.string_at(0)


def test_a_segfaulting_pod_rank_leaves_its_stack_in_the_pod_log(make_cluster):
    sim, be = make_cluster(bootstrap=True)
    job = pod_job(be, crash_here)
    with pytest.raises(JobError):  # killed by SIGSEGV: no exception of its own
        job.result(timeout=120)
    logs = job.logs()
    assert "Fatal Python error: Segmentation fault" in logs and "in crash_here" in logs, logs


def test_pod_traceback_names_the_users_file_and_line(make_cluster, tmp_path, monkeypatch):
    sim, be = make_cluster(bootstrap=True)
    with user_module(tmp_path, monkeypatch, "k8strain") as (mod, src):
        job = pod_job(be, mod.fit, 4)
        src.unlink()
        with pytest.raises(ValueError, match="loss is NaN") as info:
            job.result(timeout=120)
    tb = info.value.remote_traceback
    assert f'File "{src}", line 11, in step' in tb and 'raise ValueError(f"loss is NaN' in tb, tb


def test_pod_ranks_cause_comes_first_and_the_peers_noise_is_one_line(make_cluster):
    """As tests/local's test of the same name, with the ranks in a simulated pod: the failing rank's
    exception is raised, its peers' "connection closed" errors fold into one line."""
    sim, be = make_cluster(bootstrap=True)
    job = pod_job(be, fails_on_rank_one, procs=3)
    with pytest.raises(KeyError, match="label column missing") as info:
        job.result(timeout=180)
    exc = info.value
    assert exc.rank == 1
    notes = "\n".join(getattr(exc, "__notes__", []))
    assert "raised in rank 1" in notes, notes
    folded = [n for n in notes.splitlines() if "because a peer went away" in n]
    assert len(folded) <= 1, notes
    if folded:
        assert "then failed" in folded[0]
    logs0 = job.logs(rank=0)
    assert "Traceback" not in logs0, logs0  # the peer's collateral error: one line, no traceback
    assert "Traceback" in job.logs(rank=1) and "label column missing" in job.logs(rank=1)


def test_trainjob_trainer_status_is_read_as_progress():
    """status.trainerStatus of the TrainJob CRD (trainer.kubeflow.org/v1alpha1, fields from
    /work/shared/crds/trainer/trainer.kubeflow.org_trainjobs.yaml)."""
    from gpujobs.backends.kubernetes.status.trainer_status import trainer_progress, with_trainer_status
    from gpujobs.status import JobStatus
    job = {"kind": "TrainJob", "status": {"trainerStatus": {
        "progressPercentage": 40, "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "phase", "value": "eval"}],
        "lastUpdatedTime": "2026-12-01T10:00:00Z"}}}
    p = trainer_progress(job)
    assert p.step == 40 and p.total == 100 and p.fraction == 0.4
    assert p.metrics == {"loss": 0.25, "phase": "eval"}
    assert p.expected_end - p.updated == 120
    st = with_trainer_status(JobStatus(job_id="ns/j", phase="running"), job)
    assert st.progress == p
    assert with_trainer_status(JobStatus(job_id="ns/j", phase="running"),
                               {"kind": "TrainJob", "status": {}}).progress is None
    assert trainer_progress({"kind": "PyTorchJob"}) is None


def sleeping_in_a_named_function(seconds):
    import time as t
    t.sleep(seconds)


def sleeper():
    sleeping_in_a_named_function(120)


def test_stacks_of_a_three_rank_job_on_the_cluster(make_cluster):
    """The request goes in as a pod annotation (downwardAPI volume), the answer comes out as
    an HMAC-sealed GPUJOBS-STACKS pod-log line; no exec."""
    sim, be = make_cluster(bootstrap=True)
    job = pod_job(be, sleeper, nodes=3)
    try:
        wait_for(lambda: job.status().phase == "running" or None, timeout=90.0, every=0.2)
        stacks: dict = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # ranks start their watcher as they start
            t0 = time.monotonic()
            stacks = job.stacks(timeout=10)
            took = time.monotonic() - t0
            if len(stacks) == 3 and all("sleeping_in_a_named_function" in s for s in stacks.values()):
                break
            time.sleep(0.3)
        assert sorted(stacks) == [0, 1, 2], stacks
        for rank, text in stacks.items():
            assert "sleeping_in_a_named_function" in text and "in sleeper" in text, (rank, text)
            assert "watch_stack_requests" not in text  # the answering thread is left out
        assert took < 10.0
        assert list(job.stacks(rank=2, timeout=10)) == [2]
        from gpujobs.runner import STACKS_MARKER
        assert STACKS_MARKER not in job.logs()
        assert job.status().phase == "running"
    finally:
        job.cancel()


def test_forged_stack_answers_are_dropped():
    from gpujobs.backends.kubernetes.control.stack_dump import answers
    from gpujobs.payload import new_key, seal
    import base64
    key, other = new_key(), new_key()
    good = seal({"nonce": "n1", "rank": 0, "stacks": "Thread 0x1\n  File x"}, key)
    forged = seal({"nonce": "n1", "rank": 1, "stacks": "evil"}, other)
    replay = seal({"nonce": "n0", "rank": 2, "stacks": "old"}, key)
    lines = [f"GPUJOBS-STACKS 0 n1 {base64.b64encode(good).decode()}",
             f"GPUJOBS-STACKS 1 n1 {base64.b64encode(forged).decode()}",
             f"GPUJOBS-STACKS 2 n1 {base64.b64encode(replay).decode()}",  # body's nonce differs
             "GPUJOBS-STACKS 3 n1 not-base64!!", "hello"]
    assert answers(lines, "n1", key) == {0: "Thread 0x1\n  File x"}
