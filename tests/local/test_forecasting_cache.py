"""When and where the local agent computes forecasts (LocalForecasts): status views only read
the last refresh and never compute or wait for one; a refresh copies the records under the
agent's lock and simulates outside it; a burst of submits costs one refresh, not one per new
job; refreshes are paced (once a second after changes, never busier than half the time,
every REFRESH_S while asked); plan() simulates outside the lock. In-process agent, no rank
processes (nothing is started: the loop never runs); the simulation is a stand-in where a
test needs to hold or count it."""
from __future__ import annotations

import socket
import threading

import gpujobs
from gpujobs.admission.forecast import Forecast
from gpujobs.backends.local import forecasting, protocol
from gpujobs.backends.local.server import make_handler
from tests.local.inproc import submit


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


def queued(agent, n):
    """Submit ``n`` one-slot jobs with a declared limit (their forecasts get a start)."""
    return [submit(agent, gpujobs.job(nap, 60).ddp(gpus_per_node=1).max_runtime(600)
                   .name(f"j{len(agent.recs)}"))[0] for _ in range(n)]


def view(agent, jid):
    with agent.lock:  # what the server does for a status request
        return agent.status(jid)


def test_a_burst_of_submits_costs_one_forecast_not_one_per_new_job(local_agent, monkeypatch):
    runs = []
    real = forecasting.forecast
    monkeypatch.setattr(forecasting, "forecast", lambda snap: runs.append(1) or real(snap))
    jids = []
    for _ in range(12):  # each new job viewed right after its submit, as notebooks do
        jids += queued(local_agent, 1)
        assert view(local_agent, jids[-1]).reason == ""  # not computed by the view
    with local_agent.lock:
        local_agent.jobs(None)
    assert runs == []
    assert local_agent.forecasts.due()
    local_agent.forecasts.refresh()
    assert len(runs) == 1 and local_agent.forecasts.runs == 1
    views = [view(local_agent, j) for j in jids]
    assert all(st.expected_start is not None for st in views), views[:3]
    assert [st.queue_position for st in views] == list(range(1, 13))
    assert not local_agent.forecasts.due()  # nothing changed since


def test_status_and_jobs_are_answered_while_a_refresh_is_in_progress(local_agent, monkeypatch):
    jid, = queued(local_agent, 1)
    view(local_agent, jid)
    local_agent.forecasts.refresh()
    before = view(local_agent, jid)
    assert before.expected_start is not None
    started, release = threading.Event(), threading.Event()
    real = forecasting.forecast

    def held(snap):
        started.set()
        release.wait(60)
        return real(snap)

    monkeypatch.setattr(forecasting, "forecast", held)
    refresher = threading.Thread(target=local_agent.forecasts.refresh)
    refresher.start()
    try:
        assert started.wait(60)
        answers = []
        other = threading.Thread(target=lambda: answers.extend(
            [view(local_agent, jid), local_agent.jobs(None)]))
        other.start()
        other.join(30)  # a safety net: blocked on the lock, it would still be waiting
        assert not other.is_alive(), "status() waited for the forecast refresh"
        assert answers[0].expected_start == before.expected_start  # the last refresh's, while the next runs
        late, = queued(local_agent, 1)  # submit() does not wait either
        assert view(local_agent, late).phase == "queued"
    finally:
        release.set()
        refresher.join(60)
    assert local_agent.forecasts.runs == 2


def test_a_refresh_pushes_new_reasons_to_subscribers_of_queued_jobs(local_agent):
    import queue
    jid, = queued(local_agent, 1)
    q: queue.Queue = queue.Queue()
    with local_agent.lock:
        local_agent.subs[jid] = [q]
    view(local_agent, jid)
    local_agent.forecasts.refresh()
    rec = q.get(timeout=10)
    assert rec.id == jid and view(local_agent, jid).expected_start is not None


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_refreshes_are_paced(local_agent, monkeypatch):
    """After changes at most once per MIN_INTERVAL_S, and never sooner after a slow refresh than
    it took; while viewed, every REFRESH_S even without changes; never while nobody asks."""
    clock = Clock()
    monkeypatch.setattr(forecasting.time, "monotonic", clock)
    cost = [0.0]

    def fake(snap):
        clock.t += cost[0]
        return {j.id: Forecast(j.id, 5.0, "declared limit", f"reason {j.id}") for j in snap.pending}

    monkeypatch.setattr(forecasting, "forecast", fake)
    lf = local_agent.forecasts
    jid, = queued(local_agent, 1)
    assert not lf.due()  # changed, but nobody looked
    view(local_agent, jid)
    assert lf.due()
    lf.refresh()
    assert view(local_agent, jid).reason == f"reason {jid}"
    queued(local_agent, 1)  # a change within the second
    clock.t += 0.5
    assert not lf.due()
    clock.t += 0.6
    assert lf.due()
    cost[0] = 3.0  # a slow refresh (a long queue)
    lf.refresh()
    queued(local_agent, 1)
    view(local_agent, jid)
    clock.t += 2.0
    assert not lf.due()  # forecasting may take half the time at most
    clock.t += 1.1
    assert lf.due()
    cost[0] = 0.0
    lf.refresh()
    view(local_agent, jid)
    clock.t += forecasting.REFRESH_S - 0.1
    assert not lf.due()  # nothing changed
    clock.t += 0.2
    assert lf.due()  # time-left texts move
    lf.refresh()
    clock.t += 10 * forecasting.REFRESH_S
    assert not lf.due()  # nobody looked since


def test_the_forecaster_thread_refreshes_after_a_view(local_agent):
    jid, = queued(local_agent, 1)
    lf = local_agent.forecasts
    lf.start()
    try:
        view(local_agent, jid)  # asks: the thread wakes and refreshes
        done = threading.Event()

        def watch():
            while lf.runs == 0:
                lf._wake.wait(0.05)
            done.set()
        threading.Thread(target=watch, daemon=True).start()
        assert done.wait(60)
        assert view(local_agent, jid).expected_start is not None
    finally:
        lf.close()


def test_plan_through_the_agent_simulates_outside_its_lock(local_agent, monkeypatch):
    """The server's plan op takes the agent's lock only to copy the records."""
    free = []
    real = forecasting.plan

    def probing(snap, job):
        t = threading.Thread(target=lambda: free.append(local_agent.lock.acquire(timeout=30)
                                                         and (local_agent.lock.release() or True)))
        t.start()
        t.join(60)
        return real(snap, job)

    monkeypatch.setattr(forecasting, "plan", probing)
    queued(local_agent, 2)  # both slots taken (once the loop runs)
    spec = gpujobs.job(nap, 1).ddp(gpus_per_node=1).spec()
    client, served = socket.socketpair()
    try:
        protocol.send(client, {"op": "plan", "spec": spec.to_dict(), "name": "x"})
        client.shutdown(socket.SHUT_WR)
        make_handler(local_agent)(served, "", None)  # answers, then sees the end of input
        reply = protocol.raise_reply(protocol.LineReader(client).read())
    finally:
        client.close()
        served.close()
    assert free == [True]
    assert not reply["plan"]["admit_now"] and reply["plan"]["position"] == 1, reply  # after the two


def test_a_jobs_first_forecast_is_scored_when_it_starts_and_calibrates_the_ranges(local_agent):
    from gpujobs.status import JobEvent
    jid, = queued(local_agent, 1)
    view(local_agent, jid)
    local_agent.forecasts.refresh()
    fc = view(local_agent, jid)
    assert fc.expected_start is not None
    errs = local_agent.forecasts.start_errors
    assert len(errs) == 0
    at = dict(local_agent.forecasts.firsts.waiting())[jid]
    with local_agent.lock:  # the agent starts it 7 s after the forecast (its events say so)
        rec = local_agent.recs[jid]
        rec.status = rec.status.with_(events=rec.status.events + (JobEvent(at + 7.0, "started", "pids"),),
                                      started_at=at + 7.0)
        local_agent.forecasts.snapshot()
    assert len(errs) == 1 and errs._pairs[()][0] == (fc.expected_start - at, 7.0)
    assert jid not in local_agent.forecasts.firsts  # scored once


def test_a_finished_jobs_preemptions_teach_its_kinds_stop_time():
    from gpujobs.admission.forecast import History
    from gpujobs.status import JobEvent, JobStatus
    h = History()
    ev = (JobEvent(0.0, "submitted"), JobEvent(1.0, "started"), JobEvent(10.0, "preempted"),
          JobEvent(10.4, "requeued"), JobEvent(12.0, "started"), JobEvent(20.0, "preempted"),
          JobEvent(20.6, "requeued"), JobEvent(22.0, "started"), JobEvent(30.0, "preempted"),
          JobEvent(30.5, "requeued"), JobEvent(31.0, "started"), JobEvent(40.0, "finished"))
    st = JobStatus("j", "succeeded", name="sweep", user="ann", queue="q", started_at=31.0, finished_at=40.0,
                   events=ev)
    forecasting._learn(h, st, 60.0, 5.0)
    assert abs(h.stop_time("ann", "sweep") - 0.5) < 1e-9  # median of 0.4, 0.6, 0.5 s
    assert h.runtime("ann", "sweep", "q") == 9.0


def test_a_requeued_jobs_stop_times_are_learned_before_it_finishes_and_counted_once(local_agent):
    from gpujobs.status import JobEvent
    jid, = queued(local_agent, 1)
    fc = local_agent.forecasts
    h = fc.history
    ev = (JobEvent(1.0, "started"), JobEvent(10.0, "preempted"), JobEvent(10.4, "requeued"),
          JobEvent(12.0, "started"), JobEvent(20.0, "preempted"), JobEvent(20.6, "requeued"),
          JobEvent(22.0, "started"), JobEvent(30.0, "preempted"), JobEvent(30.5, "requeued"))
    with local_agent.lock:  # preempted three times, queued again now
        rec = local_agent.recs[jid]
        rec.status = rec.status.with_(events=rec.status.events + ev, restarts=3)
        fc.snapshot()
        fc.snapshot()
    name, user = rec.status.name, rec.status.user
    assert abs(h.stop_time(user, name) - 0.5) < 1e-9
    assert len(h._order[("stop", None, None)]) == 3  # two refreshes: learned once
    done = rec.status.with_(phase="succeeded", started_at=31.0, finished_at=40.0,
                            events=rec.status.events + (JobEvent(40.0, "finished"),))
    fc.note_finished(done, 600)
    assert len(h._order[("stop", None, None)]) == 3  # its end does not count them again


def test_submits_are_counted_as_arrivals_and_snapshots_expect_more_of_them(local_agent):
    from gpujobs.admission.forecast.arrivals import ARRIVALS_MIN
    queued(local_agent, ARRIVALS_MIN - 1)
    with local_agent.lock:
        assert local_agent.forecasts.snapshot().arrivals == []  # too few seen yet
    queued(local_agent, 1)
    with local_agent.lock:
        snap = local_agent.forecasts.snapshot()
    assert len(local_agent.forecasts.arrivals) == ARRIVALS_MIN
    assert len(snap.arrivals) == ARRIVALS_MIN  # one class (queue, 1 slot, default priority)
    assert all(t > snap.now and j.max_runtime_s == 600 and j.id not in local_agent.recs for t, j in snap.arrivals)
    pending = {j.id for j in snap.pending}
    assert len(pending) == ARRIVALS_MIN and not pending & {j.id for _, j in snap.arrivals}


def test_a_refresh_builds_the_queued_jobs_outside_the_agents_lock(local_agent, monkeypatch):
    """Under the lock a refresh only copies each record's facts: behind a long queue, building
    its jobs there kept status requests waiting (0.2 s per refresh behind 10,000 queued)."""
    jids = queued(local_agent, 3)
    view(local_agent, jids[0])
    free = []
    real = local_agent.workload

    def probing(rec):
        if not free and rec.id in jids:  # another thread can take the lock while jobs are built
            t = threading.Thread(target=lambda: free.append(local_agent.lock.acquire(timeout=5)
                                                             and (local_agent.lock.release() or True)))
            t.start()
            t.join(30)
        return real(rec)

    monkeypatch.setattr(local_agent, "workload", probing)
    local_agent.forecasts.refresh()
    assert free == [True]
    assert all(view(local_agent, j).expected_start is not None for j in jids)
