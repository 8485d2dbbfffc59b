"""JobBuilder.plan() on the simulated cluster: the same simulation with the job added, from the
cluster's own objects; nothing is created (objects and create requests counted before/after)."""
from __future__ import annotations

import time

import pytest
from tests.k8s_forecast.k8s_objects import queue, theirs
from tests.support import MPI_IMAGE

import gpujobs


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def spec(q, gpus, limit=None, prio=None, name="x"):
    b = gpujobs.job(nap, 1).mpi(ranks=1, gpus_per_rank=gpus).image(MPI_IMAGE).queue(q).name(name)
    if limit:
        b = b.max_runtime(limit)
    if prio:
        b = b.priority(prio)
    return b.spec()


def objects(sim) -> int:
    return sum(len(sim.store.list_res(r)[0]) for r in sim.store.resources())


def test_plan_answers_from_the_cluster_and_creates_nothing(make_cluster):
    t0 = time.time() - 30

    def setup(sim):
        queue(sim, "q", "cq-q", 2)
        queue(sim, "q2", "cq-q", 2, namespace="other")
        queue(sim, "free", "cq-free", 4)
        theirs(sim, "other", "r", "q2", 2, cq="cq-q", admitted_at=t0, max_s=120, priority="low")
    sim, be = make_cluster(setup)
    time.sleep(0.5)  # the simulated Kueue has restored what it admitted
    before, creates = objects(sim), sim.server.counts["create"]
    now_ = be.plan(spec("free", 2))
    later = be.plan(spec("q", 1, limit=60))
    urgent = be.plan(spec("q", 2, limit=60, prio="high"))
    assert now_.admit_now and now_.preempts == () and now_.reason == "fits now (2 GPUs in default/free)"
    assert not later.admit_now and later.position == 1 and later.blocked_by == ("other/r",)
    assert later.expected_start == pytest.approx(t0 + 120 + 30, abs=2)  # + r's 30 s grace
    assert later.basis == ("expected ends from declared limit + grace; admission as Kueue v0.20 scheduler "
                           "(FlavorFungibilityPreserveScanProgress=on, RecomputeAssignmentUponPreemptionTargetsOverlap=on), "
                           "the newest supported (the cluster's Kueue version is not known)")
    assert later.not_before is not None and later.not_before <= time.time()  # r may end at once
    assert later.expected_start_range[0] <= later.expected_start <= later.expected_start_range[1]
    assert "needs 1 GPU, 0 free in cq-q" in later.reason and "other/r (running" in later.reason
    # cq-q preempts lower priorities within the queue: the high one would evict theirs
    assert urgent.preempts == ("other/r",) and not urgent.admit_now
    assert urgent.reason.startswith("would preempt other/r and start once it stops"), urgent.reason
    assert urgent.expected_start == pytest.approx(time.time() + 30, abs=3)  # their grace period
    assert objects(sim) == before and sim.server.counts["create"] == creates  # nothing was created


def test_plan_basis_names_the_kueue_version_it_followed(make_cluster):
    def setup(sim):
        queue(sim, "q", "cq-q", 2)
    sim, be = make_cluster(setup)
    be._kueue_version = "v0.19.1"  # [kubernetes] kueue_version
    p = be.plan(spec("q", 1))
    assert p.basis.endswith("admission as Kueue v0.19.2 scheduler (FlavorFungibilityPreserveScanProgress=on, "
                            "RecomputeAssignmentUponPreemptionTargetsOverlap=off), [kubernetes] kueue_version")
    assert be.kueue_version("v0.17.2") == ("v0.17.0", "the cluster runs Kueue v0.17.2")  # detected wins
    from gpujobs.errors import SpecError
    with pytest.raises(SpecError, match="the cluster's Kueue version"):
        be.kueue_version("v0.18.0")


def _kueue_manager(sim, tag):
    sim.store.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "kueue-controller-manager", "namespace": "kueue-system"}, "spec": {"template": {"spec": {
            "containers": [{"name": "manager", "image": f"registry.k8s.io/kueue/kueue:{tag}"}]}}}})


@pytest.mark.parametrize("tag, row, source", [
    ("v0.17.3", "v0.17.0", "the cluster runs Kueue v0.17.3"),
    ("v0.18.1", "v0.20", "the cluster runs Kueue v0.18.1, which is not modelled")])
def test_plan_simulates_the_kueue_the_cluster_runs(make_cluster, tag, row, source):
    """The version read from Kueue's manager image decides the forecast's own engine, not only the
    basis text; a version gpujobs does not model falls back to the newest and says so."""
    from gpujobs.backends.kubernetes.status import forecasting

    def setup(sim):
        queue(sim, "q", "cq-q", 2)
        _kueue_manager(sim, tag)
    sim, be = make_cluster(setup)
    p = be.plan(spec("q", 1))
    assert f"admission as Kueue {row} scheduler" in p.basis and p.basis.endswith(source)
    c = forecasting.for_backend(be, "default").cluster()
    assert c.kueue_version == row
    from gpujobs.backends.kubernetes.status.kueue_model import translate
    assert translate(c).snapshot.engine().kueue_version == row


def test_plan_refuses_what_submit_refuses(make_cluster):
    from gpujobs.errors import SpecError

    def setup(sim):
        queue(sim, "q", "cq-q", 2)
    sim, be = make_cluster(setup)
    with pytest.raises(SpecError, match="no LocalQueue 'nope'.*LocalQueues there: q"):
        be.plan(spec("nope", 1))
    with pytest.raises(SpecError, match="no WorkloadPriorityClass 'urgent'"):
        be.plan(spec("q", 1, prio="urgent"))
