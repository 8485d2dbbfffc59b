"""Agent.jobs(), the list behind ``gpujobs jobs`` and the jobs() call: newest first, live
jobs as their records show them and the others from the store, and the agent's lock held
for one slice of the list at a time (a status request waits for a slice, not for 10,000
jobs). In-process agent, nothing started."""
from __future__ import annotations

import threading

import gpujobs
from gpujobs.backends.local import agent as agent_mod
from tests.local.inproc import submit


def nap(seconds):
    import time as _t
    _t.sleep(seconds)


class CountingLock:
    """The agent's RLock, counting the views made during each outermost hold."""

    def __init__(self, agent):
        self.inner, self.depth, self.holds = threading.RLock(), 0, []
        real = agent.view

        def view(rec):
            self.holds[-1] += 1
            return real(rec)
        agent.view = view

    def __enter__(self):
        self.inner.acquire()
        self.depth += 1
        if self.depth == 1:
            self.holds.append(0)
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        self.inner.release()

    def acquire(self, *a, **k):
        return self.inner.acquire(*a, **k)

    def release(self):
        self.inner.release()


def test_jobs_lists_newest_first_and_holds_the_lock_a_slice_at_a_time(local_agent, monkeypatch):
    jids = [submit(local_agent, gpujobs.job(nap, 60).ddp(gpus_per_node=1).max_runtime(600)
                   .name(f"j{i}"))[0] for i in range(7)]
    with local_agent.lock:
        local_agent._flush()
    monkeypatch.setattr(agent_mod, "LIST_SLICE", 3)
    lock = CountingLock(local_agent)
    monkeypatch.setattr(local_agent, "lock", lock)
    listed = local_agent.jobs(None)
    assert [st.job_id for st in listed] == jids[::-1]
    assert lock.holds and max(lock.holds) <= 3 and sum(lock.holds) == 7, lock.holds
    with local_agent.lock:
        views = {jid: local_agent.view(local_agent.recs[jid]) for jid in jids}
    assert {st.job_id: st.queue_position for st in listed} == \
        {jid: st.queue_position for jid, st in views.items()}


def test_a_job_no_longer_live_is_listed_from_the_store(local_agent):
    jids = [submit(local_agent, gpujobs.job(nap, 60).ddp(gpus_per_node=1).name(f"s{i}"))[0]
            for i in range(2)]
    with local_agent.lock:
        local_agent._flush()
        stored = local_agent.recs.pop(jids[0]).status
    listed = {st.job_id: st for st in local_agent.jobs(None)}
    assert set(listed) == set(jids)
    assert listed[jids[0]] == stored
