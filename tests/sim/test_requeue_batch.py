"""The simulated Kueue puts a BestEffortFIFO queue's inadmissible workloads back in its heap only
``requeueBatchPeriod`` after quota is released (kueue@v0.17.0
pkg/cache/queue/inadmissible_workloads.go), while a StrictFIFO head is tried every cycle: in
that second the StrictFIFO queue's head borrows the freed quota first. Real Kueue v0.17.0 did so
in tests/realcp/test_admission_differential.py (case mixed-1); hand-written jobs here, not
gpujobs' renderer."""
from __future__ import annotations

import time

from tests.support import wait_for

from gpujobs_sim import SimCluster, rules

WL = "kueue.x-k8s.io/v1beta2"


def job(name: str, queue: str, cpus: int, seconds: float) -> dict:
    tmpl = {"metadata": {"annotations": {"sim.gpujobs.dev/seconds": str(seconds)}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cpus)}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {**tmpl, "spec": {
                **tmpl["spec"], "restartPolicy": "Never"}}}}


def condition(sim: SimCluster, name: str, kind: str) -> bool | None:
    """Whether job ``name``'s Workload has condition ``kind`` True (None: no Workload yet)."""
    for w in sim.store.list(WL, "Workload", "default"):
        if w["metadata"]["name"].startswith(f"job-{name}-"):
            return rules.is_true(w, kind)
    return None


def reserved(sim: SimCluster, name: str) -> bool | None:
    """Whether job ``name``'s Workload holds quota (None: no Workload yet)."""
    return condition(sim, name, "QuotaReserved")


def test_a_strict_fifo_head_borrows_the_freed_quota_before_the_best_effort_queue_looks_again():
    with SimCluster(gpus=None, cpus=None, queue="unused") as sim:
        sim.add_queue("bef", gpus=None, cpus=4, preemption="Never", cohort="co", strategy="BestEffortFIFO")
        sim.add_queue("strict", gpus=None, cpus=4, preemption="Never", cohort="co", strategy="StrictFIFO")
        sim.store.create(job("first", "bef", 4, 3))  # frees the BestEffortFIFO queue's 4 cpu in 3 s
        sim.store.create(job("held", "strict", 4, 60))
        wait_for(lambda: reserved(sim, "first") and reserved(sim, "held"), timeout=30)
        sim.store.create(job("big", "bef", 4, 60))  # fits its own queue once "first" ends
        sim.store.create(job("small", "strict", 2, 60))  # fits only by borrowing
        wait_for(lambda: reserved(sim, "big") is False and reserved(sim, "small") is False, timeout=30)
        wait_for(lambda: condition(sim, "first", "Finished"), timeout=30)  # its quota is free
        wait_for(lambda: reserved(sim, "small"), timeout=30)
        time.sleep(1.5)  # past the requeue batch period: "big" was looked at again, and 2 cpu are left
        assert reserved(sim, "big") is False
        assert reserved(sim, "small") and reserved(sim, "held")
