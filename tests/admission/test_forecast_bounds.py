"""What a forecast knows and says it knows (issue [eta-honest]): a true lower bound, the
grace period after a limit, progress ends capped at the enforced limit, a range around every
expected start, learned runtimes from declared vs actual. Numbers worked out by hand."""
from __future__ import annotations

from gpujobs.admission import ClusterQueue, PodSet, Workload
from gpujobs.admission.forecast import History, Job, Snapshot, forecast, plan
from gpujobs.progress import summarize

NOW = 50_000.0
Q = [ClusterQueue("q", {"gpu": 4})]


def wl(wid, gpus, t=0.0, queue="q", prio=None):
    return Workload(wid, queue, [PodSet("ranks", gpus, {"gpu": 1})], created=t, priority=prio)


def test_not_before_is_a_true_lower_bound_with_an_unlimited_and_a_generous_job():
    # the case: a running job without a limit plus one with a generous limit; the
    # generous one ended 6.8 s later and the job started then
    snap = Snapshot(Q, running=[Job(wl("nolimit", 2, NOW - 100), name="nolimit", started=NOW - 90),
                                Job(wl("generous", 2, NOW - 100), name="generous", started=NOW - 40,
                                    max_runtime_s=100)],
                    pending=[Job(wl("waits", 2, NOW - 1), name="waits", max_runtime_s=60)], now=NOW)
    actual_start = NOW + 6.8
    p = plan(snap, Job(wl("new", 2, NOW), name="new", max_runtime_s=60))
    assert p.not_before is not None and p.not_before <= actual_start
    fc = forecast(snap)["waits"]
    assert fc.not_before is not None and fc.not_before <= actual_start
    assert fc.expected_start is not None and fc.expected_start > actual_start  # the point forecast may be late


def test_limit_based_ends_include_the_grace_period():
    snap = Snapshot(Q, running=[Job(wl("r", 4), name="r", started=NOW - 100, max_runtime_s=600,
                                    grace_period_s=45)],
                    pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], now=NOW)
    # SIGTERM at 600 s, SIGKILL 45 s later: the quota comes back by 545 s from now at the latest
    assert forecast(snap)["w"].expected_start == NOW + 500 + 45


def test_progress_end_is_capped_at_limit_plus_grace():
    slow = Job(wl("r", 4), name="r", started=NOW - 100, max_runtime_s=300, grace_period_s=30,
               expected_end=NOW + 5000)  # its progress rate says far past its limit
    snap = Snapshot(Q, running=[slow], pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], now=NOW)
    fc = forecast(snap)["w"]
    assert fc.expected_start == NOW + 200 + 30 and "progress rate" in fc.basis


def test_progress_rate_window_restarts_at_each_start():
    # 2.5 steps/s for 40 s, preempted at step 100, queued 300 s, resumed at step 100 (its
    # checkpoint: the step does not go back), 2.5 steps/s again
    before = [{"rank": 0, "time": 1000.0 + t, "step": 2.5 * t, "total": 400.0, "metrics": {}} for t in range(0, 41, 4)]
    restart = 1340.0
    after = [{"rank": 0, "time": restart + t, "step": 100 + 2.5 * t, "total": 400.0, "metrics": {}}
             for t in range(0, 21, 4)]
    p = summarize(before + after, since=restart)
    assert p is not None and abs(p.rate - 2.5) < 1e-9
    assert abs(p.expected_end - (restart + 20 + (400 - 150) / 2.5)) < 1e-6
    assert summarize(before + after[:1], since=restart).rate is None  # one report of this run: no rate yet


def test_every_expected_start_has_a_range_around_it():
    h = History()
    for rt in (60, 300, 310, 320, 330, 340, 350, 360, 370, 900):  # ann/train: median 335 s
        h.add("ann", "train", "q", rt, 1800)
    snap = Snapshot(Q, running=[Job(wl("r", 4), user="ann", name="train", started=NOW - 10, max_runtime_s=1800)],
                    pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], history=h, now=NOW)
    fc = forecast(snap)["w"]
    early, late = fc.expected_start_range
    assert fc.expected_start == NOW - 10 + 335 and "history of similar jobs" in fc.basis
    assert early == NOW - 10 + 60  # the 10 % quantile of its history (of runs longer than 10 s)
    assert late == NOW - 10 + 1800 + 30  # its declared limit and grace: the most it can run
    assert early <= fc.expected_start <= late
    p = plan(snap, Job(wl("p", 4, NOW), name="p", max_runtime_s=60))
    assert p.expected_start_range is not None and p.expected_start_range[0] <= p.expected_start <= p.expected_start_range[1]


def test_learned_share_of_the_limit_beats_the_limit_when_the_user_has_history():
    h = History()
    for name, rt in (("a", 300), ("b", 400), ("c", 350)):  # bob's runs use ~1/3 of a 1000 s limit
        h.add("bob", name, "q", rt, 1000)
    snap = Snapshot(Q, running=[Job(wl("r", 4), user="bob", name="new-kind", started=NOW, max_runtime_s=3000)],
                    pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], history=h, now=NOW)
    fc = forecast(snap)["w"]
    assert fc.expected_start == NOW + 0.35 * 3000
    assert fc.basis == "expected ends from declared limit x the user's usual share of it"
    assert fc.expected_start_range[1] == NOW + 3000 + 30  # the late end stays on the declared limit


def test_an_unknown_end_gives_no_number_but_a_bound():
    snap = Snapshot(Q, running=[Job(wl("m", 4), name="m", started=NOW - 5)],
                    pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], now=NOW)
    fc = forecast(snap)["w"]
    assert fc.expected_start is None and fc.expected_start_range is None and fc.not_before == NOW


def test_the_forecast_engine_follows_the_snapshots_kueue_version():
    """A forecast simulates the scheduler of the Kueue version it is given (the local agent's
    [local] kueue_version, the cluster's on Kubernetes), not always the newest."""
    from gpujobs.admission.forecast.inputs import Snapshot
    from gpujobs.admission.gates import NEWEST
    assert Snapshot([], kueue_version="v0.17.0").engine().kueue_version == "v0.17.0"
    assert Snapshot([]).engine().kueue_version == NEWEST


def test_the_limit_wins_for_a_kind_whose_runs_end_at_their_limit():
    # runs that always use their whole (varying) limit: the limit + grace was 30 s off each time,
    # the median of past runtimes hundreds of seconds off: the kind's runs are predicted by the limit
    h = History()
    for lim in (100, 900, 200, 800, 300, 700, 150):
        h.add("cy", "tuned", "q", lim + 30, lim, grace_s=30)
    assert h.ranked("cy", "tuned", "q")[0] == "limit"
    snap = Snapshot(Q, running=[Job(wl("r", 4), user="cy", name="tuned", started=NOW - 10, max_runtime_s=1000)],
                    pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], history=h, now=NOW)
    fc = forecast(snap)["w"]
    assert fc.expected_start == NOW - 10 + 1000 + 30 and fc.basis == "expected ends from declared limit + grace"


def test_history_keeps_winning_where_limits_overestimate():
    h = History()
    for rt, lim in ((300, 1800), (320, 900), (310, 3600), (305, 1200), (315, 2400)):
        h.add("dee", "bench", "q", rt, lim)
    assert h.ranked("dee", "bench", "q")[0] in ("history", "learned")
    assert h.ranked("dee", "bench", "q")[-1] == "limit"
    assert h.ranked("nobody", "x", "q") == ("history", "learned", "limit")  # nothing compared yet


def test_a_victim_stops_after_its_kinds_usual_stop_time_not_its_whole_grace():
    h = History()
    for s in (1.5, 2.0, 2.5):  # its kind's past preemptions: out within ~2 s of the SIGTERM
        h.add_stop("low", "sweep", s)
    victim = Job(wl("v", 4, prio="low"), user="low", name="sweep", started=NOW - 50, grace_period_s=30,
                 max_runtime_s=600, stops_at=NOW - 1 + 30, preempted_by="w")  # preempted 1 s ago
    hi = Job(wl("w", 4, NOW - 2, prio="high"), name="w", max_runtime_s=60)
    snap = Snapshot(Q, running=[victim], pending=[hi], history=h, now=NOW)
    fc = forecast(snap)["w"]
    assert fc.expected_start == NOW - 1 + 2.0 and fc.basis == "victims' usual stop time"
    early, late = fc.expected_start_range
    assert early == NOW and late == NOW - 1 + 30  # it may exit at once; it is killed at the grace's end
    fresh = Snapshot(Q, running=[victim], pending=[hi], now=NOW)
    assert forecast(fresh)["w"].expected_start == NOW - 1 + 30  # nothing learned: the grace period


def test_the_range_comes_from_past_forecasts_errors_without_more_simulations(monkeypatch):
    from gpujobs.admission.forecast import StartErrors, simulate
    errs = StartErrors()
    for k in range(20):  # 4-GPU normal-priority jobs: forecast 100 s, started after 80..118 s
        errs.add(4, 0, 100.0, 80.0 + 2 * k)
    runs = []
    real = simulate._Sim.run
    monkeypatch.setattr(simulate._Sim, "run", lambda self: runs.append(self.mode) or real(self))
    snap = Snapshot(Q, running=[Job(wl("r", 4), name="r", started=NOW - 100, max_runtime_s=170, grace_period_s=30)],
                    pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)], now=NOW, start_errors=errs)
    fc = forecast(snap)["w"]
    assert fc.expected_start == NOW + 100 and runs == ["point"]
    # c = the mean actual wait (99 s); ratios (a + 99) / 199; the 10 % and 90 % quantiles are
    # the 2nd and 18th of 20: a = 82 and a = 114
    assert fc.expected_start_range == (NOW + 82.0, NOW + 114.0)
    assert fc.basis.endswith("; range from the errors of 20 past forecasts")
    runs.clear()
    p = plan(snap, Job(wl("p", 4, NOW), name="p", max_runtime_s=60))
    assert runs == ["point"] and p.expected_start_range is not None
    other = Snapshot(Q, running=snap.running, pending=snap.pending, now=NOW)  # no past errors: two more runs
    runs.clear()
    forecast(other)
    assert runs == ["point", "early", "late"]


def test_a_stopping_victim_does_not_cut_the_simulation_short():
    # a victim stopping 2 s from now for "hi"; "after" starts when hi ends (the victim's stop
    # time once cut the whole run short there: "beyond the forecast horizon" for every queued job)
    victim = Job(wl("v", 2, prio="low"), name="v", started=NOW - 50, grace_period_s=2, max_runtime_s=600,
                 stops_at=NOW + 2, preempted_by="hi")
    long = Job(wl("long", 2), name="long", started=NOW - 100, max_runtime_s=370, grace_period_s=30)
    hi = Job(wl("hi", 2, NOW - 3, prio="high"), name="hi", max_runtime_s=60)
    after = Job(wl("after", 2, NOW - 1), name="after", max_runtime_s=60)
    fcs = forecast(Snapshot(Q, running=[victim, long], pending=[hi, after], now=NOW))
    assert fcs["hi"].expected_start == NOW + 2
    assert fcs["after"].expected_start == NOW + 2 + 60 + 30  # when hi ends (before v, low, runs again)


def test_a_job_of_a_size_without_its_own_record_gets_the_simulated_range_too():
    """Pooled errors (other sizes' forecasts) said too little of a rare big job: on eta_replay
    8-GPU jobs started inside such a range 1 of 9 and 5 of 10 times. Without a record of its own
    size, the range is the pooled one widened by the early and late runs."""
    from gpujobs.admission.forecast import StartErrors
    errs = StartErrors()
    for _ in range(10):  # ten 1-GPU forecasts, each right: the pooled range is the point itself
        errs.add(1, 0, 10.0, 10.0)
    running = [Job(wl("r", 4), name="r", started=NOW - 100, max_runtime_s=170, grace_period_s=30)]
    snap = Snapshot(Q, running=running, pending=[Job(wl("w", 4, NOW - 1), name="w", max_runtime_s=60)],
                    now=NOW, start_errors=errs)
    fc = forecast(snap)["w"]
    assert fc.expected_start == NOW + 100  # r's limit + grace
    # early run: r may end now; late run: at its limit + grace
    assert fc.expected_start_range == (NOW, NOW + 100)
    assert "range from the errors of 10 past forecasts of other sizes, and the early and late runs" in fc.basis
    p = plan(snap, Job(wl("p", 4, NOW), name="p", max_runtime_s=60))
    # after w: early, r and w may both end now; late, r at +100 and w its 60 s + 30 s grace after
    assert p.expected_start == NOW + 190 and p.expected_start_range == (NOW, NOW + 190)
    for _ in range(20):  # its own size's record: that one alone
        errs.add(4, 0, 100.0, 100.0)
    assert forecast(snap)["w"].expected_start_range == (NOW + 100, NOW + 100)


def test_expected_runtime_gives_any_quantile_of_the_chosen_predictor():
    # eta_oracle's "sampled" column draws runtimes with q: history's nearest rank, the learned
    # share times the limit; the limit itself has no spread
    from gpujobs.admission.forecast import expected_runtime
    h = History()
    for rt in (10, 20, 30, 40, 50):
        h.add("ann", "sweep", "q", rt)
    ann = Job(wl("a", 1), user="ann", name="sweep")
    assert expected_runtime(ann, h)[0] == 30
    assert [expected_runtime(ann, h, q=q)[0] for q in (0.1, 0.4, 0.9)] == [10, 20, 50]
    assert expected_runtime(ann, h, elapsed=25, q=0.1) == (30, "history")  # of the runs longer than 25 s
    for name, rt in (("x", 100), ("y", 200), ("z", 300)):
        h.add("bob", name, "q", rt, 1000)  # bob uses 10-30 % of his limits
    bob = Job(wl("b", 1), user="bob", name="new-kind", max_runtime_s=2000)
    assert expected_runtime(bob, h, q=0.9) == (0.3 * 2000, "learned")
    limited = Job(wl("c", 1), user="cy", name="c", max_runtime_s=60)
    assert expected_runtime(limited, h, q=0.1) == expected_runtime(limited, h, q=0.9) == (90, "limit")
