"""The agent's loop, driven in this process with real rank processes: finished jobs leave the
agent's memory (queries read them from SQLite), and ending an MPI / Ray gang cleans its
process tree up once, without holding the agent lock."""
from __future__ import annotations

import threading

import pytest

import gpujobs
from gpujobs.backends.local import agent as agent_mod
from gpujobs.backends.local import launch_mpi, launch_ray
from gpujobs.backends.local.agent import Agent
from gpujobs.backends.local.launch_mpi import job_processes
from gpujobs.errors import JobNotFound
from gpujobs.payload import open_envelope
from tests.local.inproc import drive, submit
from tests.ray_mpi.helpers import alive
from tests.support import interrupted_at_every_line

pytestmark = pytest.mark.slow


def say(value):
    print(f"said {value}", flush=True)
    return value


def sleep_long():
    import time as _t
    print("rank up", flush=True)
    _t.sleep(120)


def test_finished_jobs_leave_memory_and_are_read_from_sqlite(local_agent):
    agent = local_agent
    jobs = [submit(agent, gpujobs.job(say, i).ddp(gpus=1)) for i in range(2)]
    drive(agent, lambda: all(agent.status(j).terminal for j, _ in jobs), timeout=120)
    assert agent.recs == {}  # nothing finished stays in memory
    for i, (jid, jd) in enumerate(jobs):
        st = agent.status(jid)  # from SQLite now
        assert st.phase == "succeeded" and st.exit_code == 0
        assert [e.kind for e in st.events][-1] == "finished"
        assert f"said {i}" in "".join(jd.read_logs())
        assert open_envelope(jd.outcomes()[0], jd.key()).value == i
    listed = {s.job_id: s.phase for s in agent.jobs(None)}
    assert listed == {jid: "succeeded" for jid, _ in jobs}
    with pytest.raises(JobNotFound):
        agent.status("no-such-job")
    agent.cancel(jobs[1][0])  # cancelling a finished (pruned) job changes nothing …
    assert agent.status(jobs[1][0]).phase == "succeeded"
    with pytest.raises(JobNotFound):  # … but an id no one submitted is an error, not a no-op
        agent.cancel("no-such-job")
    with agent.lock:  # an idempotent re-submit of a pruned job is still recognised
        reply = agent.submit({"id": jobs[0][0], "spec": gpujobs.job(say, 0).ddp(gpus=1).spec().to_dict(),
                              "job_dir": str(jobs[0][1].root)})
    assert reply["ok"] and agent.recs == {}


@pytest.mark.parametrize("framework", ["mpi", "ray"])
def test_cancel_cleans_up_once_without_the_agent_lock(local_agent, monkeypatch, framework):
    agent = local_agent
    module = launch_mpi if framework == "mpi" else launch_ray
    real_kill_tree = module.kill_tree
    calls: list[bool] = []

    def counting_kill_tree(*args, **kwargs):
        got: list[bool] = []

        def take() -> None:  # what a client's request does
            got.append(agent.lock.acquire(timeout=2))
            if got[0]:
                agent.lock.release()
        t = threading.Thread(target=take)
        t.start()
        t.join()
        calls.append(got[0])  # True: another thread could take the agent lock meanwhile
        return real_kill_tree(*args, **kwargs)

    monkeypatch.setattr(module, "kill_tree", counting_kill_tree)
    monkeypatch.setattr(agent_mod, "CANCEL_GRACE_S", 0.5)
    b = gpujobs.job(sleep_long)
    b = b.mpi(ranks=2, gpus_per_rank=0) if framework == "mpi" else b.ray(workers=1, gpus_per_worker=0)
    jid, jd = submit(agent, b)
    if framework == "mpi":
        drive(agent, lambda: "rank up" in "".join(jd.read_logs()) and
              len(agent.recs[jid].gang.pids) >= 3)
    else:
        drive(agent, lambda: agent.recs[jid].status.phase == "running")
    with agent.lock:
        pids = list(agent.recs[jid].gang.pids)
        agent.cancel(jid)
    drive(agent, lambda: jid not in agent.recs or agent.recs[jid].gang is None, timeout=30)
    assert calls == [True], calls  # once, and the lock was free while it ran
    assert agent.status(jid).phase == "cancelled"
    assert alive(pids) == [] and job_processes(jid) == []
    assert agent.free == [0, 1]


def test_cancel_while_a_preempted_gang_is_being_ended_is_not_lost(local_agent):
    """A cancel that lands between the loop marking a preempted gang for ending and ending it
    must cancel the job, not let the preemption requeue it."""
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(sleep_long).ddp(gpus=1))
    drive(agent, lambda: "rank up" in "".join(jd.read_logs()))
    with agent.lock:  # what tick() does to a preemption victim, with its grace already over
        rec = agent.recs[jid]
        agent._update(rec, "preempted", "by a test", phase="preempted")
        agent._stop_gang(rec, "preempt", 0.0)
        ending = agent.tick()
    assert [r.id for r in ending] == [jid] and rec.ending
    with agent.lock:
        agent.cancel(jid)  # a client's cancel, while the gang is ended outside the lock
    result = agent._end_gang_safely(rec)
    with agent.lock:
        agent._ended(rec, result)
        agent._flush()
    st = agent.status(jid)
    assert st.phase == "cancelled" and "requeued" not in [e.kind for e in st.events]
    drive(agent, lambda: jid not in agent.recs)
    assert agent.status(jid).phase == "cancelled"


def test_an_error_while_ending_one_gang_does_not_stop_the_loop(local_agent, monkeypatch):
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(say, 1).ddp(gpus=1))

    def broken_end(rec):
        raise ProcessLookupError("gone already")

    monkeypatch.setattr(Agent, "_end_gang", staticmethod(broken_end))
    drive(agent, lambda: agent.status(jid).terminal)  # no exception out of step()
    st = agent.status(jid)
    assert st.phase == "failed" and "lost" in st.message


def _blocking_start(monkeypatch):
    """Gang.start waits for ``go`` (set by the test) after saying it began in ``began``."""
    from gpujobs.backends.local import gang as gang_mod
    began, go = threading.Event(), threading.Event()
    real_start = gang_mod.Gang.start

    def start(self):
        began.set()
        assert go.wait(60), "the test never let the gang start"
        return real_start(self)
    monkeypatch.setattr(gang_mod.Gang, "start", start)
    return began, go


def test_a_gang_is_started_without_the_agent_lock(local_agent, monkeypatch):
    """Forking ranks takes a while (a zygote round trip per rank): clients' requests, a burst
    of submits, are answered meanwhile; the ranks still wait until the start is stored."""
    agent = local_agent
    began, go = _blocking_start(monkeypatch)
    jid, jd = submit(agent, gpujobs.job(say, 7).ddp(gpus=1))
    loop = threading.Thread(target=agent.step)
    loop.start()
    assert began.wait(30)
    took = agent.lock.acquire(timeout=5)  # what a client's submit does
    if took:
        agent.lock.release()
    other, _ = submit(agent, gpujobs.job(say, 8).ddp(gpus=1)) if took else (None, None)
    go.set()
    loop.join(60)
    assert took, "the agent lock was held while the gang was being started"
    assert agent.status(jid).phase == "running" and agent.recs[jid].runtime["pids"]
    drive(agent, lambda: agent.status(jid).terminal and agent.status(other).terminal, timeout=120)
    assert agent.status(jid).phase == agent.status(other).phase == "succeeded"
    assert open_envelope(jd.outcomes()[0], jd.key()).value == 7
    assert agent.free == [0, 1]


def test_a_cancel_while_the_gang_is_being_started_stops_it_before_it_runs(local_agent, monkeypatch, tmp_path):
    """A cancel that lands while step() starts the gang (outside the lock) ends the job as
    cancelled: its ranks are killed at their start gate, the function never runs, the slots
    come back."""
    agent = local_agent
    began, go = _blocking_start(monkeypatch)
    marker = tmp_path / "ran"
    jid, _ = submit(agent, gpujobs.job(marker.touch).ddp(gpus=1))
    loop = threading.Thread(target=agent.step)
    loop.start()
    assert began.wait(30)
    with agent.lock:
        agent.cancel(jid)
        agent._flush()  # a concurrent request's flush must not drop the job being started
    go.set()
    loop.join(60)
    with agent.lock:
        pids = list(agent.recs[jid].gang.pids)
    drive(agent, lambda: jid not in agent.recs, timeout=60)
    st = agent.status(jid)
    assert st.phase == "cancelled" and "started" not in [e.kind for e in st.events]
    assert not marker.exists() and alive(pids) == []
    assert agent.free == [0, 1]


def test_a_job_admitted_again_while_its_gang_starts_or_runs_gets_no_second_gang(local_agent):
    """An admission decision for a job whose gang is starting or running starts nothing: the
    engine once listed a workload twice in one pass and the agent ran two gangs of one job."""
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(sleep_long).ddp(gpus=1))
    with agent.lock:
        agent.tick()
        rec = agent.recs[jid]
        assert [r.id for r, _ in agent.to_start] == [jid] and rec.starting
        agent._admit(rec)  # listed again while its gang is starting
        assert [r.id for r, _ in agent.to_start] == [jid] and agent.free == [1]
    drive(agent, lambda: agent.status(jid).phase == "running")
    with agent.lock:
        pids = list(rec.gang.pids)
        agent._admit(rec)  # and while it runs
        assert agent.to_start == [] and agent.free == [1] and rec.gang.pids == pids
        agent.cancel(jid)
    drive(agent, lambda: agent.status(jid).terminal and agent.free == [0, 1] and rec.gang is None)


def test_sigterm_between_any_two_lines_of_the_loops_wait_stops_the_agent(local_agent):
    """The SIGTERM handler may run while the main thread holds the wake Event's lock (in
    ``wait``'s reacquire or in ``clear``): setting the Event there deadlocked the agent."""
    import signal
    agent = local_agent

    def loop_wait():
        agent.wake.set()
        agent.wake.wait(0.01)
        agent.wake.clear()

    assert interrupted_at_every_line(loop_wait, lambda: agent._on_sigterm(signal.SIGTERM, None)), \
        "the SIGTERM handler deadlocked on the wake Event"
    assert agent.stopping and agent.exit_reason == "sigterm"
