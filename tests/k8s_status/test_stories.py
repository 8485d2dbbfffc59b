"""Whole stories over real HTTP: submit through KubernetesBackend, the simulated Kueue /
operators / kubelet run the real runner, status comes from watches of the real objects."""
from __future__ import annotations


import pytest
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.handle import Job

pytestmark = pytest.mark.slow


def sleepy(seconds, value):
    import time as _t
    _t.sleep(seconds)
    return value


def submit(be, fn, *args, prio=None, name=None, ranks=1):
    b = gpujobs.job(fn, *args).mpi(ranks=ranks, gpus_per_rank=1).image(MPI_IMAGE).queue("q")
    if prio:
        b = b.priority(prio)
    if name:
        b = b.name(name)
    return Job(be.submit(b.spec()), be)


def test_second_job_waits_at_position_1_then_runs(make_cluster):
    sim, be = make_cluster(gpus=1)
    a = submit(be, sleepy, 2.0, "a")
    wait_for(lambda: a.status().phase == "running")
    b = submit(be, sleepy, 0.1, "b")
    st = wait_for(lambda: (s := b.status()).queue_position == 1 and s)
    assert st.phase == "queued" and st.position_available and "1st in q" in st.summary()
    assert a.status().queue_position is None
    assert a.result(timeout=30) == "a"
    assert b.result(timeout=30) == "b"
    assert b.status().phase == "succeeded"


def test_preempted_then_queued_again(make_cluster):
    sim, be = make_cluster(gpus=1, priorities={"low": 100, "high": 1000})
    low = submit(be, sleepy, 60, "low", prio="low")
    phases = []
    be.subscribe(low.id, lambda s: phases.append(s.phase))
    wait_for(lambda: low.status().phase == "running")
    high = submit(be, sleepy, 0.5, "high", prio="high")
    wait_for(lambda: "preempted" in phases)
    wait_for(lambda: phases[-1] == "queued" and phases.index("preempted") < len(phases) - 1)
    assert high.result(timeout=30) == "high"
    assert low.status().restarts >= 1
    wait_for(lambda: low.status().phase == "running")  # readmitted once the quota is free
    ns, name = low.id.split("/")
    wl = next(o for o in sim.store.list("kueue.x-k8s.io/v1beta2", "Workload", ns)
              if any(r.get("name") == name for r in o["metadata"].get("ownerReferences") or []))
    conds = {c["type"]: c for c in wl["status"]["conditions"]}
    for t in ("Evicted", "Preempted"):  # as Kueue's SetQuotaReservation leaves them
        assert (conds[t]["status"], conds[t]["reason"]) == ("False", "QuotaReserved")
        assert conds[t]["message"].startswith("Previously: ")
    assert (conds["Requeued"]["status"], conds["Requeued"]["reason"]) == ("True", "Preempted")
    low.cancel()
    assert wait_for(lambda: low.status().phase == "cancelled")


def test_failed_rank_exception_is_reraised(make_cluster):
    sim, be = make_cluster(gpus=2)

    def boom():
        raise ValueError("bad input in rank")

    job = submit(be, boom)
    with pytest.raises(ValueError, match="bad input in rank") as info:
        job.result(timeout=30)
    assert info.value.rank == 0
    assert job.status().phase == "failed"


def test_rayjob_succeeds_with_result(make_cluster):
    sim, be = make_cluster(gpus=2)

    def ray_fn(x):
        import gpujobs as g
        return (x * 2, g.context().framework)

    job = Job(be.submit(gpujobs.job(ray_fn, 21).ray(workers=1, gpus_per_worker=1).queue("q").spec()), be)
    assert job.result(timeout=60) == (42, "ray")
    st = job.status()
    assert st.phase == "succeeded" and st.extra["kind"] == "RayJob" and st.gang_size == 2


def test_mpijob_succeeds_with_result(make_cluster):
    sim, be = make_cluster(gpus=2)

    def world():
        from mpi4py import MPI
        return MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.Get_rank() + 1)

    job = submit(be, world, ranks=2)
    assert job.result(timeout=60) == 3
    assert job.status().extra["kind"] == "MPIJob"
    text = job.logs()
    assert "GPUJOBS-RESULT" not in text  # result lines are read for result(), not shown


def test_without_visibility_api_status_is_right_without_position(make_cluster):
    sim, be = make_cluster(gpus=1, visibility=False)
    a = submit(be, sleepy, 1.5, "a")
    wait_for(lambda: a.status().phase == "running")
    b = submit(be, sleepy, 0.1, "b")
    st = wait_for(lambda: (s := b.status()).phase == "queued" and not s.position_available and s)
    assert st.queue_position is None and st.position_text() == "position unavailable"
    assert b.result(timeout=30) == "b"


def test_subscribe_events_carry_the_metrics_already_read(make_cluster):
    """A watch event must not blank the widget's GPU panel between two polls."""
    from gpujobs.backends.kubernetes.status import pod_metrics
    from gpujobs.metrics.logline import format_metrics_line
    from gpujobs.status import GpuSample

    sim, be = make_cluster(gpus=2)
    job = submit(be, sleepy, 1.0, "m")
    seen = []
    be.subscribe(job.id, seen.append)
    sample = GpuSample(rank=0, device=0, util=77.0, mem_used=1.0, mem_total=2.0, time=1.0,
                       host="node-a", source="nvml")
    assert pod_metrics.for_backend(be).feed(job.id, format_metrics_line([sample]))
    assert job.result(timeout=30) == "m"
    wait_for(lambda: seen and seen[-1].terminal)
    assert [m.util for m in seen[-1].metrics] == [77.0]
