"""Reasons, blocked_by and expected starts of queued local jobs, and plan(), with the agent
driven in this process and real (sleeping) rank processes. Queues come from a config file."""
from __future__ import annotations

import time

import pytest

import gpujobs
from gpujobs.backends.local.agent import Agent
from gpujobs.errors import QuotaError
from tests.local.inproc import drive, submit
from tests.ray_mpi.helpers import alive

pytestmark = pytest.mark.slow

CONFIG = """
[[local.queues]]
name = "solo"
gpus = 2
preemption = "Never"

[[local.queues]]
name = "team-a"
gpus = 2
cohort = "lab"

[[local.queues]]
name = "team-b"
gpus = 2
cohort = "lab"

[[local.queues]]
name = "strict"
gpus = 2
strategy = "StrictFIFO"
"""


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


@pytest.fixture
def agent(gpujobs_home, monkeypatch):
    """An Agent in this process (no socket, no zygote) with CONFIG's queues; its gangs are
    ended on teardown and none of their processes may survive."""
    (gpujobs_home / "config.toml").write_text(CONFIG)
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "8")
    (gpujobs_home / "jobs").mkdir(exist_ok=True)
    ag = Agent(gpujobs_home)
    ag.seen = set()
    yield ag
    with ag.lock:
        for rec in ag.recs.values():
            if rec.gang is not None:
                ag.seen.update(rec.gang.pids)
    ag._shutdown()
    ag.store.close()
    deadline = time.monotonic() + 10
    while alive(ag.seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(ag.seen), f"processes survived: {alive(ag.seen)}"


def job(name, queue, gpus, limit=None, prio=None, grace=None):
    b = gpujobs.job(nap, 120).ddp(gpus_per_node=gpus).queue(queue).name(name)  # slots (CPU ranks)
    if limit:
        b = b.max_runtime(limit)
    if prio:
        b = b.priority(prio)
    if grace is not None:
        b = b.options(grace_period_s=grace)
    return b


def running(agent, *jids):
    drive(agent, lambda: all(agent.recs[j].status.phase == "running" for j in jids), timeout=120)


def status(agent, jid):
    agent.forecasts.refresh()  # what the agent's forecaster thread does after a view
    with agent.lock:
        return agent.status(jid)


def test_no_quota_left_and_a_higher_priority_job_ahead(agent):
    r, _ = submit(agent, job("r", "solo", 2, limit=600))
    running(agent, r)
    started = agent.recs[r].status.started_at
    mine, _ = submit(agent, job("mine", "solo", 2, limit=60))
    urgent, _ = submit(agent, job("urgent", "solo", 2, limit=60, prio="high"))
    agent.step()
    st = status(agent, mine)
    assert st.phase == "queued" and st.queue_position == 2
    assert st.reason.startswith("needs 2 GPUs, 0 free in solo; ahead: r (running, ~10 min left), "
                                "urgent (1st, high, 2 GPUs)"), st.reason
    assert st.blocked_by == (r, urgent)
    # each limit binds 30 s (the default grace) after SIGTERM
    assert st.expected_start == pytest.approx(started + 630 + 90, abs=2)
    assert st.expected_start_basis == "expected ends from declared limit + grace (2 jobs)"
    assert "starts in ~12 min" in st.summary()
    assert st.not_before is not None and st.not_before <= time.time()  # r or urgent may end at once
    assert st.expected_start_range[0] <= st.expected_start <= st.expected_start_range[1]
    up = status(agent, urgent)
    assert up.expected_start == pytest.approx(started + 630, abs=2) and up.blocked_by == (r,)


def test_quota_held_by_a_borrower_of_another_queue(agent):
    big, _ = submit(agent, job("b-big", "team-b", 4, limit=300))  # team-b borrows team-a's 2
    running(agent, big)
    a, _ = submit(agent, job("exp-1", "team-a", 1))
    agent.step()
    st = status(agent, a)
    assert "needs 1 GPU, 0 free in team-a (cohort lab lends 0)" in st.reason, st.reason
    assert "team-b borrows 2 from cohort lab: b-big (running, ~5 min left)" in st.reason
    assert "reclaim_within_cohort=Never" in st.reason
    assert st.blocked_by == (big,)
    assert st.expected_start == pytest.approx(agent.recs[big].status.started_at + 330, abs=2)


def test_strict_fifo_head_blocks(agent):
    r, _ = submit(agent, job("r", "strict", 1, limit=100))
    running(agent, r)
    big, _ = submit(agent, job("big", "strict", 2, limit=50))
    small, _ = submit(agent, job("small", "strict", 1, limit=50))
    agent.step()
    st = status(agent, small)
    assert st.phase == "queued"
    assert "it would fit now, but strict is StrictFIFO: its head big (2 GPUs) must start first" in st.reason
    assert st.blocked_by[0] == big
    t0 = agent.recs[r].status.started_at
    assert st.expected_start == pytest.approx(t0 + 130 + 80, abs=2)  # limits + 30 s grace each


def test_waiting_for_victims_to_stop(agent):
    low, _ = submit(agent, job("low", "strict", 2, limit=3600, prio="low", grace=30))
    running(agent, low)
    hi, _ = submit(agent, job("hi", "strict", 2, limit=60, prio="high"))
    drive(agent, lambda: agent.recs[low].status.phase == "preempted")
    st = status(agent, hi)
    assert st.phase == "queued"
    assert "waiting for low to stop (preempted for it)" in st.reason, st.reason
    assert st.blocked_by[0] == low
    assert st.expected_start_basis == "victims' grace periods"
    assert time.time() < st.expected_start <= time.time() + 31


def test_can_never_fit_and_plan(agent):
    with pytest.raises(QuotaError, match="can never start in queue"):
        submit(agent, job("huge", "team-a", 5))
    with agent.lock:
        p = agent.forecasts.plan(job("huge", "team-a", 5).spec(), "huge")
    assert not p.admit_now and p.expected_start is None and p.position is None
    assert "can never be admitted: needs 5 gpu" in p.reason and p.summary().startswith("can never start")
    r, _ = submit(agent, job("r", "solo", 2, limit=120))
    running(agent, r)
    with agent.lock:
        now_ = agent.forecasts.plan(job("x", "team-a", 2, limit=60).spec(), "x")
        later = agent.forecasts.plan(job("y", "solo", 1, limit=60).spec(), "y")
    assert now_.admit_now and now_.preempts == () and now_.reason == "fits now (2 GPUs in team-a)"
    assert not later.admit_now and later.position == 1 and later.blocked_by == (r,)
    assert later.expected_start == pytest.approx(agent.recs[r].status.started_at + 150, abs=2)
    assert later.not_before is not None and later.not_before <= time.time()
    assert later.expected_start_range[0] <= later.expected_start <= later.expected_start_range[1]
    assert agent.engine.pending() == []  # nothing was queued


def stepper():
    import time as _t
    import gpujobs as _g
    ctx = _g.context()
    for i in range(1200):
        ctx.progress(i, total=1200)
        _t.sleep(0.1)


def test_progress_rate_beats_the_declared_limit(agent):
    """A running job that reports progress ends when its rate says, not at its limit."""
    r, _ = submit(agent, gpujobs.job(stepper).ddp(gpus_per_node=2).queue("solo").name("r")
                  .max_runtime(3600))
    w, _ = submit(agent, job("w", "solo", 2, limit=60))

    def has_rate():
        p = agent.recs[r].status.progress
        return p is not None and p.expected_end is not None
    drive(agent, has_rate, timeout=120)
    st = status(agent, w)
    end = agent.recs[r].status.progress.expected_end
    assert st.expected_start_basis == "expected ends from progress rate", st
    assert st.expected_start == pytest.approx(end, abs=5)
    assert st.expected_start < agent.recs[r].status.started_at + 600  # not the 3600 s limit


def torch_nap(seconds):
    import time as _t
    import torch  # noqa: F401 - a gang that needs the torch zygote
    _t.sleep(seconds)


class WarmingZygote:
    """A zygote still importing (never ready here): the agent holds admissions for it."""

    lean = False
    dead = False

    def ready(self, timeout: float = 0.0) -> bool:
        return False

    def alive(self) -> bool:
        return not self.dead

    def close(self):
        pass


def hold_for_zygote(agent, lean: bool, loading_for: float = 1.0) -> str:
    """A zygote (``lean`` or torch) that has been loading for ``loading_for`` s, and a job of
    the solo queue that needs it, submitted and given a scheduling pass; returns its id."""
    z = WarmingZygote()
    z.lean = lean
    if lean:
        agent.lean_zygote, agent.lean_started = z, time.monotonic() - loading_for
    else:
        agent.zygote, agent.zygote_started = z, time.monotonic() - loading_for
    mine, _ = submit(agent, gpujobs.job(nap if lean else torch_nap, 120).ddp(gpus_per_node=1)
                     .queue("solo").name("mine"))
    assert agent._lean(agent.recs[mine]) is lean
    agent.step()
    return mine


@pytest.mark.parametrize("lean", [False, True])
def test_a_job_held_for_a_loading_zygote_says_so_and_its_range_covers_the_wait(agent, lean):
    """Seen in eta_replay: the first job after the torch zygote was started waited 2-3 s with
    free quota while its status said "starts any moment (was due ...)" and gave no reason."""
    try:
        mine = hold_for_zygote(agent, lean)
        st = status(agent, mine)
        assert st.phase == "queued"
        what = "its Python runtime" if lean else "torch"
        assert st.reason.startswith(f"quota free; the agent is still loading {what} for its ranks "
                                    "(1 s so far; admissions wait for it up to 9 s more)"), st.reason
        assert f"admissions wait for the agent to load {what}" in st.expected_start_basis
        now = time.time()
        assert st.expected_start is not None and st.expected_start <= now  # it may be ready any moment
        assert st.not_before is not None and st.not_before <= now  # still a true lower bound
        assert st.expected_start_range[1] >= now + 8.5  # admissions wait at most ZYGOTE_WAIT_S
    finally:
        agent.zygote = agent.lean_zygote = None
    agent.step()
    assert status(agent, mine).phase in ("admitted", "running")


@pytest.mark.parametrize("lean", [False, True])
def test_a_job_held_for_a_loading_zygote_is_forecast_when_its_last_load_says(agent, lean):
    """An earlier agent's zygote took 4 s to load: 1 s into this one's load, the job is due in
    about 3 s (not "any moment"), the reason and basis say where that comes from; the range and
    the lower bound stay as without it. Past that time the start is any moment again."""
    from gpujobs.backends.local.zygote import LOAD_TIMES, load_times, record_load_time

    record_load_time(agent.home / LOAD_TIMES, lean, 4.0)
    agent.zygote_load_s = load_times(agent.home)  # as a new agent of this home reads it
    try:
        mine = hold_for_zygote(agent, lean)
        st = status(agent, mine)
        now = time.time()
        what = "its Python runtime" if lean else "torch"
        assert st.reason.startswith(f"quota free; the agent is still loading {what} for its ranks "
                                    "(1 s so far, 4 s last time; admissions wait for it up to 9 s more)"), st.reason
        assert f"admissions wait for the agent to load {what} (its last load took 4.0 s)" in st.expected_start_basis
        assert now + 2.0 <= st.expected_start <= now + 3.5
        assert st.expected_start_range[0] <= st.expected_start <= st.expected_start_range[1]
        assert st.expected_start_range[1] >= now + 8.5
        assert st.not_before is not None and st.not_before <= now
        if lean:
            agent.lean_started -= 4.0
        else:
            agent.zygote_started -= 4.0  # 5 s into the load now: longer than last time
        st = status(agent, mine)
        assert st.expected_start <= time.time()
        assert "(5 s so far, 4 s last time;" in st.reason
    finally:
        agent.zygote = agent.lean_zygote = None


def test_a_zygote_that_died_while_loading_holds_no_admission(agent):
    """Its ranks start as fresh interpreters: before, admissions waited out ZYGOTE_WAIT_S for a
    zygote that would never be ready."""
    agent.zygote, agent.zygote_started = WarmingZygote(), time.monotonic()
    agent.zygote.dead = True
    try:
        mine, _ = submit(agent, gpujobs.job(torch_nap, 0).ddp(gpus_per_node=1).queue("solo").name("mine"))
        agent.step()
        assert agent.recs[mine].status.phase in ("admitted", "running")
    finally:
        agent.zygote = None
