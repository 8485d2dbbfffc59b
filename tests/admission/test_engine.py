"""The admission engine without processes: quota, cohorts, FIFO strategies, gangs, preemption."""
from __future__ import annotations

import pytest

from gpujobs.admission import ClusterQueue, Cohort, Engine, PodSet, Workload
from gpujobs.errors import QuotaError, SpecError


def wl(wid, queue, gpus, prio=None, t=0.0, ranks=1):
    return Workload(wid, queue, [PodSet("ranks", ranks, {"gpu": gpus})], priority=prio, created=t)


def test_fifo_order_and_positions():
    eng = Engine([ClusterQueue("q", {"gpu": 2})])
    for i in range(3):
        eng.add(wl(f"j{i}", "q", 2, t=i))
    assert eng.schedule().admitted_ids == ["j0"]
    assert eng.positions("q") == {"j1": 1, "j2": 2}
    assert [eng.position(j) for j in ("j0", "j1", "j2")] == [None, 1, 2]
    eng.finish("j0")
    assert eng.schedule().admitted_ids == ["j1"]
    assert eng.position("j2") == 1


def test_priority_orders_queue_before_creation_time():
    eng = Engine([ClusterQueue("q", {"gpu": 1}, within_queue="Never")])
    eng.add(wl("run", "q", 1, t=0))
    eng.schedule()
    eng.add(wl("old-low", "q", 1, "low", t=1))
    eng.add(wl("new-high", "q", 1, "high", t=2))
    eng.add(wl("mid", "q", 1, t=3))
    assert eng.positions("q") == {"new-high": 1, "mid": 2, "old-low": 3}


def test_gang_is_all_or_nothing():
    eng = Engine([ClusterQueue("q", {"gpu": 4})])
    eng.add(wl("a", "q", 1, t=0, ranks=3))
    eng.add(wl("gang", "q", 1, t=1, ranks=2))  # 2 ranks, only 1 GPU left: nothing is admitted
    d = eng.schedule()
    assert d.admitted_ids == ["a"] and eng.state("gang") == "pending"
    assert eng.usage("q")[("default", "gpu")] == 3
    eng.finish("a")
    assert eng.schedule().admitted_ids == ["gang"]
    assert eng.admission("gang").usage == {"gpu": 2}


def test_strict_fifo_blocks_but_best_effort_lets_small_ones_pass():
    def run(strategy):
        eng = Engine([ClusterQueue("q", {"gpu": 4}, strategy=strategy)])
        eng.add(wl("first", "q", 3, t=0))
        eng.schedule()
        eng.add(wl("big", "q", 4, t=1))
        eng.add(wl("small", "q", 1, t=2))
        return eng.schedule().admitted_ids, eng.positions("q")

    assert run("StrictFIFO") == ([], {"big": 1, "small": 2})
    assert run("BestEffortFIFO") == (["small"], {"big": 1})


def test_cohort_borrowing_respects_limits():
    eng = Engine([ClusterQueue("a", {"gpu": 4}, cohort="lab", borrowing_limit={"gpu": 2}),
                  ClusterQueue("b", {"gpu": 4}, cohort="lab")])
    eng.add(wl("a1", "a", 1, t=0, ranks=4))
    eng.add(wl("a2", "a", 1, t=1, ranks=2))   # borrows 2 of b's idle GPUs
    eng.add(wl("a3", "a", 1, t=2, ranks=1))   # over a's borrowing limit (4 + 2)
    assert eng.schedule().admitted_ids == ["a1", "a2"]
    assert eng.state("a3") == "pending"
    eng.add(wl("b1", "b", 1, t=3, ranks=2))   # b still has 2 of its own
    eng.add(wl("b2", "b", 1, t=4, ranks=1))   # cohort is full (8/8); b has no reclaim policy
    assert eng.schedule().admitted_ids == ["b1"]
    assert eng.schedule().preempted == []
    ok, why = eng.can_ever_fit(wl("huge", "a", 7))
    assert not ok and "needs 7 gpu" in why and "nominal 4 + borrowable 2 = 6" in why


def test_reclaim_within_cohort_preempts_the_borrower():
    eng = Engine([ClusterQueue("a", {"gpu": 4}, cohort="lab"),
                  ClusterQueue("b", {"gpu": 4}, cohort="lab", reclaim_within_cohort="Any")])
    for i in range(4):
        eng.add(wl(f"a{i}", "a", 2, "high", t=i))
    assert eng.schedule().admitted_ids == ["a0", "a1", "a2", "a3"]  # a borrows all of b
    eng.add(wl("b0", "b", 2, "low", t=10))
    d = eng.schedule()
    assert d.admitted == [] and d.preempted == [("a3", "b0")]  # newest borrower, one is enough
    assert eng.schedule().preempted == []  # no second preemption while a3 is stopping
    eng.requeue("a3")
    assert eng.schedule().admitted_ids == ["b0"]  # b0 is within nominal: it goes first
    assert eng.positions("a") == {"a3": 1}


def test_reclaim_lower_priority_only():
    eng = Engine([ClusterQueue("a", {"gpu": 2}, cohort="lab"),
                  ClusterQueue("b", {"gpu": 2}, cohort="lab", reclaim_within_cohort="LowerPriority")])
    eng.add(wl("a0", "a", 4, "high"))
    eng.schedule()
    eng.add(wl("b0", "b", 2, "normal", t=1))
    assert eng.schedule().preempted == []


def test_preemption_within_queue_picks_lowest_priority_newest():
    eng = Engine([ClusterQueue("q", {"gpu": 4})])
    eng.add(wl("low-old", "q", 1, "low", t=0))
    eng.add(wl("low-new", "q", 1, "low", t=1))
    eng.add(wl("normal", "q", 2, "normal", t=2))
    assert len(eng.schedule().admitted) == 3
    eng.add(wl("high", "q", 1, "high", t=3))
    d = eng.schedule()
    assert d.preempted == [("low-new", "high")]
    eng.requeue("low-new")
    d = eng.schedule()
    assert d.admitted_ids == ["high"] and eng.positions("q") == {"low-new": 1}
    # a 2-rank gang: greedy takes low-old (1 GPU, not enough) then normal (2); Kueue's
    # fill-back then puts low-old back, since normal alone frees enough: one victim, not two
    eng.add(wl("high-gang", "q", 1, "high", t=4, ranks=2))
    assert eng.schedule().preempted == [("normal", "high-gang")]


def test_no_preemption_of_equal_or_higher_priority():
    eng = Engine([ClusterQueue("q", {"gpu": 2})])
    eng.add(wl("a", "q", 2, "normal"))
    eng.schedule()
    eng.add(wl("b", "q", 2, "normal", t=1))
    assert eng.schedule().preempted == []
    eng2 = Engine([ClusterQueue("q", {"gpu": 2}, within_queue="Never")])
    eng2.add(wl("a", "q", 2, "low"))
    eng2.schedule()
    eng2.add(wl("b", "q", 2, "high", t=1))
    assert eng2.schedule().preempted == []


def test_preemption_needs_enough_victims():
    eng = Engine([ClusterQueue("q", {"gpu": 4})])
    eng.add(wl("low", "q", 2, "low"))
    eng.add(wl("high1", "q", 2, "high", t=1))
    eng.schedule()
    eng.add(wl("high2", "q", 4, "high", t=2))  # would need high1 gone too: no preemption
    assert eng.schedule().preempted == []


def test_bad_input_names_known_queues_and_priorities():
    eng = Engine([ClusterQueue("q", {"gpu": 2}, local_queues=("team",))])
    with pytest.raises(SpecError, match="known: q, team"):
        eng.add(wl("x", "nope", 1))
    with pytest.raises(SpecError, match="low=100, normal=500, high=1000"):
        eng.add(wl("x", "team", 1, "urgent"))
    with pytest.raises(QuotaError, match="needs 3 gpu.*nominal 2 \\+ borrowable 0 = 2") as ei:
        eng.add(wl("x", "team", 3))
    assert "x" not in eng
    # #31: a plain sentence first, and no id of a job that was never created
    msg = str(ei.value)
    assert msg.startswith("this job can never start in queue 'team': it asks for more gpu "), msg
    assert "'x'" not in msg and "workload" not in msg.split("In detail")[0], msg


def test_local_queue_positions_and_flavors():
    eng = Engine([ClusterQueue("cq", {"small": {"gpu": 1}, "big": {"gpu": 4}},
                               local_queues=("lq-a", "lq-b"))])
    eng.add(wl("a0", "lq-a", 1, t=0))
    eng.add(wl("b0", "lq-b", 2, t=1))
    d = eng.schedule()
    assert {a.id: a.flavor for a in d.admitted} == {"a0": "small", "b0": "big"}
    eng.add(wl("a1", "lq-a", 3, t=2))
    eng.add(wl("b1", "lq-b", 3, t=3))
    eng.add(wl("a2", "lq-a", 3, t=4))
    eng.schedule()
    assert eng.positions("lq-a") == {"a1": 1, "a2": 2}
    assert eng.positions("lq-b") == {"b1": 1}
    assert eng.positions("cq") == {"a1": 1, "b1": 2, "a2": 3}


def test_cohort_own_quota_and_lending_limit():
    eng = Engine([ClusterQueue("a", {"gpu": 2}, cohort="lab"),
                  ClusterQueue("b", {"gpu": 4}, cohort="lab", lending_limit={"gpu": 1})],
                 cohorts=[Cohort("lab", {"gpu": 2})])
    # a can use its 2 + b's lendable 1 + the cohort's own 2 = 5
    assert eng.can_ever_fit(wl("x", "a", 5))[0] and not eng.can_ever_fit(wl("y", "a", 6))[0]
    eng.add(wl("a0", "a", 5))
    eng.add(wl("b0", "b", 3, t=1))  # b's guaranteed 3 are untouched
    assert eng.schedule().admitted_ids == ["b0", "a0"]  # non-borrowing heads go first


def test_remove_pending_and_admitted():
    eng = Engine([ClusterQueue("q", {"gpu": 2})])
    eng.add(wl("a", "q", 2))
    eng.add(wl("b", "q", 2, t=1))
    eng.add(wl("c", "q", 2, t=2))
    eng.schedule()
    eng.remove("b")
    assert eng.positions("q") == {"c": 1}
    eng.remove("a")
    assert eng.schedule().admitted_ids == ["c"]


def test_never_admitted_and_preempted_in_one_pass_issue_22():
    """[local-reliability] engine reproduction: the pass that admits C and preempts B for D,
    then E arrives. Kueue takes heads that fit within nominal (E) before heads that borrow (D):
    E is admitted, D waits, and no workload is both admitted and preempted."""
    eng = Engine([ClusterQueue("qa", {"gpu": 2}, cohort="lab", reclaim_within_cohort="Any"),
                  ClusterQueue("qb", {"gpu": 2}, cohort="lab", reclaim_within_cohort="LowerPriority")])
    eng.add(wl("A", "qa", 1, "high", t=0, ranks=2))
    eng.add(wl("B", "qb", 1, "normal", t=1, ranks=1))
    assert sorted(eng.schedule().admitted_ids) == ["A", "B"]
    eng.finish("A")
    eng.add(wl("C", "qb", 1, "high", t=2, ranks=2))
    eng.add(wl("D", "qb", 1, "high", t=3, ranks=2))
    d = eng.schedule()
    assert d.admitted_ids == ["C"] and d.preempted == [("B", "D")]
    eng.requeue("B")
    eng.add(wl("E", "qa", 1, "low", t=4, ranks=2))
    d = eng.schedule()
    assert not set(d.admitted_ids) & {v for v, _ in d.preempted}
    assert d.admitted_ids == ["E"] and d.preempted == []
    assert eng.state("D") == "pending" and eng.positions("qb") == {"D": 1, "B": 2}


def test_workload_admitted_earlier_in_the_pass_is_put_back_not_preempted():
    """A victim chosen among workloads admitted in the same schedule() call never started:
    it goes back to its queue instead of being reported as both admitted and preempted.
    Cycle 1: qp's head h1 cannot be admitted (no candidates), qv's v borrows 1 from qp;
    cycle 2: qp's next head p reclaims from v; v is put back and p admitted."""
    eng = Engine([ClusterQueue("qp", {"gpu": 2}, cohort="c", borrowing_limit={"gpu": 0},
                               reclaim_within_cohort="Any"),
                  ClusterQueue("qv", {"gpu": 2}, cohort="c")])
    eng.restore_admitted(wl("w", "qp", 1, "high", t=0))
    eng.add(wl("h1", "qp", 2, "high", t=1))
    eng.add(wl("p", "qp", 1, "normal", t=2))
    eng.add(wl("v", "qv", 3, "low", t=3))
    d = eng.schedule()
    assert not set(d.admitted_ids) & {v for v, _ in d.preempted}
    assert d.admitted_ids == ["p"] and d.preempted == []
    assert eng.state("v") == "pending" and eng.usage("qv")[("default", "gpu")] == 0


# The four preemption families of [kueue-exact] (Kueue v0.19.2, pkg/scheduler/preemption):
# each test fails with the engine before the Kueue rewrite.

def test_reclaim_when_preemptor_ends_within_nominal_after_its_own_queue_too():
    """Classical candidates: without borrowWithinCohort, other queues' borrowers are taken
    together with lower-priority work of the preemptor's own queue when the preemptor then
    fits within its nominal quota (the attempt without borrowing)."""
    eng = Engine([ClusterQueue("qa", {"gpu": 4}, cohort="c", reclaim_within_cohort="Any"),
                  ClusterQueue("qb", {"gpu": 4}, cohort="c")])
    eng.restore_admitted(wl("low", "qa", 2, "low"))
    eng.restore_admitted(wl("b1", "qb", 4, "normal"))
    eng.restore_admitted(wl("b2", "qb", 2, "normal"))  # qb borrows 2 of qa's
    eng.add(wl("p", "qa", 4, "high", t=1))
    d = eng.schedule()
    assert sorted(d.preempted) == [("b2", "p"), ("low", "p")]
    assert d.reasons == {"b2": "InCohortReclamation", "low": "InClusterQueue"}


def test_no_preemption_for_a_request_above_nominal_quota():
    """A request larger than the queue's nominal quota may not preempt (it would have to
    borrow after the preemption) unless borrowWithinCohort allows it."""
    def run(**kw):
        eng = Engine([ClusterQueue("q", {"gpu": 2}, cohort="c", **kw),
                      ClusterQueue("o", {"gpu": 2}, cohort="c")])
        eng.restore_admitted(wl("low", "q", 2, "low"))
        eng.restore_admitted(wl("o1", "o", 1, "low"))
        eng.add(wl("high", "q", 3, "high", t=1))
        return eng.schedule().preempted
    assert run() == []
    assert run(borrow_within_cohort="LowerPriority") == [("low", "high")]


def test_victims_of_the_cycle_are_taken_out_before_the_next_fit_check():
    """Two queues preempt in the same cycle: the first preemptor holds the quota its victim
    frees, and the second queue's fit check does not count the first victim either."""
    eng = Engine([ClusterQueue("qa", {"gpu": 2}, cohort="c"),
                  ClusterQueue("qb", {"gpu": 2}, cohort="c")])
    eng.restore_admitted(wl("la", "qa", 2, "low"))
    eng.restore_admitted(wl("lb", "qb", 2, "low"))
    eng.add(wl("ha", "qa", 2, "high", t=1))
    eng.add(wl("hb", "qb", 2, "high", t=2))
    assert sorted(eng.schedule().preempted) == [("la", "ha"), ("lb", "hb")]


def test_victims_only_from_the_first_flavor_whose_preemption_makes_it_fit():
    eng = Engine([ClusterQueue("q", {"a": {"gpu": 2}, "b": {"gpu": 2}})])
    eng.restore_admitted(wl("la", "q", 2, "low"), "a")
    eng.restore_admitted(wl("lb", "q", 2, "low"), "b")  # admitted later: the old pick
    eng.add(wl("high", "q", 2, "high", t=1))
    assert eng.schedule().preempted == [("la", "high")]
    eng.requeue("la")
    d = eng.schedule()
    assert d.admitted_ids == ["high"] and d.admitted[0].flavors == {"ranks": {"gpu": "a"}}


def test_hierarchical_cohort_lends_its_subtree_and_refuses_a_cycle():
    """A child cohort's queues borrow the root's own quota; a cycle of parents is a SpecError."""
    eng = Engine([ClusterQueue("a", {"gpu": 2}, cohort="team"),
                  ClusterQueue("b", {"gpu": 2}, cohort="other")],
                 cohorts=[Cohort("team", parent="org"), Cohort("other", parent="org"),
                          Cohort("org", {"gpu": 4})])
    assert eng.can_ever_fit(wl("x", "a", 8))[0] and not eng.can_ever_fit(wl("y", "a", 9))[0]
    eng.add(wl("big", "a", 6))
    eng.add(wl("b1", "b", 2, t=1))
    assert sorted(eng.schedule().admitted_ids) == ["b1", "big"]
    with pytest.raises(SpecError, match="cycle"):
        Engine([ClusterQueue("a", {"gpu": 1}, cohort="x")],
               cohorts=[Cohort("x", parent="y"), Cohort("y", parent="x")])


def test_can_ever_fit_names_each_shortage_once():
    # a job asking for GPUs and CPUs of one resource group: the GPU shortage was listed twice
    # (once per resource of the group), e.g. plan()'s reason on Kubernetes "needs 16 gpu ... | needs 16 gpu ..."
    eng = Engine([ClusterQueue("a", {"gpu": 2, "cpu": 16})])
    ok, why = eng.can_ever_fit(Workload("big", "a", [PodSet("ranks", 1, {"gpu": 16, "cpu": 16})]))
    assert not ok and why.count("needs 16 gpu") == 1, why
    assert "|" not in why, why


def _mixed_strategies(delay: float):
    """Kueue v0.17, seen in tests/realcp/test_admission_differential.py (mixed-1): two queues of
    4 cpu in a cohort, a BestEffortFIFO and a StrictFIFO one, each full; a (BestEffortFIFO) has
    a parked 4-cpu low job, b (StrictFIFO) a 2-cpu high head. a's running job ends at t=100."""
    from gpujobs.admission import ClusterQueue, Engine, PodSet, Workload
    t = [0.0]
    eng = Engine([ClusterQueue("a", {"cpu": 4}, cohort="co"),
                  ClusterQueue("b", {"cpu": 4}, cohort="co", strategy="StrictFIFO")],
                 priorities={"high": 1000, "low": 10}, default_priority=0, clock=lambda: t[0],
                 requeue_delay_s=delay)

    def add(wid, q, cpu, prio, at):
        eng.add(Workload(wid, q, [PodSet("main", cpu, {"cpu": 1.0})], priority=prio, created=at))
    add("run-a", "a", 4, "low", 1)
    add("run-b", "b", 4, "high", 2)
    eng.schedule()
    add("wait-a", "a", 4, "low", 3)
    add("wait-b", "b", 2, "high", 4)
    eng.schedule()
    assert set(eng.admitted()) == {"run-a", "run-b"}
    t[0] = 100.0
    eng.finish("run-a")
    return eng, t


def test_parked_workloads_return_a_batch_period_after_a_release_and_a_strict_head_goes_first():
    """With Kueue's requeueBatchPeriod the StrictFIFO head borrows the freed quota in that
    second; a's parked job then no longer fits."""
    eng, t = _mixed_strategies(1.0)
    assert [a.id for a in eng.schedule().admitted] == ["wait-b"]
    assert eng.requeue_due() == 101.0
    t[0] = 101.0
    assert eng.schedule().admitted == [] and eng.requeue_due() is None
    assert set(eng.admitted()) == {"run-b", "wait-b"}


def test_without_a_batch_period_the_job_that_needs_no_borrowing_goes_first():
    """The local agent requeues at once: Kueue's cycle order puts a's job (within its nominal
    quota) ahead of b's head (which would borrow)."""
    eng, _ = _mixed_strategies(0.0)
    assert [a.id for a in eng.schedule().admitted] == ["wait-a"]
    assert eng.requeue_due() is None


def test_each_cohort_tree_has_its_own_requeue_time():
    """Kueue's requeuer keeps one due time per root cohort (or lone ClusterQueue); a
    simulation must wake for each (a later tree's was lost behind an earlier one's)."""
    from gpujobs.admission import ClusterQueue, Engine, PodSet, Workload
    t = [0.0]
    eng = Engine([ClusterQueue("a", {"cpu": 1}), ClusterQueue("b", {"cpu": 1})], clock=lambda: t[0],
                 requeue_delay_s=1.0)
    for wid, q, at in (("ra", "a", 1), ("rb", "b", 2), ("wa", "a", 3), ("wb", "b", 4)):
        eng.add(Workload(wid, q, [PodSet("main", 1, {"cpu": 1.0})], created=at))
    eng.schedule()
    eng.schedule()
    t[0] = 10.0
    eng.finish("ra")
    t[0] = 10.5
    eng.finish("rb")
    assert eng.requeue_times() == [11.0, 11.5] and eng.requeue_due() == 11.0
    t[0] = 11.0
    assert [a.id for a in eng.schedule().admitted] == ["wa"]
    t[0] = 11.5
    assert [a.id for a in eng.schedule().admitted] == ["wb"]
