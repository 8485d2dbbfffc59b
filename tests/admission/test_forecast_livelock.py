"""The forward simulation always ends. Two queues of a cohort whose high-priority heads each
preempt their own queue's lower-priority jobs to borrow the other's idle quota, which that
queue's lower-priority jobs take back first (non-borrowing heads go first, as in Kueue), preempt
and readmit the same jobs in turn for ever; with victims that stop at once (no grace period, or
the early range run) every turn happened at the same simulated instant and the forecast spun."""
from __future__ import annotations

import dataclasses

import pytest

from gpujobs.admission import ClusterQueue, PodSet, Workload
from gpujobs.admission.forecast import Job, Snapshot, forecast, simulate

NOW = 1e6


def job(wid: str, queue: str, prio: str, gpus: int, limit: float, running: bool = False,
        grace: float = 0.0) -> Job:
    created = NOW - 5000 if running else NOW - 100 + int(wid[1:])
    return Job(Workload(wid, queue, [PodSet("r", gpus, {"gpu": 1})], priority=prio, created=created),
               started=NOW - 100 if running else None, max_runtime_s=limit, grace_period_s=grace)


def churning(grace: float = 0.0) -> Snapshot:
    """q1's p17 (8 GPUs) preempts r10 + r12 counting on 2 idle GPUs of q0, whose p14 takes one
    first; p17 cannot start, r10 and r12 come back; q0's p2 then preempts p14 counting on q1's
    GPUs, which r10 and r12 take back first; and so on (found by a generated search)."""
    qs = [ClusterQueue(f"q{i}", {"gpu": 8}, cohort="c", reclaim_within_cohort="LowerPriority") for i in range(2)]
    running = [job("r10", "q1", "normal", 4, 7200, True, grace), job("r12", "q1", "normal", 1, 3600, True, grace)]
    pending = [job("p0", "q0", "high", 2, 3600, grace=grace), job("p2", "q0", "high", 8, 1800, grace=grace),
               job("p3", "q1", "high", 2, 1800, grace=grace), job("p4", "q0", "high", 1, 1800, grace=grace),
               job("p10", "q0", "high", 1, 3600, grace=grace), job("p12", "q0", "high", 2, 3600, grace=grace),
               job("p14", "q0", "normal", 1, 1800, grace=grace), job("p17", "q1", "high", 8, 3600, grace=grace),
               job("p18", "q0", "high", 4, 3600, grace=grace)]
    return Snapshot(qs, running=running, pending=pending, now=NOW)


@pytest.mark.timeout(60)
def test_preemptions_taking_turns_at_one_instant_end_and_time_moves_on():
    snap = churning()
    fcs = forecast(snap)
    assert set(fcs) == {j.id for j in snap.pending}
    # the first jobs fit at once; the churn's preemptors start only once something ends
    assert fcs["p0"].expected_start == NOW
    for wid in ("p2", "p17"):
        start = fcs[wid].expected_start
        assert start is not None and start > NOW, (wid, fcs[wid].basis)
    run = simulate._Sim(snap, list(snap.pending), "point", None, False).run()
    assert run.looped is None  # the churn was left behind, not cut off
    assert "p14" in run.preempts["p2"] and "r10" in run.preempts["p17"]


@pytest.mark.timeout(60)
def test_the_churn_with_a_grace_period_gives_the_same_starts_order():
    """With a grace period every turn takes time: the simulation needed no help there, and the
    preemptors start once the first jobs end, as without one."""
    fcs = forecast(churning(grace=30.0))
    for wid in ("p2", "p17"):
        assert fcs[wid].expected_start is not None and fcs[wid].expected_start > NOW


@pytest.mark.timeout(60)
def test_the_churn_with_nothing_after_it_ends_the_run_on_the_unknown_ends():
    """No job has a limit: no later event ends the churn, so the run ends there; the jobs it did
    not start wait on ends nothing predicts, and say so."""
    snap = churning()
    snap = dataclasses.replace(snap, running=[dataclasses.replace(j, max_runtime_s=None) for j in snap.running],
                               pending=[dataclasses.replace(j, max_runtime_s=None) for j in snap.pending])
    run = simulate._Sim(snap, list(snap.pending), "point", None, False).run()
    assert run.looped == NOW and not run.cut
    fcs = forecast(snap)
    assert fcs["p0"].expected_start == NOW
    assert fcs["p17"].expected_start is None
    assert fcs["p17"].basis.startswith("unknown: it waits on jobs with no declared limit"), fcs["p17"].basis


@pytest.mark.timeout(60)
def test_a_simulation_that_would_spin_stops_at_the_bound_and_says_so(monkeypatch):
    """The safety bound: with the churn left undetected, the run stops after
    ``MAX_PASSES_AT_ONE_INSTANT`` passes at one instant and the jobs it did not start say why."""
    monkeypatch.setattr(simulate, "_repeats", lambda seen, key: False)
    monkeypatch.setattr(simulate, "MAX_PASSES_AT_ONE_INSTANT", 50)
    snap = churning()
    run = simulate._Sim(snap, list(snap.pending), "point", None, False).run()
    assert run.looped == NOW and run.cut
    fcs = forecast(snap)
    assert fcs["p0"].expected_start == NOW
    assert fcs["p17"].expected_start is None
    assert "preemptions repeat" in fcs["p17"].basis, fcs["p17"].basis
