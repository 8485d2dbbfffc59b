"""Jobs that run, on the real control plane: the real scheduler binds their pods to Node
``realcp-node`` (tests/realcp/node.py: gpujobs_sim's kubelet on the real API server), the real Job
controller and Kueue see them end, and gpujobs reads the end, the result and the logs from the
real objects and the real ``pods/log`` proxy."""
from __future__ import annotations

import contextlib
import dataclasses

import pytest

import gpujobs
from gpujobs.backends.kubernetes import naming

from .conftest import NS, QUEUE
from .kube import cond, is_true, job_obj, spec_of, wait_for, workload_of, workloads_owned_by

pytestmark = pytest.mark.slow


def double(x):
    return 2 * x


def fails(x):
    raise ValueError(f"bad input {x}")


def sleeps(seconds):
    import time
    time.sleep(seconds)
    return seconds


def runs_for(seconds):
    import time
    import gpujobs as g
    ctx = g.context()
    end = time.time() + seconds
    while time.time() < end:
        if ctx.should_stop():  # preempted: it saves for a while, then goes; it runs again once readmitted
            time.sleep(2)  # within the node's grace period (5 s): the pod exits 143 from 3.3 s
            raise SystemExit(143)
        time.sleep(0.1)
    return seconds


def ignores_the_stop(seconds):
    import time
    print("started", flush=True)
    end = time.time() + seconds
    while time.time() < end:  # never asks should_stop(): the kubelet's SIGKILL would end it
        time.sleep(0.1)
    return seconds


def talks(n):
    import time
    for i in range(n):
        print(f"line {i}", flush=True)
        time.sleep(0.5)
    return n


def _ddp(fn, *args, gpus=1, priority=None):
    b = gpujobs.job(fn, *args).ddp(nodes=2, gpus_per_node=gpus).options(kind="BatchJob").queue(QUEUE)
    return (b.priority(priority) if priority else b).spec()


@contextlib.contextmanager
def _submitted(backend, spec):
    """(job id, its Job's name) of ``spec`` submitted; cancelled after, and gone."""
    job_id = backend.submit(spec)
    name = naming.parse_job_id(job_id)[1]
    try:
        yield job_id, name
    finally:
        backend.cancel(job_id)
        api = backend.api_client  # its Workload too: one left pending is ahead of the next test's jobs
        wait_for(lambda: job_obj(api, "BatchJob", name) is None and not workloads_owned_by(api, name), 60,
                 f"{job_id} and its Workload deleted")


def _ended(backend, job_id, timeout=120):
    return wait_for(lambda: (s := backend.status(job_id)).phase in ("succeeded", "failed") and s, timeout,
                    f"{job_id} to end")


def _pods(backend, name):
    from kubernetes import client
    return client.CoreV1Api(backend.api_client).list_namespaced_pod(
        NS, label_selector=f"batch.kubernetes.io/job-name={name}").items


def test_a_batch_job_runs_to_its_result_on_the_real_node(controlplane, node, backend):
    controlplane.require_kueue()
    api = backend.api_client
    with _submitted(backend, spec_of("BatchJob")) as (job_id, name):
        st = _ended(backend, job_id)
        assert st.phase == "succeeded", st
        assert gpujobs.Job(job_id, backend).result(timeout=30) == 42  # rank 0's result line, through pods/log
        assert all("bootstrap.py" in " ".join(p.args) for p in node.kubelet._all_procs)  # the pods' own command
        job = job_obj(api, "BatchJob", name)
        assert is_true(job, "Complete") and job["status"]["succeeded"] == 2  # the real Job controller's
        assert is_true(workload_of(api, "BatchJob", name), "Finished")  # Kueue's
        assert {p.spec.node_name for p in _pods(backend, name)} == {"realcp-node"}  # bound by the real scheduler


def test_a_failing_function_fails_the_job_with_its_error(controlplane, node, backend):
    controlplane.require_kueue()
    with _submitted(backend, _ddp(fails, 7)) as (job_id, name):
        assert _ended(backend, job_id).phase == "failed"
        with pytest.raises(Exception, match="bad input 7"):  # the remote error, from rank 0's log
            gpujobs.Job(job_id, backend).result(timeout=30)
        assert "bad input 7" in "".join(backend.logs(job_id, rank=0))
        assert is_true(job_obj(backend.api_client, "BatchJob", name), "Failed")


def test_cancel_stops_running_pods_and_the_node_finishes_their_deletion(controlplane, node, backend):
    controlplane.require_kueue()
    with _submitted(backend, _ddp(sleeps, 120)) as (job_id, name):
        wait_for(lambda: backend.status(job_id).phase == "running", 120, f"{job_id} running")
        assert [p.status.phase for p in _pods(backend, name)] == ["Running"] * 2
        backend.cancel(job_id)
        wait_for(lambda: not _pods(backend, name), 60, "its pods gone")
    assert not [p for p in node.kubelet._all_procs if p.poll() is None]  # no process left on the node


def test_the_job_controller_stops_a_run_at_its_limit_and_gpujobs_says_why(controlplane, node, backend):
    """max_runtime_s is the Job's activeDeadlineSeconds: the real Job controller fails the Job
    (FailureTarget, then Failed: DeadlineExceeded) and deletes its running pods, long before
    Kueue's margin; gpujobs says it as the local agent does (reason ``time-limit``, the fix)."""
    controlplane.require_kueue()
    with _submitted(backend, dataclasses.replace(_ddp(sleeps, 120), max_runtime_s=4)) as (job_id, name):
        st = _ended(backend, job_id, 90)
        # gpujobs reads the end from FailureTarget, before the pods have stopped and Failed comes
        assert (st.phase, st.reason) == ("failed", "time-limit"), st
        assert "max_runtime_s is 4;" in st.message and ".max_runtime(SECONDS)" in st.message, st
        wait_for(lambda: not [p for p in _pods(backend, name) if p.status.phase == "Running"], 60,
                 "its running pods stopped")
        failed = wait_for(lambda: cond(job_obj(backend.api_client, "BatchJob", name), "Failed"), 60, "the Job Failed")
        assert failed["reason"] == "DeadlineExceeded", failed


def test_a_running_job_preempted_by_a_higher_priority_one_runs_again_and_ends(controlplane, node, backend):
    """Real Kueue preempts the running low job for the high one (cq-a: withinClusterQueue
    LowerPriority, 8 GPUs, each job all 8): it suspends the Job, the real Job controller deletes
    its pods, the node stops them; the high job runs and ends; the low one is readmitted, runs
    again and returns its result. gpujobs shows the preemption in the low job's timeline."""
    controlplane.require_kueue()
    with _submitted(backend, _ddp(runs_for, 8, gpus=4, priority="low")) as (low, _):
        wait_for(lambda: backend.status(low).phase == "running", 120, "the low job running")
        with _submitted(backend, _ddp(double, 21, gpus=4, priority="high")) as (high, _):
            assert gpujobs.Job(high, backend).result(timeout=120) == 42
            assert gpujobs.Job(low, backend).result(timeout=180) == 8
            st, hi = backend.status(low), backend.status(high)
            kinds = [e.kind for e in st.events]
            assert "preempted" in kinds and kinds.index("preempted") < kinds.index("finished"), st.events
            assert st.phase == "succeeded" and st.restarts >= 1, st
            assert hi.started_at is not None and st.finished_at is not None and hi.started_at < st.finished_at


def test_a_preempted_job_whose_function_ignores_the_stop_is_requeued_not_failed(controlplane, node, backend):
    """As above, but the low job's function never asks should_stop(): it was SIGKILLed at the
    end of its grace period (4 s; the node caps at 5), and the SIGKILL's 137 matched the
    BatchJob's FailJob rule in the real Job controller, which judges the pods it deleted on
    Kueue's suspend too. Its pods now exit 143 shortly before the SIGKILL: the Job is requeued,
    runs again and ends."""
    controlplane.require_kueue()
    low_spec = dataclasses.replace(_ddp(ignores_the_stop, 8, gpus=4, priority="low"), grace_period_s=4)
    with _submitted(backend, low_spec) as (low, name):
        wait_for(lambda: "started" in "".join(backend.logs(low, rank=0)), 120, "the low job's function")
        with _submitted(backend, _ddp(double, 21, gpus=4, priority="high")) as (high, _):
            assert gpujobs.Job(high, backend).result(timeout=120) == 42
            assert gpujobs.Job(low, backend).result(timeout=180) == 8
            st = backend.status(low)
            assert st.phase == "succeeded" and st.restarts >= 1 and "preempted" in [e.kind for e in st.events], st
            assert not cond(job_obj(backend.api_client, "BatchJob", name), "FailureTarget")


def test_logs_follow_a_running_job_and_stacks_come_back_through_the_real_api(controlplane, node, backend):
    """`logs(follow=True)` streams rank 0's lines through the real pods/log proxy while it runs,
    and `stacks()` asks through a pod annotation (a merge patch; the node projects it into the
    downwardAPI file the runner watches) and reads the answer from the log."""
    controlplane.require_kueue()
    with _submitted(backend, _ddp(talks, 60)) as (job_id, _):
        wait_for(lambda: backend.status(job_id).phase == "running", 120, f"{job_id} running")
        seen = []
        for line in backend.logs(job_id, rank=0, follow=True):
            seen.append(line)
            if sum("line " in x for x in seen) >= 3:
                break
        assert [x.split("line ")[1].strip() for x in seen if "line " in x][:3] == ["0", "1", "2"], seen
        stacks = backend.stacks(job_id, timeout=30)
        assert sorted(stacks) == [0, 1] and all("talks" in s for s in stacks.values()), stacks


@pytest.mark.parametrize("node", [2], indirect=True)
def test_pods_the_real_scheduler_cannot_place_are_named_with_its_reason(controlplane, node, backend):
    """Quota is not capacity: Kueue admits 2 x 4 GPUs (cq-a has 8), the only node has 2, so the
    real scheduler leaves the pods Pending (PodScheduled False, Unschedulable) and gpujobs says
    which pod and the scheduler's own words instead of "starting 0/2"."""
    controlplane.require_kueue()
    with _submitted(backend, _ddp(double, 21, gpus=4)) as (job_id, name):
        st = wait_for(lambda: "unschedulable" in (s := backend.status(job_id)).message and s, 90,
                      "gpujobs to name the unschedulable pod")
        assert st.phase in ("admitted", "starting"), st
        assert f"pod {name}-" in st.message and "Insufficient nvidia.com/gpu" in st.message, st.message
