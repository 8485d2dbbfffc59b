"""The agent loop under bad decisions and errors, preemption grace periods, an unexpected
exit, and a zygote still warming up: an in-process Agent with real rank processes
(issue 22 [local-reliability], issue 14's grace-period item)."""
from __future__ import annotations

import time

import pytest

import gpujobs
from gpujobs.admission import Decisions
from gpujobs.backends.local import agent as agent_mod
from gpujobs.backends.local.agent import Agent
from tests.local.inproc import drive, submit
from tests.local.lean_fns import say_with_torch
from tests.ray_mpi.helpers import alive

pytestmark = pytest.mark.slow


def returns_in_grace(value):
    """Runs until told to stop, then returns (or raises) within its grace period."""
    import time as _t
    import gpujobs as _g
    print("rank up", flush=True)  # the runner's SIGTERM handler is in place by now
    while not _g.context().should_stop():
        _t.sleep(0.02)
    print("stop announced", flush=True)
    if isinstance(value, Exception):
        raise value
    return value


def ignores_stop():
    import time as _t
    print("rank up", flush=True)
    _t.sleep(120)


def say(value):
    return value


def events(agent, jid):
    return [e.kind for e in agent.status(jid).events]


def _preempt_when_running(agent, jid, jd):
    """A high-priority job that needs every slot: the scheduler preempts ``jid``."""
    drive(agent, lambda: "rank up" in "".join(jd.read_logs()))
    high, _ = submit(agent, gpujobs.job(say, "high").ddp(gpus=2).priority("high"))
    drive(agent, lambda: "preempted" in events(agent, jid))
    return high


@pytest.mark.parametrize("outcome", ["value", "error"])
def test_a_job_that_ends_during_its_grace_period_is_finished_not_requeued(local_agent, outcome):
    agent = local_agent
    arg = "in-grace" if outcome == "value" else ValueError("failed in grace")
    jid, jd = submit(agent, gpujobs.job(returns_in_grace, arg).ddp(gpus=1).priority("low")
                     .options(grace_period_s=30))
    high = _preempt_when_running(agent, jid, jd)
    drive(agent, lambda: agent.status(jid).terminal and agent.status(high).terminal, timeout=60)
    assert agent.status(high).phase == "succeeded"
    st = agent.status(jid)
    kinds = events(agent, jid)
    assert "requeued" not in kinds and kinds.count("started") == 1, kinds
    assert "stop announced" in "".join(jd.read_logs())
    from gpujobs.payload import open_envelope
    got = open_envelope(jd.outcomes()[0], jd.key())
    if outcome == "value":
        assert st.phase == "succeeded" and got.value == "in-grace"
    else:
        assert st.phase == "failed" and st.reason == "rank-failed"
        assert "preemption grace" in st.message and got.exc_type == "builtins.ValueError"
    assert agent.free == [0, 1]


def returns_but_lingers(value):
    """Returns once told to stop, but its process outlives the grace period (a slow teardown)."""
    import time as _t
    import gpujobs as _g
    import gpujobs.rank.runner.frameworks as _fw
    print("rank up", flush=True)
    while not _g.context().should_stop():
        _t.sleep(0.02)
    _fw.teardown = lambda *a, **k: _t.sleep(120)  # after the outcome is written
    print("returning", flush=True)
    return value


def test_a_job_that_returned_before_its_deadline_is_finished_though_its_process_lingered(local_agent):
    """Before: the outcome was not checked at the deadline: the gang was killed and run again."""
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(returns_but_lingers, "returned").ddp(gpus=1)
                     .priority("low").options(grace_period_s=3))
    high = _preempt_when_running(agent, jid, jd)
    drive(agent, lambda: agent.status(high).terminal
          and (agent.status(jid).terminal or "requeued" in events(agent, jid)), timeout=90)
    kinds = events(agent, jid)
    assert "returning" in "".join(jd.read_logs())
    assert "requeued" not in kinds and kinds.count("started") == 1, kinds
    assert agent.status(jid).phase == "succeeded", agent.status(jid).message
    from gpujobs.payload import open_envelope
    assert open_envelope(jd.outcomes()[0], jd.key()).value == "returned"


def test_a_preempted_job_killed_at_its_deadline_is_requeued_and_the_restart_is_in_its_logs(local_agent):
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(ignores_stop).ddp(gpus=1).priority("low")
                     .options(grace_period_s=0.5))
    high = _preempt_when_running(agent, jid, jd)
    drive(agent, lambda: "requeued" in events(agent, jid), timeout=30)
    logs = "".join(jd.read_logs())
    assert f"--- gpujobs: preempted by {high}; restart 1" in logs
    drive(agent, lambda: events(agent, jid).count("started") == 2, timeout=60)
    with agent.lock:
        agent.cancel(jid)
    drive(agent, lambda: jid not in agent.recs, timeout=30)


def test_a_workload_both_admitted_and_preempted_in_one_pass_is_not_started(local_agent, monkeypatch):
    """What Engine.schedule() did (issue 22): one workload admitted and preempted in the same
    pass. The agent requeued it and started it anyway, then crashed on the next admission
    (IndexError: pop from empty list)."""
    agent = local_agent
    real = agent.engine.schedule
    bad = []

    def schedule_once_bad():
        d = real()
        if d.admitted and not bad:
            bad.append([a.id for a in d.admitted])
            return Decisions(list(d.admitted), [*d.preempted, *((a.id, "x") for a in d.admitted)])
        return d

    monkeypatch.setattr(agent.engine, "schedule", schedule_once_bad)
    jobs = [submit(agent, gpujobs.job(say, i).ddp(gpus=2)) for i in range(2)]
    drive(agent, lambda: all(agent.status(j).terminal for j, _ in jobs), timeout=120)
    assert bad, "the bad decision was never made"
    for jid, _ in jobs:
        assert agent.status(jid).phase == "succeeded"
        assert events(agent, jid).count("started") == 1, events(agent, jid)
    assert agent.free == [0, 1]


def test_an_admission_with_too_few_free_slots_is_not_started(local_agent):
    agent = local_agent
    with agent.lock:
        agent.free = [0]  # the engine believes 2 slots are free
    jid, _ = submit(agent, gpujobs.job(say, 1).ddp(gpus=2))
    for _ in range(3):
        agent.step()
    assert agent.status(jid).phase == "queued" and agent.recs[jid].gang is None
    with agent.lock:
        agent.free = [0, 1]
    drive(agent, lambda: agent.status(jid).terminal)
    assert agent.status(jid).phase == "succeeded"


def test_an_error_in_a_loop_round_is_logged_and_the_loop_goes_on(gpujobs_home, monkeypatch, capsys):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    (gpujobs_home / "jobs").mkdir(exist_ok=True)
    agent = Agent(gpujobs_home)
    monkeypatch.setattr(agent, "_start_zygote", lambda: None)
    monkeypatch.setattr(agent, "_start_lean_zygote", lambda: None)
    rounds = []

    def step():
        rounds.append(1)
        if len(rounds) == 1:
            raise IndexError("pop from empty list")
        agent.request_stop()

    monkeypatch.setattr(agent, "step", step)
    agent.run()  # before: the IndexError ended the agent (and cancelled every running job)
    agent.store.close()
    assert len(rounds) == 2 and agent.exit_reason == "stop"
    assert "agent loop error (1 in a row), continuing" in capsys.readouterr().err


def test_an_unexpected_agent_exit_cancels_nothing_and_the_next_agent_adopts(local_agent):
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(ignores_stop).ddp(gpus=1))
    drive(agent, lambda: "rank up" in "".join(jd.read_logs()))
    pids = list(agent.recs[jid].gang.pids)
    agent.exit_reason = "IndexError: pop from empty list"
    agent._shutdown()
    st = agent.store.status(jid)
    assert st.phase == "running", st.message  # before: cancelled, "gpujobs agent stop"
    assert st.events[-1].kind == "agent-exited" and "unexpectedly" in st.events[-1].message
    assert alive(pids) == pids
    agent.recs.clear()  # this agent is gone
    agent.exit_reason = "stop"
    nxt = Agent(agent.home)
    nxt.seen = agent.seen
    try:
        assert "adopted" in events(nxt, jid) and nxt.recs[jid].gang.pids == pids
        with nxt.lock:
            nxt.cancel(jid)
        drive(nxt, lambda: jid not in nxt.recs, timeout=30)
        assert nxt.status(jid).phase == "cancelled"
    finally:
        nxt._shutdown()
        nxt.store.close()
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids) == []


class WarmingZygote:
    """A zygote that is still importing: records whether ``ready`` waited under the lock."""

    def __init__(self, agent):
        self.agent = agent
        self.waits: list[tuple[float, bool]] = []
        self.is_ready = False

    def ready(self, timeout: float = 0.0) -> bool:
        if timeout:
            self.waits.append((timeout, self.agent.lock._is_owned()))
            time.sleep(min(timeout, 0.05))
        return self.is_ready

    def alive(self) -> bool:
        return True

    def spawn(self, **kw):
        raise OSError("a test zygote forks nothing")  # ranks fall back to fresh interpreters

    def close(self):
        pass


def test_a_warming_zygote_is_waited_for_without_the_agent_lock(local_agent):
    agent = local_agent
    z = agent.zygote = WarmingZygote(agent)
    agent.zygote_started = time.monotonic()
    jid, _ = submit(agent, gpujobs.job(say_with_torch, 7).ddp(gpus=1))
    for _ in range(3):
        agent.step()
    assert z.waits and not any(owned for _, owned in z.waits), z.waits
    assert agent.status(jid).phase == "queued"  # admitted once the zygote is ready
    z.is_ready = True
    drive(agent, lambda: agent.status(jid).terminal)
    assert agent.status(jid).phase == "succeeded"
    agent.zygote = None


def test_a_zygote_that_never_warms_up_delays_admission_at_most_its_wait(local_agent, monkeypatch):
    agent = local_agent
    monkeypatch.setattr(agent_mod, "ZYGOTE_WAIT_S", 0.5)
    agent.zygote = WarmingZygote(agent)
    agent.zygote_started = time.monotonic()
    jid, _ = submit(agent, gpujobs.job(say_with_torch, 8).ddp(gpus=1))
    drive(agent, lambda: agent.status(jid).terminal)
    assert agent.status(jid).phase == "succeeded"
    agent.zygote = None
