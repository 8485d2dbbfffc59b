"""The real agent killed at the worst moments (issue 27 [local-reliability-2]): while its
zygote forks a gang, while zygote-less ranks finish, after a disk-full failure. Each test
stops what it started (by pid) and checks that no rank survives."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
from tests.local.lean_fns import say_with_torch
from tests.ray_mpi.helpers import alive
from tests.support import fill, tmpfs_home, wait_for

import gpujobs
from gpujobs.backends.local import agent_pids

pytestmark = pytest.mark.slow


def _wait(cond, timeout: float, what: str) -> None:
    try:
        wait_for(cond, timeout, every=0.02)
    except AssertionError:
        raise AssertionError(f"timed out waiting for {what}") from None


def append_rank(marker: str):
    """Each rank of each run appends its rank: one execution is one line per rank."""
    import time as _t

    import gpujobs as _g
    ctx = _g.context()
    with open(marker, "a") as fh:
        fh.write(f"{ctx.rank}\n")
    _t.sleep(1.0)  # the gang overlaps a second run, if there is one
    return ctx.rank


class ForkWatch(threading.Thread):
    """SIGKILLs the agent as soon as its zygote has a new child; records every child seen."""

    def __init__(self, agent: int, zygote: int):
        super().__init__(daemon=True)
        self.agent, self.zygote = agent, psutil.Process(zygote)
        self.before = {c.pid for c in self.zygote.children()}
        self.seen: set[int] = set()
        self.killed = threading.Event()
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                kids = {c.pid for c in self.zygote.children()} - self.before
            except psutil.NoSuchProcess:
                return
            self.seen |= kids
            if kids and not self.killed.is_set():
                os.kill(self.agent, signal.SIGKILL)
                self.killed.set()
            if self.killed.is_set():
                time.sleep(0.01)  # keep recording what the old zygote still forks


def test_agent_killed_while_its_zygote_forks_a_gang_runs_the_job_once(
        gpujobs_home, monkeypatch, tmp_path):
    """Before: the ranks already forked ran on unsupervised and the next agent started the
    job again (two executions, or two rank 0s hung in all_reduce on overcommitted slots)."""
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "4")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    assert gpujobs.job(say_with_torch, 1).ddp(gpus=1).submit().result(timeout=180) == 1  # a warm agent
    pids = agent_pids(gpujobs_home)
    _wait(lambda: pids["zygote"] is not None, 60, "the zygote")
    marker = tmp_path / "runs.txt"
    watch = ForkWatch(pids["agent"], pids["zygote"])
    watch.start()
    try:
        job = gpujobs.job(append_rank, str(marker)).ddp(gpus=4).submit()
        _wait(watch.killed.is_set, 120, "the zygote's first fork")
        assert job.result(timeout=300) == 0  # a new agent starts on this call
    finally:
        watch.stop.set()
        watch.join()
    lines = sorted(marker.read_text().split())
    assert lines == ["0", "1", "2", "3"], f"each rank must run once: {lines}"
    assert watch.seen, "the zygote forked nothing before the kill"
    _wait(lambda: not alive(watch.seen), 30, "the old ranks to end")
    st = job.status()
    assert st.phase == "succeeded", (st.phase, st.message)
    kinds = [e.kind for e in st.events]
    # The ranks forked before the kill were either stopped (not recorded as started) or, had
    # the start been recorded, adopted; and the job started once after that.
    assert "strays-stopped" in kinds or "adopted" in kinds, kinds
    assert kinds.count("started") == 1, kinds


def returns_when_told(gate: str, value):
    import os as _os
    import time as _t
    print("rank up", flush=True)
    while not _os.path.exists(gate):
        _t.sleep(0.02)
    return value


def test_zygote_less_ranks_that_finish_while_the_agent_is_down_are_not_lost(local_agent, tmp_path):
    """Before: ranks started without the zygote leave no exit file, and recovery marked the
    job `lost` although its signed result was on disk."""
    from tests.local.inproc import drive, submit

    from gpujobs.backends.local.agent import Agent
    agent = local_agent
    gate = tmp_path / "go"
    jid, jd = submit(agent, gpujobs.job(returns_when_told, str(gate), 42).ddp(gpus=2))
    drive(agent, lambda: "".join(jd.read_logs()).count("rank up") == 2)
    pids = list(agent.recs[jid].gang.pids)
    agent.exit_reason = "SIGKILL (simulated)"
    agent._shutdown()  # an unexpected exit: the ranks run on
    agent.recs.clear()
    agent.exit_reason = "stop"
    gate.touch()  # they return while no agent runs
    _wait(lambda: not alive(pids), 60, "the ranks to return")
    assert not list(jd.result_dir.glob("exit-*"))  # no zygote: no exit files
    nxt = Agent(agent.home)
    nxt.seen = agent.seen
    try:
        st = nxt.status(jid)
        assert (st.phase, st.reason) == ("succeeded", ""), (st.phase, st.reason, st.message)
        assert "while the agent was down" in st.events[-1].message
    finally:
        nxt._shutdown()
        nxt.store.close()
    assert gpujobs.attach(jid).result(timeout=30) == 42


def test_a_forged_result_is_not_taken_as_the_outcome_after_a_restart(local_agent, tmp_path):
    """A result that does not verify under the job's key is no outcome: the job is lost."""
    from tests.local.inproc import drive, submit

    from gpujobs.backends.local.agent import Agent
    from gpujobs.payload import new_key, seal
    agent = local_agent
    jid, jd = submit(agent, gpujobs.job(returns_when_told, str(tmp_path / "never"), 1).ddp(gpus=1))
    drive(agent, lambda: "rank up" in "".join(jd.read_logs()))
    pids = list(agent.recs[jid].gang.pids)
    agent.exit_reason = "SIGKILL (simulated)"
    agent._shutdown()
    agent.recs.clear()
    agent.exit_reason = "stop"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    _wait(lambda: not alive(pids), 30, "the ranks to die")
    (jd.result_dir / "outcome-0.bin").write_bytes(seal("forged", new_key()))
    nxt = Agent(agent.home)
    nxt.seen = agent.seen
    try:
        st = nxt.status(jid)
        assert (st.phase, st.reason) == ("failed", "lost"), (st.phase, st.reason, st.message)
    finally:
        nxt._shutdown()
        nxt.store.close()


@pytest.fixture
def small_home(monkeypatch):
    """GPUJOBS_HOME on a 2 MiB tmpfs (root can mount one; skipped where mount is refused)."""
    with tmpfs_home(monkeypatch, "2m", "gpujobs-full-", GPUJOBS_LOCAL_GPUS="2",
                    GPUJOBS_AGENT_IDLE_S="60") as mnt:
        yield mnt


def wait_then_big(gate: str):
    import os as _os
    import time as _t
    print("rank up", flush=True)
    while not _os.path.exists(gate):
        _t.sleep(0.05)
    return b"x" * 300_000  # a result that does not fit on the full disk


def test_a_disk_full_failure_keeps_its_cause_across_an_agent_restart(small_home, tmp_path):
    """Before: the failure lived only in the killed agent's memory; the next agent said
    `lost` ("the agent stopped while the job was running …")."""
    home = small_home
    gate = tmp_path / "go"
    big = gpujobs.job(wait_then_big, str(gate)).ddp(gpus=1).submit()
    _wait(lambda: "rank up" in big.logs(), 120, "the rank")
    filler = fill(home)
    try:
        gate.touch()
        st = big.wait(timeout=120)
        assert (st.phase, st.reason) == ("failed", "disk-full"), (st.phase, st.reason, st.message)
        os.kill(agent_pids(home)["agent"], signal.SIGKILL)
        again = big.status()  # through a new agent, the disk still full
        assert (again.phase, again.reason) == ("failed", "disk-full"), (again.reason, again.message)
        assert "no space left on device" in again.message, again.message
    finally:
        filler.unlink()
