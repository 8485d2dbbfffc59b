"""Kueue's waitForPodsReady in the simulated controllers: PodsReadyTimeout eviction, the
requeueState backoff (base doubling to max), BackoffFinished, deactivation at the limit;
off by default, and timed wake-ups only while a deadline is pending."""
from __future__ import annotations

import time

import pytest
from tests.support import wait_for
from tests.sim.test_controllers_changes import pytorchjob as one_pod_job
from tests.sim.test_controllers_changes import settle

from gpujobs.backends.kubernetes.status.mapping import parse_time
from gpujobs_sim import SimCluster

WL = "kueue.x-k8s.io/v1beta2"


def pytorchjob(name: str, workers: int = 1, seconds: float = 3600) -> dict:
    """A queued PyTorchJob: master + ``workers`` scripted pods of 1 GPU each."""
    job = one_pod_job(name, seconds)
    reps = job["spec"]["pytorchReplicaSpecs"]
    reps["Worker"] = dict(reps["Master"], replicas=workers)
    return job


class History:
    """Every version of every Workload, with the wall time it was seen."""

    def __init__(self, sim: SimCluster):
        self.items: list[tuple[float, dict]] = []
        sim.store.subscribe(self._on)

    def _on(self, ev) -> None:
        if ev.res.kind == "Workload" and ev.type != "DELETED":
            self.items.append((time.time(), ev.obj))

    def first(self, pred, after: float = 0.0) -> tuple[float, dict] | None:
        return next(((t, o) for t, o in list(self.items) if t >= after and pred(o)), None)


def cond(wl: dict, t: str) -> tuple[str, str] | None:
    c = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == t), None)
    return c and (c["status"], c["reason"])


def evicted(reason):
    return lambda o: cond(o, "Evicted") == ("True", reason)


@pytest.fixture
def make():
    made = []

    def make(**kw):
        sim = SimCluster(**kw).start()
        made.append(sim)
        return sim
    yield make
    for sim in made:
        sim.stop()
        assert not sim.controllers.errors, sim.controllers.errors


def test_timeout_evicts_backs_off_doubling_to_max_and_requeues(make):
    sim = make(gpus=8, pod_slots=1, pods_ready_timeout_s=0.3, backoff_base_s=1.0, backoff_max_s=2.0)
    hist = History(sim)
    sim.store.create(pytorchjob("g"))
    since = 0.0
    for n, backoff in ((1, 1.0), (2, 2.0), (3, 2.0)):  # base 1 s, doubling, capped at 2 s
        admitted = wait_for(lambda: hist.first(lambda o: cond(o, "Admitted") == ("True", "Admitted"), since), 20)
        t_ev, wl = wait_for(lambda: hist.first(evicted("PodsReadyTimeout"), since), 20)
        assert 0.3 <= t_ev - admitted[0] < 1.5
        # evicted first, quota still held (Kueue releases it once the job has stopped)
        assert cond(wl, "QuotaReserved") == ("True", "QuotaReserved") and "admission" in wl["status"]
        msg = wl["status"]["conditions"][-1]["message"]
        assert msg == f"Exceeded the PodsReady timeout default/{wl['metadata']['name']}"
        rs = wl["status"]["requeueState"]
        assert rs["count"] == n
        requeue_at = parse_time(rs["requeueAt"])
        # whole seconds, rounded up, from the eviction; t_ev is when the watch delivered it, a
        # moment later (on a loaded machine, past the next whole second: 0.998 s was seen)
        assert backoff - 0.5 <= requeue_at - t_ev <= backoff + 1.05
        assert [(e["reason"], e["underlyingCause"], e["count"]) for e in wl["status"]["schedulingStats"]["evictions"]] \
            == [("PodsReadyTimeout", "WaitForStart", n)]
        t_rel, rel = wait_for(lambda: hist.first(lambda o: cond(o, "QuotaReserved")[0] == "False", t_ev), 20)
        assert cond(rel, "Requeued") == ("False", "PodsReadyTimeout") and "admission" not in rel["status"]
        assert cond(rel, "Admitted") == ("False", "NoReservation")
        job = sim.store.get("kubeflow.org/v1", "PyTorchJob", "g", "default")
        assert job["spec"]["runPolicy"]["suspend"] is True
        t_back, back = wait_for(lambda: hist.first(lambda o: cond(o, "Requeued") == ("True", "BackoffFinished"),
                                                   t_rel), 20)
        assert t_back >= requeue_at - 0.01
        assert back["status"]["requeueState"] == {"count": n}
        t_adm, readm = wait_for(lambda: hist.first(lambda o: cond(o, "QuotaReserved") == ("True", "QuotaReserved"),
                                                   t_back), 20)
        assert cond(back, "QuotaReserved")[0] == "False" and t_adm >= t_back
        # readmitted as Kueue's SetQuotaReservation does: Evicted False "Previously: …",
        # Requeued left as it was
        ev = next(c for c in readm["status"]["conditions"] if c["type"] == "Evicted")
        assert (ev["status"], ev["reason"]) == ("False", "QuotaReserved")
        assert ev["message"] == f"Previously: {msg}"
        assert cond(readm, "Requeued") == ("True", "BackoffFinished")
        since = t_adm


def test_limit_deactivates_and_frees_the_quota(make):
    sim = make(gpus=2, pod_slots=1, pods_ready_timeout_s=0.3, backoff_limit=0)
    hist = History(sim)
    sim.store.create(pytorchjob("stuck"))
    t, wl = wait_for(lambda: hist.first(evicted("Deactivated")), 20)
    assert wl["spec"]["active"] is False and "requeueState" not in wl["status"]
    assert wl["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Deactivated", "underlyingCause": "RequeuingLimitExceeded", "count": 1}]
    t_rel, rel = wait_for(lambda: hist.first(lambda o: cond(o, "QuotaReserved")[0] == "False", t), 20)
    assert cond(rel, "Requeued") == ("False", "Deactivated")
    # the quota is free for the next job, and the deactivated one is never readmitted
    sim.store.create(pytorchjob("next", workers=0, seconds=0.2))
    wait_for(lambda: (w := sim.store.list(WL, "Workload", "default", "kueue.x-k8s.io/job-uid="
                                         + sim.store.get("kubeflow.org/v1", "PyTorchJob", "next", "default")
                                         ["metadata"]["uid"])) and cond(w[0], "Finished") is not None, 20)
    cur = sim.store.get(WL, "Workload", wl["metadata"]["name"], "default")
    assert cond(cur, "QuotaReserved")[0] == "False" and cur["spec"]["active"] is False
    assert not hist.first(lambda o: o["metadata"]["name"] == wl["metadata"]["name"]
                          and cond(o, "QuotaReserved") == ("True", "QuotaReserved"), t_rel)


def test_off_by_default(make):
    sim = make(gpus=8, pod_slots=1)
    sim.store.create(pytorchjob("g"))
    wait_for(lambda: (w := sim.store.list(WL, "Workload", "default"))
             and cond(w[0], "Admitted") == ("True", "Admitted"))
    time.sleep(1.0)
    wl = sim.store.list(WL, "Workload", "default")[0]
    assert cond(wl, "Evicted") is None and cond(wl, "PodsReady") == ("False", "WaitForStart")
    assert not sim.controllers.changes.timers


def test_idle_while_ready_or_backing_off_and_a_queue_change_does_not_requeue_early(make):
    sim = make(gpus=8, pod_slots=1, pods_ready_timeout_s=0.3, backoff_base_s=3.0)
    hist = History(sim)
    sim.store.create(pytorchjob("g"))
    t_ev, _ = wait_for(lambda: hist.first(evicted("PodsReadyTimeout")), 20)
    wait_for(lambda: not sim.store.list("v1", "Pod", "default"))
    before = settle(sim)
    time.sleep(0.8)  # backing off: one timer (requeueAt) and nothing else to do
    assert dict(sim.controllers.stats) == before, "the controllers worked while backing off"
    assert [w for w, _ in sim.controllers.changes.timers] == ["requeue"]
    sim.add_queue("other", gpus=1)  # rebuilds the admission engine
    settle(sim)
    wl = sim.store.list(WL, "Workload", "default")[0]
    requeue_at = parse_time(wl["status"]["requeueState"]["requeueAt"])
    assert time.time() < requeue_at and cond(wl, "QuotaReserved")[0] == "False"
    t_rel, _ = hist.first(lambda o: cond(o, "QuotaReserved")[0] == "False", t_ev)
    t_adm, _ = wait_for(lambda: hist.first(lambda o: cond(o, "QuotaReserved") == ("True", "QuotaReserved"), t_rel), 20)
    assert t_adm >= requeue_at - 0.01

    # a gang that is ready leaves no timer: the idle cluster makes no pass
    sim2 = make(gpus=8, pods_ready_timeout_s=5.0)
    sim2.store.create(pytorchjob("ok"))
    wait_for(lambda: (w := sim2.store.list(WL, "Workload", "default"))
             and cond(w[0], "PodsReady") == ("True", "Started"))
    before = settle(sim2)
    assert not sim2.controllers.changes.timers
    time.sleep(0.8)
    assert dict(sim2.controllers.stats) == before
