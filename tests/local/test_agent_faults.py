"""The real agent process under faults (issue 22 [local-reliability]): killed while a job is
being preempted, 150 concurrent clients, a cold start by many clients at once, a full disk.
Each test stops the agent it started and checks that no rank it started survives."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from tests.support import fill, tmpfs_home

import gpujobs
from gpujobs.backends import get_backend
from gpujobs.backends.local import agent_pids
from gpujobs.backends.local.client import AgentClient
from gpujobs.errors import GpuJobsError, StateError

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(cond, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def agent_processes(home: Path) -> set[int]:
    """Agent processes of this home (the brief daemonize parent included)."""
    out = set()
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if "gpujobs.backends.local.daemon" in cmd and str(home) in cmd:
            out.add(p.pid)
    return out


class Sampler(threading.Thread):
    """Collects every agent process of ``home`` seen while it runs."""

    def __init__(self, home: Path):
        super().__init__(daemon=True)
        self.home, self.seen, self.stop = home, set(), threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.seen |= agent_processes(self.home)
            time.sleep(0.01)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()


def stubborn(marker: str):
    """Ignores the stop it is told about; records its pid per run and rank."""
    import os as _os
    import time as _t
    import gpujobs as _g
    ctx = _g.context()
    with open(f"{marker}/run-{ctx.restarts}-rank-{ctx.rank}.pid", "w") as fh:
        fh.write(str(_os.getpid()))
    _t.sleep(120)


def stamp(marker: str):
    import os as _os
    import time as _t
    import gpujobs as _g
    with open(f"{marker}/high-rank-{_g.context().rank}.start", "w") as fh:
        fh.write(repr(_t.time()))
    return _os.getpid()


def pid_files(marker: Path, run: int) -> list[int]:
    return [int(p.read_text()) for p in sorted(marker.glob(f"run-{run}-rank-*.pid")) if p.read_text()]


def test_agent_killed_while_a_job_is_preempted_ends_its_ranks_at_the_announced_deadline(
        gpujobs_home, monkeypatch, tmp_path):
    """Before: the restarted agent requeued the preempted job and freed its slots; nobody
    ended its old ranks, and the preemptor (then the job's second run) ran beside them."""
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    marker = tmp_path / "marks"
    marker.mkdir()
    grace = 4.0
    low = (gpujobs.job(stubborn, str(marker)).ddp(gpus=2).priority("low")
           .options(grace_period_s=grace).submit())
    _wait(lambda: len(pid_files(marker, 0)) == 2, 120, "the low job's ranks")
    old = pid_files(marker, 0)
    high = gpujobs.job(stamp, str(marker)).ddp(gpus=2).priority("high").submit()
    _wait(lambda: low.status().phase == "preempted", 60, "the preemption")
    preempted_at = [e.time for e in low.status().events if e.kind == "preempted"][-1]
    os.kill(agent_pids(gpujobs_home)["agent"], signal.SIGKILL)
    gone_at: list[float] = []

    def watch():
        while any(_alive(p) for p in old):
            time.sleep(0.02)
        gone_at.append(time.time())
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert isinstance(high.result(timeout=120), int)  # a new agent starts on this call
        watcher.join(timeout=30)
        assert gone_at, f"the preempted job's first run {old} still runs"
        high_started = min(float(p.read_text()) for p in marker.glob("high-rank-*.start"))
        # Its slots were not handed out while its old ranks lived (2 slots, never 4 ranks) …
        assert high_started >= gone_at[0] - 0.1, (high_started, gone_at[0])
        # … and they were ended at the deadline the first agent announced, not before.
        assert preempted_at + grace - 0.5 <= gone_at[0] <= preempted_at + grace + 8.0
        _wait(lambda: len(pid_files(marker, 1)) == 2, 120, "the low job's second run")
        assert not any(_alive(p) for p in old)
        kinds = [e.kind for e in low.status().events]
        assert "adopted" in kinds and kinds.count("requeued") == 1, kinds
    finally:
        low.cancel()
        low.wait(timeout=30)
    ranks = pid_files(marker, 0) + pid_files(marker, 1)
    _wait(lambda: not any(_alive(p) for p in ranks), 15, "the ranks to end")


def say(value):
    return value


def _run_at_once(call, n: int) -> None:
    """Run ``call`` in ``n`` threads (it waits on its own barrier, so they hit at once); join all."""
    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)


def test_150_concurrent_status_calls_no_error_one_agent(gpujobs_home, monkeypatch):
    """Before: 12 of 150 calls raised a raw BlockingIOError (listen backlog 5) and the clients
    started up to 61 agents at once."""
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    job = gpujobs.job(say, 1).ddp(gpus=1).submit()
    assert job.result(timeout=120) == 1
    agent = agent_pids(gpujobs_home)["agent"]
    backend = get_backend("local")
    n = 150
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []
    phases: list[str] = []

    def call():
        barrier.wait()
        try:
            phases.append(backend.status(job.id).phase)
        except BaseException as exc:  # noqa: BLE001 - counted
            errors.append(exc)

    with Sampler(gpujobs_home) as sampler:
        _run_at_once(call, n)
    assert errors == [], f"{len(errors)} errors, e.g. {errors[0]!r}"
    assert phases == ["succeeded"] * n
    assert sampler.seen == {agent}, sampler.seen
    assert agent_pids(gpujobs_home)["agent"] == agent


def test_many_clients_starting_the_agent_at_once_start_one(gpujobs_home, monkeypatch):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    (gpujobs_home / "jobs").mkdir(exist_ok=True)
    n = 40
    barrier = threading.Barrier(n)
    pids: list[int] = []
    errors: list[BaseException] = []

    def call():
        barrier.wait()
        try:
            pids.append(AgentClient(gpujobs_home).request({"op": "ping"})["pid"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    with Sampler(gpujobs_home) as sampler:
        _run_at_once(call, n)
    assert errors == [] and len(set(pids)) == 1 and len(pids) == n, (errors[:1], set(pids))
    # one start: the daemon and (briefly) its daemonize parent, not one agent per client
    assert len(sampler.seen) <= 2, sampler.seen


# ----------------------------------------------------------------- full disk
@pytest.fixture
def small_home(monkeypatch):
    """GPUJOBS_HOME on a 2 MiB tmpfs (root can mount one; skipped where mount is refused)."""
    with tmpfs_home(monkeypatch, "2m", "gpujobs-full-", GPUJOBS_LOCAL_GPUS="2",
                    GPUJOBS_AGENT_IDLE_S="60") as mnt:
        try:
            yield mnt
        finally:
            try:
                (mnt / "filler").unlink()
            except OSError:
                pass


def wait_then_big(gate: str):
    import os as _os
    import time as _t
    print("rank up", flush=True)
    while not _os.path.exists(gate):
        _t.sleep(0.05)
    return b"x" * 300_000  # a result that does not fit on the full disk


def sleep_long():
    import time as _t
    print("rank up", flush=True)
    _t.sleep(120)


def _no_empty(exc: BaseException) -> BaseException:
    assert str(exc).strip(), f"an error without a message: {exc!r}"
    return exc


def stored(home: Path) -> dict:
    from gpujobs.backends.local.store import Store
    store = Store(home / "state.db", readonly=True)
    try:
        return {jid: st for jid, _, st, _, _ in store.all()}
    finally:
        store.close()


def test_a_full_disk_is_survived_and_the_home_recovers(small_home, tmp_path):
    """Before: the failed state write ("cannot rollback - no transaction is active") ended the
    agent's loop, and every later call raised StateError('')."""
    home = small_home
    assert gpujobs.job(say, 2).ddp(gpus=1).submit().result(timeout=120) == 2
    gate = str(tmp_path / "go")
    big = gpujobs.job(wait_then_big, gate).ddp(gpus=1).submit()
    victim = gpujobs.job(sleep_long).ddp(gpus=1).submit()
    _wait(lambda: "rank up" in big.logs() and "rank up" in victim.logs(), 120, "the ranks")
    filler = fill(home)
    try:
        with pytest.raises(StateError) as info:
            gpujobs.job(say, 3).ddp(gpus=1).submit()
        msg = str(_no_empty(info.value))
        assert "No space left" in msg and "tmpfs" in msg and "bytes needed" in msg, msg
        victim.cancel()  # the agent keeps answering: cancel, status, jobs
        assert victim.wait(timeout=30).phase == "cancelled"
        Path(gate).touch()
        st = big.wait(timeout=60)
        assert (st.phase, st.reason) == ("failed", "disk-full"), (st.phase, st.reason, st.message)
        assert "could not be recorded" in st.message and "no space left on device" in st.message
        listed = {s.job_id: s.phase for s in gpujobs.jobs()}
        assert listed[big.id] == "failed" and listed[victim.id] == "cancelled"
    finally:
        filler.unlink()
    # Space is back: the agent writes what it could not, no manual repair; new jobs run.
    _wait(lambda: stored(home)[victim.id].phase == "cancelled"
          and stored(home)[big.id].reason == "disk-full", 30, "the state to be written")
    assert gpujobs.job(say, 4).ddp(gpus=1).submit().result(timeout=120) == 4
    # An agent killed (and restarted) while the disk is full: calls still answer.
    filler = fill(home)
    try:
        os.kill(agent_pids(home)["agent"], signal.SIGKILL)
        try:  # through an agent (a new one starts on the full disk), not the state file
            reply = AgentClient(home).request({"op": "jobs", "queue": None})
        except GpuJobsError as exc:
            _no_empty(exc)
            raise
        listed = {d["job_id"]: d["phase"] for d in reply["jobs"]}
        assert listed[big.id] == "failed" and listed[victim.id] == "cancelled"
    finally:
        filler.unlink()
    assert gpujobs.job(say, 5).ddp(gpus=1).submit().result(timeout=120) == 5


def test_an_agent_that_cannot_start_on_a_full_disk_says_why(small_home):
    """Before: StateError('') (the agent could not write its error file)."""
    home = small_home
    (home / "jobs").mkdir(exist_ok=True)
    filler = fill(home)
    try:
        with pytest.raises(GpuJobsError) as info:
            AgentClient(home).request({"op": "ping"})
        msg = str(_no_empty(info.value))
        assert "full" in msg or "space" in msg, msg
    finally:
        filler.unlink()
    assert AgentClient(home).request({"op": "ping"})["ok"]  # no repair needed
