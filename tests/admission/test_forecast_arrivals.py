"""Jobs not submitted yet (issue 30, eta5): the arrivals the recent submissions make expected
(:class:`Arrivals`), queued by the point and late runs at their times, so a job that later
arrivals would pass (a higher priority, a smaller shape that fits first) is forecast later;
the early run leaves them out. Numbers worked out by hand."""
from __future__ import annotations

from gpujobs.admission import ClusterQueue, PodSet, Workload
from gpujobs.admission.forecast import ARRIVALS_KEEP, Arrivals, History, Job, Snapshot, forecast, plan
from gpujobs.admission.forecast.arrivals import ARRIVALS_MIN

NOW = 50_000.0
Q = [ClusterQueue("q", {"gpu": 4}, within_queue="Never")]  # BestEffortFIFO, no preemption


def wl(wid, gpus, t=0.0, prio=None, queue="q"):
    return Workload(wid, queue, [PodSet("ranks", gpus, {"gpu": 1})], created=t, priority=prio)


def job(wid, gpus, t=0.0, prio=None, limit=60.0, name="j", **kw):
    return Job(wl(wid, gpus, t, prio), name=name, max_runtime_s=limit, grace_period_s=0.0, **kw)


def seen(n, every, gpus=1, prio=None, name="j", limit=60.0, until=NOW):
    """An Arrivals model that saw ``n`` submissions, one every ``every`` s, the last at ``until``."""
    a = Arrivals()
    for i in range(n):
        t = until - (n - 1 - i) * every
        a.add(t, job(f"past{i}", gpus, t, prio, limit, name))
    return a


def test_no_arrivals_are_expected_before_enough_submissions_were_seen():
    assert seen(ARRIVALS_MIN - 1, 10.0).expected(NOW) == []
    assert len(seen(ARRIVALS_MIN, 10.0).expected(NOW)) == ARRIVALS_MIN


def test_each_class_comes_back_at_its_own_rate_for_as_long_as_the_past_spans():
    a = Arrivals()
    for i in range(12):  # 12 low 1-GPU jobs over the last 120 s, one every 10 s (the first at NOW - 120)
        a.add(NOW - 120 + 10 * i, job(f"l{i}", 1, prio="low", name="sweep"))
    for i in range(3):  # 3 high 4-GPU jobs in that time
        a.add(NOW - 100 + 40 * i, job(f"h{i}", 4, prio="high", name="big"))
    got = a.expected(NOW)
    low = [t - NOW for t, j in got if j.workload.priority == "low"]
    high = [t - NOW for t, j in got if j.workload.priority == "high"]
    assert low == [10.0 * i for i in range(1, 13)]  # rate 12 / 120 s over the next 120 s
    assert high == [40.0, 80.0, 120.0]  # rate 3 / 120 s
    # each is its class's latest submission again: what predicts its runtime
    assert {j.name for t, j in got if j.workload.priority == "high"} == {"big"}
    assert len({j.id for _, j in got}) == len(got) and all(j.workload.created == t for t, j in got)
    assert got == sorted(got, key=lambda x: (x[0], x[1].id))  # deterministic, in time order


def test_only_the_last_arrivals_keep_count():
    a = seen(ARRIVALS_KEEP + 30, 1.0)
    assert len(a) == ARRIVALS_KEEP
    assert len(a.expected(NOW)) == ARRIVALS_KEEP


def test_expected_higher_priority_arrivals_push_a_low_priority_forecast_later():
    # 4 GPUs, all held until +30 s; a low-priority 2-GPU job waits. Ten high-priority 2-GPU
    # jobs of 100 s came over the last 90 s: ten are expected over the next 90 s, at +9, +18,
    # ... +90. Those that come before it would start without them (+30) go ahead: +9 and +18
    # take the GPUs at +30 until +130, then +27 and the low one. (Letting the later ones in
    # too would count them again: two at a time until +530; see test_only_the_arrivals_...)
    running = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    low = job("low", 2, NOW - 1, prio="low", limit=100.0)
    without = forecast(Snapshot(Q, running=running, pending=[low], now=NOW))["low"]
    assert without.expected_start == NOW + 30
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="high", limit=100.0).expected(NOW)
    assert [t - NOW for t, _ in arrivals] == [9.0 * i for i in range(1, 11)]
    fc = forecast(Snapshot(Q, running=running, pending=[low], now=NOW, arrivals=arrivals))["low"]
    assert fc.expected_start == NOW + 130
    assert "3 expected arrivals start first" in fc.basis
    # a normal-priority job is not passed by lower-priority arrivals of its shape
    lows = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="low", limit=100.0).expected(NOW)
    normal = job("normal", 2, NOW - 1, limit=100.0)
    fc2 = forecast(Snapshot(Q, running=running, pending=[normal], now=NOW, arrivals=lows))["normal"]
    assert fc2.expected_start == NOW + 30 and "arrival" not in fc2.basis


def test_smaller_arrivals_that_fit_first_pass_a_big_job_in_best_effort_fifo():
    # 2 of 4 GPUs free, 2 held until +50 s; a 4-GPU job waits. Ten 1-GPU jobs of 30 s came over
    # the last 45 s: expected at +4.5, +9, ... +45. Each fits before the big head does
    # (BestEffortFIFO): +4.5 and +9 take the free GPUs (to +34.5, +39), +13.5 and +18 take them
    # then (to +64.5, +69), +22.5 and +27 take r's at +50 (to +80), +31.5 and +36 at +64.5 and
    # +69, +40.5 and +45 at +80 (to +110): the big job starts at +110, not +50 (all ten came
    # before +50)
    running = [job("r", 2, NOW - 100, limit=None, expected_end=NOW + 50, started=NOW - 10)]
    big = job("big", 4, NOW - 1, limit=100.0)
    base = forecast(Snapshot(Q, running=running, pending=[big], now=NOW))["big"]
    assert base.expected_start == NOW + 50
    arrivals = seen(ARRIVALS_MIN, 5.0, gpus=1, limit=30.0).expected(NOW)
    fc = forecast(Snapshot(Q, running=running, pending=[big], now=NOW, arrivals=arrivals))["big"]
    assert fc.expected_start == NOW + 110 and "10 expected arrivals start first" in fc.basis
    # the range's early run leaves the arrivals out (r's progress end 25 % sooner: +37.5); the
    # late one keeps them
    lo, hi = fc.expected_start_range
    assert lo == NOW + 37.5 and hi >= fc.expected_start


def test_arrivals_whose_end_nothing_predicts_are_left_out():
    # without a limit, history or progress an arrival would hold its GPUs for ever: left out,
    # so the waiting job keeps a number
    running = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    low = job("low", 2, NOW - 1, prio="low", limit=100.0)
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="high", limit=None).expected(NOW)
    fc = forecast(Snapshot(Q, running=running, pending=[low], now=NOW, arrivals=arrivals))["low"]
    assert fc.expected_start == NOW + 30
    # with a history of the kind they have a runtime, and go ahead
    h = History()
    for _ in range(3):
        h.add("", "j", "q", 100.0)
    fc = forecast(Snapshot(Q, running=running, pending=[low], now=NOW, arrivals=arrivals, history=h))["low"]
    assert fc.expected_start == NOW + 130  # as with their limits of 100 s (grace 0)


def test_plan_counts_the_expected_arrivals_too():
    running = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="high", limit=100.0).expected(NOW)
    snap = Snapshot(Q, running=running, now=NOW, arrivals=arrivals)
    p = plan(snap, job("new", 2, NOW, prio="low", limit=100.0))
    assert not p.admit_now and p.expected_start == NOW + 130  # as in the forecast above
    # arrivals in a queue that shares no quota with the job change nothing
    other = [*Q, ClusterQueue("o", {"gpu": 4})]
    away = [(t, Job(wl(j.id, 2, t, "high", queue="o"), name="j", max_runtime_s=100.0, grace_period_s=0.0))
            for t, j in arrivals]
    p2 = plan(Snapshot(other, running=running, now=NOW, arrivals=away), job("new", 2, NOW, prio="low", limit=100.0))
    assert p2.expected_start == NOW + 30


def test_only_the_arrivals_before_a_jobs_start_without_them_are_counted_for_it():
    # two low jobs: one would start at +30, one at +130 without arrivals; high 2-GPU arrivals
    # of 100 s every 9 s: the first gets the 3 that come before +30, the second the 10 before +130
    running = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    a = job("a", 4, NOW - 2, prio="low", limit=100.0)
    b = job("b", 4, NOW - 1, prio="low", limit=100.0)
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="high", limit=100.0).expected(NOW)
    base = forecast(Snapshot(Q, running=running, pending=[a, b], now=NOW))
    assert (base["a"].expected_start, base["b"].expected_start) == (NOW + 30, NOW + 130)
    fc = forecast(Snapshot(Q, running=running, pending=[a, b], now=NOW, arrivals=arrivals))
    # a: +9, +18 at +30 (to +130), +27 at +130 with ... it needs 4: +27 holds 2 until +230, so
    # a starts at +230; b: all ten go first, two at a time from +30: +430 the last two (to
    # +530), then a (4 GPUs) to +630, then b
    assert fc["a"].expected_start == NOW + 230 and "3 expected arrivals start first" in fc["a"].basis
    assert fc["b"].expected_start == NOW + 630 and "10 expected arrivals start first" in fc["b"].basis


def test_beyond_arrivals_state_max_pending_jobs_the_arrivals_are_not_simulated(monkeypatch):
    from gpujobs.admission.forecast import simulate
    running = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    pending = [job("a", 4, NOW - 2, prio="low", limit=100.0), job("b", 4, NOW - 1, prio="low", limit=100.0)]
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="high", limit=100.0).expected(NOW)
    snap = Snapshot(Q, running=running, pending=pending, now=NOW, arrivals=arrivals)
    monkeypatch.setattr(simulate, "ARRIVALS_STATE_MAX", 1)  # a large state: the cost stays one run
    fc = forecast(snap)
    assert (fc["a"].expected_start, fc["b"].expected_start) == (NOW + 30, NOW + 130)
    plain = forecast(Snapshot(Q, running=running, pending=pending, now=NOW))
    assert fc["b"].expected_start_range == plain["b"].expected_start_range  # nor the late run (no past errors)


def test_arrivals_at_or_before_now_are_not_queued_and_do_not_take_a_later_ones_place():
    running = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    low = job("low", 2, NOW - 1, prio="low", limit=100.0)
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="high", limit=100.0).expected(NOW)
    stale = [(NOW - 5.0, job("(old)", 2, NOW - 5, "high", 100.0)), (NOW, job("(now)", 2, NOW, "high", 100.0))]
    fc = forecast(Snapshot(Q, running=running, pending=[low], now=NOW, arrivals=stale + arrivals))["low"]
    assert fc.expected_start == NOW + 130 and "3 expected arrivals start first" in fc.basis  # as without them


def test_a_big_job_that_later_arrivals_keep_passing_says_how_late_it_gets_while_they_come(monkeypatch):
    from gpujobs.admission.forecast import simulate
    # 2 of 4 GPUs free, r's 2 until +50; a 4-GPU job waits. 1-GPU jobs of 30 s come every 9 s
    # (+9 ... +90). Without them it starts at +50. The 5 before +50 go first: +9, +18 take the
    # free GPUs (to +39, +48), +27 and +36 take them then (to +69, +78), +45 one of r's at +50
    # (to +80): it starts at +80, the point. But +54, +63 and +72 come before +80 too: they pass
    # it as well, and with every expected arrival it starts at +120 (+54 at once to +84, +63 at
    # +69 to +99, +72 at +78 to +108, +81 at +80 to +111, +90 at +84 to +120). The point keeps
    # +80; the reason says +120 while the load goes on, and the range's late end reaches it.
    running = [job("r", 2, NOW - 100, limit=None, expected_end=NOW + 50, started=NOW - 10)]
    big = job("big", 4, NOW - 1, limit=100.0)
    arrivals = seen(ARRIVALS_MIN, 10.0, gpus=1, limit=30.0).expected(NOW)
    assert [t - NOW for t, _ in arrivals] == [9.0 * i for i in range(1, 11)]
    fc = forecast(Snapshot(Q, running=running, pending=[big], now=NOW, arrivals=arrivals))["big"]
    assert fc.expected_start == NOW + 80 and "5 expected arrivals start first" in fc.basis
    assert "; later jobs can go first: if the next 2 min bring as many as the last 2 min, it starts in ~2 min (" \
        in fc.reason
    assert fc.expected_start_range[1] == NOW + 120 and "late end with every expected arrival" in fc.basis
    # plan() says the same for a job not submitted yet
    p = plan(Snapshot(Q, running=running, now=NOW, arrivals=arrivals), job("new", 4, NOW, limit=100.0))
    assert p.expected_start == NOW + 80 and "can go first" in p.reason
    # a start with every arrival less than 1.5x the wait is left to the range (a 1.6x threshold here)
    monkeypatch.setattr(simulate, "OVERTAKEN_SAY", 1.6)
    fc = forecast(Snapshot(Q, running=running, pending=[big], now=NOW, arrivals=arrivals))["big"]
    assert "can go first" not in fc.reason and fc.expected_start_range[1] == NOW + 120


def test_a_job_no_later_arrival_can_pass_says_nothing_of_them():
    # every expected arrival comes before its start without them (the test above the last):
    # none is left to pass it; and a job whose class the arrivals cannot pass
    running = [job("r", 2, NOW - 100, limit=None, expected_end=NOW + 50, started=NOW - 10)]
    arrivals = seen(ARRIVALS_MIN, 5.0, gpus=1, limit=30.0).expected(NOW)
    fc = forecast(Snapshot(Q, running=running, pending=[job("big", 4, NOW - 1, limit=100.0)], now=NOW,
                           arrivals=arrivals))["big"]
    assert fc.expected_start == NOW + 110 and "go first" not in fc.reason and "every expected" not in fc.basis
    lows = seen(ARRIVALS_MIN, 10.0, gpus=2, prio="low", limit=100.0).expected(NOW)
    full = [job("r", 4, NOW - 100, limit=None, expected_end=NOW + 30, started=NOW - 20)]
    fc2 = forecast(Snapshot(Q, running=full, pending=[job("normal", 2, NOW - 1, limit=100.0)], now=NOW,
                            arrivals=lows))["normal"]
    assert fc2.expected_start == NOW + 30 and "go first" not in fc2.reason
