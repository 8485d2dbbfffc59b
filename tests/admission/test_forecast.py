"""The forecast: why a workload waits (reasons, blocked_by) and when it starts (a forward
simulation with the engine), plus plan() what-ifs. Pure Python, no processes.

Expected numbers are worked out by hand from the scenario (quota arithmetic and declared
limits), not read back from the code."""
from __future__ import annotations

import pytest

from gpujobs.admission import ClusterQueue, Cohort, PodSet, Workload
from gpujobs.admission.forecast import History, Job, Snapshot, forecast, plan
from gpujobs.errors import SpecError

NOW = 10_000.0


def wl(wid, queue, gpus, prio=None, t=0.0):
    return Workload(wid, queue, [PodSet("ranks", gpus, {"gpu": 1})], priority=prio, created=t)


def running(wid, queue, gpus, ran, limit=None, prio=None, **kw):
    kw.setdefault("grace_period_s", 0.0)  # the hand-worked numbers below leave the grace out
    return Job(wl(wid, queue, gpus, prio, t=NOW - ran - 1), name=wid, started=NOW - ran,
               max_runtime_s=limit, **kw)


def queued(wid, queue, gpus, t, limit=None, prio=None, **kw):
    kw.setdefault("grace_period_s", 0.0)
    return Job(wl(wid, queue, gpus, prio, t=t), name=wid, max_runtime_s=limit, **kw)


TWO = [ClusterQueue("team-a", {"gpu": 4}, cohort="lab"), ClusterQueue("team-b", {"gpu": 4}, cohort="lab")]


def test_no_quota_left_names_holder_and_time_left():
    snap = Snapshot([ClusterQueue("team-a", {"gpu": 4})],
                    running=[running("exp-7", "team-a", 2, ran=60, limit=780)],
                    pending=[queued("exp-9", "team-a", 4, t=NOW - 5, limit=600)], now=NOW)
    fc = forecast(snap)["exp-9"]
    assert fc.reason.startswith("needs 4 GPUs, 2 free in team-a; ahead: exp-7 (running, ~12 min left)")
    assert fc.blocked_by == ("exp-7",)
    assert fc.expected_start == NOW + 720  # exp-7's declared limit: 780 s, 60 s done
    assert fc.basis == "expected ends from declared limit + grace"
    assert fc.position == 1


def test_quota_held_by_a_borrower_of_another_queue():
    # team-b borrowed 2 of team-a's GPUs; team-a does not reclaim, so exp-1 waits for b-big.
    snap = Snapshot(TWO, running=[running("a-run", "team-a", 2, ran=10, limit=3600),
                                  running("b-big", "team-b", 6, ran=100, limit=400)],
                    pending=[queued("exp-1", "team-a", 2, t=NOW - 1)], now=NOW)
    fc = forecast(snap)["exp-1"]
    assert "needs 2 GPUs, 0 free in team-a (cohort lab lends 0)" in fc.reason
    assert "team-b borrows 2 from cohort lab: b-big (running, ~5 min left)" in fc.reason
    assert "reclaim_within_cohort=Never" in fc.reason
    assert set(fc.blocked_by) == {"b-big", "a-run"}
    assert fc.expected_start == NOW + 300  # b-big's limit ends first


def test_a_higher_priority_job_ahead():
    snap = Snapshot([ClusterQueue("q", {"gpu": 4}, within_queue="Never")],
                    running=[running("r", "q", 4, ran=0, limit=100)],
                    pending=[queued("mine", "q", 4, t=NOW - 50, limit=100),
                             queued("urgent", "q", 4, t=NOW - 10, limit=100, prio="high")], now=NOW)
    fcs = forecast(snap)
    assert fcs["urgent"].position == 1 and fcs["mine"].position == 2
    assert "urgent (1st, high, 4 GPUs)" in fcs["mine"].reason
    assert "urgent" in fcs["mine"].blocked_by
    assert fcs["urgent"].expected_start == NOW + 100
    assert fcs["mine"].expected_start == NOW + 200


def test_strict_fifo_head_blocks_a_job_that_would_fit():
    snap = Snapshot([ClusterQueue("q", {"gpu": 4}, strategy="StrictFIFO")],
                    running=[running("r", "q", 2, ran=0, limit=300)],
                    pending=[queued("big", "q", 4, t=NOW - 2, limit=60),
                             queued("small", "q", 1, t=NOW - 1, limit=60)], now=NOW)
    fc = forecast(snap)["small"]
    assert "it would fit now, but q is StrictFIFO: its head big (4 GPUs) must start first" in fc.reason
    assert fc.blocked_by[0] == "big"
    assert fc.expected_start == NOW + 360  # r ends at +300, big runs 60 s, then small


def test_best_effort_lets_the_small_one_pass_in_the_simulation():
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})],
                    running=[running("r", "q", 2, ran=0, limit=300)],
                    pending=[queued("big", "q", 4, t=NOW - 2, limit=60)], now=NOW)
    p = plan(snap, queued("small", "q", 1, t=NOW, limit=60))
    assert p.admit_now and p.position is None and p.expected_start == NOW
    assert p.reason == "fits now (1 GPU in q)"


def test_can_never_fit():
    snap = Snapshot(TWO, now=NOW)
    p = plan(snap, queued("huge", "team-a", 9, t=NOW))
    assert not p.admit_now and p.expected_start is None
    assert "can never be admitted: needs 9 gpu" in p.reason
    assert "nominal 4 + borrowable 4 = 8" in p.reason
    assert p.basis.startswith("never")


def test_waiting_for_victims_to_stop():
    # "low" is being preempted for "hi" (stops within its grace period).
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})],
                    running=[running("low", "q", 4, ran=500, limit=5000, prio="low",
                                     stops_at=NOW + 20, preempted_by="hi")],
                    pending=[queued("hi", "q", 4, t=NOW - 3, limit=100, prio="high")], now=NOW)
    fc = forecast(snap)["hi"]
    assert "waiting for low to stop (preempted for it)" in fc.reason
    assert fc.blocked_by[0] == "low"
    assert fc.expected_start == NOW + 20
    assert fc.basis == "victims' grace periods"


def test_plan_reports_preemption_and_start_after_grace():
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})],
                    running=[running("low", "q", 4, ran=10, limit=5000, prio="low",
                                     grace_period_s=45)], now=NOW)
    p = plan(snap, queued("hi", "q", 4, t=NOW, limit=100, prio="high"))
    assert p.preempts == ("low",) and not p.admit_now
    assert p.expected_start == NOW + 45
    assert p.reason.startswith("would preempt low and start once it stops")


def test_plan_unknown_queue_or_priority_is_a_spec_error():
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})], now=NOW)
    with pytest.raises(SpecError, match="unknown queue 'nope'"):
        plan(snap, queued("x", "nope", 1, t=NOW))
    with pytest.raises(SpecError, match="unknown priority class 'urgent'"):
        plan(snap, queued("x", "q", 1, t=NOW, prio="urgent"))


def test_unknown_end_gives_none_and_not_before():
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})],
                    running=[running("mystery", "q", 4, ran=120)],  # no limit, progress, history
                    pending=[queued("next", "q", 4, t=NOW - 1, limit=60)], now=NOW)
    fc = forecast(snap)["next"]
    assert fc.expected_start is None
    assert fc.basis.startswith("unknown: it waits on jobs with no declared limit, progress or history (mystery)")
    assert "mystery (running 2 min, end unknown)" in fc.reason
    assert fc.not_before == NOW  # the only bound: mystery could end any moment


def test_progress_beats_history_beats_limit():
    h = History()
    for rt in (100, 200, 300):
        h.add("ann", "train", "q", rt)
    snap = Snapshot([ClusterQueue("q", {"gpu": 1})],
                    running=[Job(wl("p", "q", 1), user="ann", name="train", started=NOW - 50,
                                 max_runtime_s=3600, expected_end=NOW + 30)],
                    pending=[Job(wl("h", "q", 1, t=NOW - 5), user="ann", name="train", max_runtime_s=3600),
                             Job(wl("l", "q", 1, t=NOW - 4), user="bob", name="other", max_runtime_s=500),
                             Job(wl("z", "q", 1, t=NOW - 3), user="bob", name="other", max_runtime_s=500)],
                    history=h, now=NOW)
    fcs = forecast(snap)
    assert fcs["h"].expected_start == NOW + 30 and fcs["h"].basis == "expected ends from progress rate"
    assert fcs["l"].expected_start == NOW + 30 + 200  # h: median of similar jobs, 200 s
    assert fcs["z"].expected_start == NOW + 230 + 500 + 30  # l: only its declared limit + 30 s grace
    assert fcs["z"].basis == "expected ends from progress rate, history of similar jobs, declared limit + grace"


def test_history_of_a_running_job_uses_only_longer_runs():
    h = History()
    for rt in (100, 200, 1000, 1200):
        h.add("u", "n", "q", rt)
    snap = Snapshot([ClusterQueue("q", {"gpu": 1})],
                    running=[Job(wl("r", "q", 1), user="u", name="n", started=NOW - 500)],
                    pending=[queued("w", "q", 1, t=NOW - 1)], history=h, now=NOW)
    # ran 500 s already: only 1000 and 1200 are possible, median 1100 -> ends at +600
    assert forecast(snap)["w"].expected_start == NOW + 600


def test_a_run_longer_than_every_similar_one_ends_by_their_fitted_lognormal_not_at_its_limit():
    """Before: no similar run was longer, so history had no number and the end fell to the
    declared limit + grace (eta_replay's dumps: 23 such ends, 24 s late at the median)."""
    h = History()
    for rt in (80, 100, 125):
        h.add("u", "n", "q", rt)
    snap = Snapshot([ClusterQueue("q", {"gpu": 1})],
                    running=[Job(wl("r", "q", 1), user="u", name="n", started=NOW - 130, max_runtime_s=3600)],
                    pending=[queued("w", "q", 1, t=NOW - 1)], history=h, now=NOW)
    fc = forecast(snap)["w"]
    # log-normal of the three runs (median 100 s, sd of logs ~0.18), given 130 s run so far:
    # its conditional median is ~143 s, so it ends ~13 s from now (not 3,600 + 30 - 130 s)
    assert NOW + 5 < fc.expected_start < NOW + 25, fc.expected_start - NOW
    assert "history of similar jobs" in fc.basis
    # quantiles keep their order, all after what it ran
    assert 130 < h.runtime("u", "n", "q", 130, 0.1) < h.runtime("u", "n", "q", 130) < h.runtime("u", "n", "q", 130, 0.9)
    one = History()
    one.add("u", "n", "q", 100)
    assert one.runtime("u", "n", "q", 130) is None  # one run fits no spread: as before


def test_cohort_lending_counts_in_free_and_forecast():
    snap = Snapshot(TWO, running=[running("a1", "team-a", 4, ran=0, limit=1000)],
                    pending=[queued("more", "team-a", 2, t=NOW - 1, limit=50)], now=NOW)
    assert plan(snap, queued("x", "team-a", 2, t=NOW, limit=50)).admit_now  # team-b lends 4:
    p = plan(snap, queued("x", "team-a", 4, t=NOW, limit=50))              # 2 for "more", 2 left
    assert not p.admit_now and p.expected_start == NOW + 50 and p.position == 1
    snap2 = Snapshot(TWO, running=[running("a1", "team-a", 4, ran=0, limit=1000),
                                   running("b1", "team-b", 3, ran=0, limit=100)],
                     pending=[queued("more", "team-a", 2, t=NOW - 1, limit=50)], now=NOW)
    fc = forecast(snap2)["more"]
    assert "needs 2 GPUs, 0 free in team-a (cohort lab lends 1)" in fc.reason
    assert fc.expected_start == NOW + 100  # b1 ends: team-b lends 4


def test_forecast_with_subset_of_ids_matches_full():
    run = [running(f"r{i}", "q", 1, ran=i, limit=100 + 10 * i) for i in range(4)]
    pend = [queued(f"p{i}", "q", 1, t=NOW - 100 + i, limit=30) for i in range(10)]
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})], running=run, pending=pend, now=NOW)
    full = forecast(snap)
    part = forecast(snap, ids=["p7"])
    assert list(part) == ["p7"]
    assert part["p7"].expected_start == full["p7"].expected_start
    assert part["p7"].reason == full["p7"].reason


def test_starts_beyond_the_horizon_get_none_and_not_before():
    # one GPU, ten 1-hour jobs queued: the 5th starts 4 h ahead, past a 3 h horizon
    snap = Snapshot([ClusterQueue("q", {"gpu": 1})],
                    running=[running("r", "q", 1, ran=0, limit=3600)],
                    pending=[queued(f"p{i}", "q", 1, t=NOW - 10 + i, limit=3600) for i in range(10)],
                    now=NOW)
    fcs = forecast(snap, horizon_s=3 * 3600)
    assert [fcs[f"p{i}"].expected_start for i in range(3)] == [NOW + 3600, NOW + 7200, NOW + 10800]
    late = fcs["p3"]
    # r may fail at any moment: the only true lower bound is now, not the horizon's end
    assert late.expected_start is None and late.not_before == NOW and late.expected_start_range is None
    assert late.basis.startswith("beyond the forecast horizon (3.0 h ahead)")
    assert "starts more than 3.0 h from now" in late.reason
    assert forecast(snap, horizon_s=1e9)["p9"].expected_start == NOW + 10 * 3600
    p = plan(snap, queued("new", "q", 1, t=NOW, limit=60), horizon_s=3 * 3600)
    assert p.expected_start is None and p.position == 11 and p.not_before == NOW


def test_hierarchical_cohorts_are_simulated_together():
    # team-a and team-b sit in child cohorts of one root: b's idle quota reaches a via the root
    qs = [ClusterQueue("team-a", {"gpu": 2}, cohort="left"), ClusterQueue("team-b", {"gpu": 2}, cohort="right")]
    cohorts = [Cohort("left", parent="root"), Cohort("right", parent="root"), Cohort("root")]
    snap = Snapshot(qs, cohorts, running=[running("b1", "team-b", 2, ran=0, limit=100)],
                    pending=[queued("a-big", "team-a", 4, t=NOW - 1, limit=60)], now=NOW)
    fc = forecast(snap)["a-big"]
    assert fc.expected_start == NOW + 100  # b1 ends, team-a borrows team-b's 2 through the root
    assert fc.reason.startswith("needs 4 GPUs, 2 free in team-a (cohort left lends 0)")
    assert forecast(snap, ids=["a-big"])["a-big"].expected_start == NOW + 100  # same group kept


def test_reasons_read_the_quota_of_every_resource_group():
    """A queue given as resource_groups (Kueue's resourceGroups, as read from a cluster) has its
    free quota counted per group; only the resources that are short are named besides GPUs."""
    q = ClusterQueue("team-a", resource_groups=[{"a100": {"gpu": 4}}, {"cpus": {"cpu": 64}}])
    two = Workload("exp-7", "team-a", [PodSet("ranks", 2, {"gpu": 1, "cpu": 8})], created=NOW - 61)
    four = Workload("exp-9", "team-a", [PodSet("ranks", 4, {"gpu": 1, "cpu": 8})], created=NOW - 5)
    snap = Snapshot([q], running=[Job(two, name="exp-7", started=NOW - 60, max_runtime_s=780)],
                    pending=[Job(four, name="exp-9", max_runtime_s=600)], now=NOW)
    fc = forecast(snap)["exp-9"]
    assert fc.reason.startswith("needs 4 GPUs, 2 free in team-a; ahead: exp-7 (running, ~12 min left)"), fc.reason
    assert "cpu" not in fc.reason  # 32 of 48 free cpu: enough, not named


def test_plan_reason_agrees_with_the_number_of_victims():
    # "would preempt low and start once they stop" for one victim
    snap = Snapshot([ClusterQueue("q", {"gpu": 4})],
                    running=[running("low1", "q", 2, ran=10, limit=5000, prio="low", grace_period_s=30),
                             running("low2", "q", 2, ran=10, limit=5000, prio="low", grace_period_s=30)], now=NOW)
    p = plan(snap, queued("hi", "q", 4, t=NOW, limit=100, prio="high"))
    assert set(p.preempts) == {"low1", "low2"}
    assert " and start once they stop; " in p.reason, p.reason
    one = Snapshot([ClusterQueue("q", {"gpu": 4})],
                   running=[running("low", "q", 4, ran=10, limit=5000, prio="low", grace_period_s=30)],
                   now=NOW)
    assert " and start once it stops; " in plan(one, queued("hi", "q", 4, t=NOW, limit=100, prio="high")).reason


def test_with_kueues_batch_period_each_parked_job_starts_that_long_after_its_release():
    """Kubernetes forecasts (Snapshot.requeue_delay_s, Kueue's requeueBatchPeriod): a parked job
    starts a batch period after the end that frees its quota, in each cohort tree at its own
    time (two lone queues whose holders end half a second apart); the local agent's 0 starts
    them at the ends."""
    import dataclasses
    snap = Snapshot([ClusterQueue("a", {"gpu": 1}), ClusterQueue("b", {"gpu": 1})],
                    running=[running("ra", "a", 1, ran=0, limit=100), running("rb", "b", 1, ran=0, limit=100.5)],
                    pending=[queued("wa", "a", 1, t=NOW - 2), queued("wb", "b", 1, t=NOW - 1)], now=NOW)
    at_once = forecast(snap, reasons=False)
    assert (at_once["wa"].expected_start, at_once["wb"].expected_start) == (NOW + 100, NOW + 100.5)
    batched = forecast(dataclasses.replace(snap, requeue_delay_s=1.0), reasons=False)
    assert (batched["wa"].expected_start, batched["wb"].expected_start) == (NOW + 101, NOW + 101.5)
