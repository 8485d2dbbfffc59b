"""Reasons, blocked_by and expected starts of queued jobs on the simulated cluster, from the
cluster's own objects (ClusterQueues, LocalQueues, Workloads of every namespace), and plan()
with nothing created. Mirrors tests/local/test_forecast_local.py; other teams' jobs are
Workloads the cluster shows (conftest.theirs), gpujobs' own are submitted through the backend.
Nothing here starts a pod process: every gpujobs job stays queued."""
from __future__ import annotations

import re
import time

import pytest
from tests.k8s_forecast.k8s_objects import queue, theirs
from tests.support import MPI_IMAGE, wait_for

import gpujobs
from gpujobs.handle import Job

WL_API = "kueue.x-k8s.io/v1beta2"


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def submit(be, name, q, gpus, limit=None, prio=None):
    b = gpujobs.job(nap, 120).mpi(ranks=1, gpus_per_rank=gpus).image(MPI_IMAGE).queue(q).name(name)
    if limit:
        b = b.max_runtime(limit)
    if prio:
        b = b.priority(prio)
    return Job(be.submit(b.spec()), be)


def queued(job, pred=lambda s: True, timeout=30):
    """The job's status once queued, with the Workload Kueue made for it (before, a loaded run
    read "waiting for Kueue to create its Workload": the job's own Suspended reason), and a
    forecast reason that ``pred`` accepts."""
    return wait_for(lambda: (s := job.status()).phase == "queued" and s.extra.get("workload")
                    and s.extra.get("kueue_reason") and pred(s) and s, timeout=timeout)


def two_teams_one_queue(t0, max_s=600):
    def setup(sim):
        queue(sim, "q", "cq-q", 2, preemption="Never")
        queue(sim, "q2", "cq-q", 2, namespace="other")
        theirs(sim, "other", "r", "q2", 2, cq="cq-q", admitted_at=t0, max_s=max_s)
    return setup


def test_no_quota_left(make_cluster):
    t0 = time.time() - 60
    sim, be = make_cluster(two_teams_one_queue(t0))
    mine = submit(be, "mine", "q", 2, limit=60)
    st = queued(mine)
    assert st.queue_position == 1
    assert re.fullmatch(r"needs 2 GPUs, 0 free in cq-q; ahead: other/r \(running, ~(9|10) min left\); "
                        r"expected to start in ~(9|10) min \(\d\d:\d\d\)", st.reason), st.reason
    assert st.blocked_by == ("other/r",)
    assert st.expected_start == pytest.approx(t0 + 600 + 30, abs=2)  # + its pods' 30 s grace
    assert st.expected_start_basis == "expected ends from declared limit + grace"
    assert st.not_before is not None and st.not_before <= time.time()  # other/r may end at once
    assert st.expected_start_range[0] <= st.expected_start <= st.expected_start_range[1]
    assert st.extra["kueue_reason"] == "WaitingForQuota"  # Kueue's own code is kept


def test_no_quota_left_behind_a_job_with_no_declared_end(make_cluster):
    t0 = time.time() - 300
    sim, be = make_cluster(two_teams_one_queue(t0, max_s=None))
    mine = submit(be, "mine", "q", 2, limit=60)
    st = queued(mine)
    assert st.expected_start is None and st.blocked_by == ("other/r",)
    assert "other/r (running 5 min, end unknown)" in st.reason and "start unknown" in st.reason, st.reason
    assert st.expected_start_basis.startswith("unknown: it waits on jobs with no declared limit, progress "
                                              "or history (other/r)"), st.expected_start_basis
    assert st.extra["not_before"] == pytest.approx(time.time(), abs=5)


def test_a_higher_priority_job_ahead(make_cluster):
    t0 = time.time() - 60
    sim, be = make_cluster(two_teams_one_queue(t0))
    mine = submit(be, "mine", "q", 2, limit=60)
    urgent = submit(be, "urgent", "q", 2, limit=60, prio="high")
    st = queued(mine, lambda s: "urgent" in s.reason)
    assert st.queue_position == 2
    assert re.match(r"needs 2 GPUs, 0 free in cq-q; ahead: other/r \(running, ~(9|10) min left\), "
                    r"urgent \(1st, high, 2 GPUs\)", st.reason), st.reason
    assert st.blocked_by == ("other/r", urgent.id)
    assert st.expected_start == pytest.approx(t0 + 630 + 90, abs=2)  # limits + 30 s grace each
    assert st.expected_start_basis == "expected ends from declared limit + grace (2 jobs)"
    assert "starts in ~" in st.summary()
    up = queued(urgent)
    assert up.expected_start == pytest.approx(t0 + 630, abs=2) and up.blocked_by == ("other/r",)


def test_quota_held_by_a_borrower_of_another_queue(make_cluster):
    t0 = time.time() - 10

    def setup(sim):
        queue(sim, "a", "cq-a", 2, cohort="lab")
        queue(sim, "b", "cq-b", 2, namespace="other", cohort="lab")
        theirs(sim, "other", "b-big", "b", 4, cq="cq-b", admitted_at=t0, max_s=300)  # borrows cq-a's 2
    sim, be = make_cluster(setup)
    a = submit(be, "exp-1", "a", 1)
    st = queued(a)
    assert "needs 1 GPU, 0 free in cq-a (cohort lab lends 0)" in st.reason, st.reason
    assert "cq-b borrows 2 from cohort lab: other/b-big (running, ~5 min left)" in st.reason
    assert "reclaim_within_cohort=Never" in st.reason
    assert st.blocked_by == ("other/b-big",)
    assert st.expected_start == pytest.approx(t0 + 330, abs=2)


def test_strict_fifo_head_blocks(make_cluster):
    t0 = time.time() - 10

    def setup(sim):
        queue(sim, "strict", "cq-strict", 2, strategy="StrictFIFO")
        queue(sim, "s2", "cq-strict", 2, namespace="other")
        theirs(sim, "other", "r", "s2", 1, cq="cq-strict", admitted_at=t0, max_s=100)
    sim, be = make_cluster(setup)
    big = submit(be, "big", "strict", 2, limit=50)
    wait_for(lambda: big.status().queue_position == 1)
    small = submit(be, "small", "strict", 1, limit=50)
    st = queued(small, lambda s: "StrictFIFO" in s.reason)
    assert "it would fit now, but cq-strict is StrictFIFO: its head big (2 GPUs) must start first" in st.reason, \
        st.reason
    assert st.blocked_by[0] == big.id
    assert st.expected_start == pytest.approx(t0 + 130 + 80, abs=2)  # limits + 30 s grace each


def test_waiting_for_victims_to_stop(make_cluster):
    def setup(sim):
        queue(sim, "q", "cq-q", 2)
        queue(sim, "q2", "cq-q", 2, namespace="other")
        # a low-priority job of another team with a pod that has not stopped yet
        theirs(sim, "other", "low", "q2", 2, cq="cq-q", admitted_at=time.time() - 5, priority="low",
               grace=30, pod=True)
    sim, be = make_cluster(setup)
    hi = submit(be, "hi", "q", 2, limit=60, prio="high")
    st = queued(hi, lambda s: "to stop" in s.reason)
    assert "waiting for other/low to stop (preempted for it)" in st.reason, st.reason
    assert st.blocked_by[0] == "other/low"
    assert st.expected_start_basis == "victims' grace periods"
    assert time.time() < st.expected_start <= time.time() + 31
    wl = next(w for w in sim.store.list(WL_API, "Workload", "other"))
    assert {c["type"]: c["status"] for c in wl["status"]["conditions"]}["Evicted"] == "True"
    # its pod goes: Kueue requeues it and admits ours
    sim.store.delete("v1", "pods", "low-0", "other")
    wait_for(lambda: hi.status().phase != "queued")


def test_can_never_fit(make_cluster):
    def setup(sim):
        queue(sim, "q", "cq-q", 2, preemption="Never")
        queue(sim, "q2", "cq-q", 2, namespace="other")
        theirs(sim, "other", "r", "q2", 2, cq="cq-q", admitted_at=time.time(), max_s=600)
    sim, be = make_cluster(setup)
    p = gpujobs.job(nap, 1).mpi(ranks=1, gpus_per_rank=5).image(MPI_IMAGE).queue("q").on("kubernetes")
    be_plan = be.plan(p.spec())
    assert not be_plan.admit_now and be_plan.expected_start is None and be_plan.position is None
    assert "can never be admitted" in be_plan.reason and "gpu" in be_plan.reason, be_plan.reason
    assert be_plan.summary().startswith("can never start")
    # a queued job whose ClusterQueue shrank below it since: the forecast says so, with the numbers
    mine = submit(be, "mine", "q", 2)
    queued(mine)
    sim.store.mutate(WL_API, "ClusterQueue", "cq-q", None, lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]
                     ["resources"][0].__setitem__("nominalQuota", "1"))
    st = queued(mine, lambda s: "can never" in s.reason)
    assert "can never be admitted" in st.reason and st.expected_start is None, st.reason
    assert st.expected_start_basis.startswith("never")
