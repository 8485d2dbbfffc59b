"""The local agent with real rank processes: queueing, preemption + resume, cancel, attach,
crash recovery, bad input. Each test stops the agent and checks no process survives."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

import gpujobs
from gpujobs.backends.local import agent_pids, stop_agent
from gpujobs.errors import JobCancelledError, JobFailedError, QuotaError, SpecError, StateError

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def agent(gpujobs_home, monkeypatch):
    """Two GPU slots; on teardown stop the agent and check that none of its processes live."""
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    seen: set[int] = set()

    def track(*jobs):
        for j in jobs:
            seen.update(j.backend.pids(j.id))
        seen.update(p for p in agent_pids(gpujobs_home).values() if p)
    yield track
    track()
    stop_agent(home=gpujobs_home)
    deadline = time.monotonic() + 10
    alive = seen
    while time.monotonic() < deadline:
        alive = {p for p in seen if _alive(p)}
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"processes survived the agent stop: {sorted(alive)}"
    assert not agent_pids(gpujobs_home)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_phase(job, phase: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        st = job.status()
        if st.phase == phase:
            return st
        assert time.monotonic() < deadline, f"{job.id} still {st.phase}, wanted {phase}"
        time.sleep(0.05)


def wait_for_file(path: str, value):
    import time as _t
    while not os.path.exists(path):
        _t.sleep(0.05)
    return value


def counting_job(n_steps: int, step_s: float):
    """A resumable loop; returns (sum, restarts, resumed_from)."""
    import time as _t
    import gpujobs.checkpoint as ck
    loop = ck.resumable(n_steps, state={"total": 0, "first": None})
    start = loop.position
    for step in loop:
        loop.state["total"] += step * step
        _t.sleep(step_s)
    return loop.state["total"], gpujobs.context().restarts, start


def sleeper(seconds: float, value):
    import time as _t
    _t.sleep(seconds)
    print(f"done sleeping {seconds}", flush=True)
    return value


def test_three_jobs_on_two_slots_queue_in_order(agent, tmp_path):
    gate = str(tmp_path / "go")
    jobs = [gpujobs.submit(wait_for_file, gate, i, gpus=2) for i in range(3)]
    wait_phase(jobs[0], "running")
    agent(*jobs)
    st1, st2 = jobs[1].status(), jobs[2].status()
    assert (st1.phase, st1.queue_position) == ("queued", 1)
    assert (st2.phase, st2.queue_position) == ("queued", 2)
    assert st1.position_text() == "1st in default"
    Path(gate).touch()
    assert [j.result(timeout=120) for j in jobs] == [0, 1, 2]
    kinds = [e.kind for e in jobs[2].status().events]
    assert kinds == ["submitted", "queued", "admitted", "started", "finished"]
    st = jobs[0].status()
    assert st.gang_size == 2 and st.gang_ready == 2 and st.exit_code == 0
    table = gpujobs.jobs()
    assert {s.job_id for s in table} >= {j.id for j in jobs}


def test_a_run_past_max_runtime_is_stopped_and_fails_with_time_limit(agent, tmp_path):
    """max_runtime_s is a limit, as sbatch --time and activeDeadlineSeconds are: before the fix
    the local agent let the job run on (it only fed the forecast)."""
    slow = (gpujobs.job(sleeper, 300, "never").ddp(gpus=1).max_runtime(2)
            .options(grace_period_s=1).submit())
    quick = gpujobs.job(sleeper, 0.2, "quick").ddp(gpus=1).max_runtime(120).submit()
    wait_phase(slow, "running")
    agent(slow, quick)
    pids = slow.backend.pids(slow.id)
    assert pids
    st = slow.wait(timeout=60)
    assert (st.phase, st.reason) == ("failed", "time-limit")
    assert "max_runtime_s is 2" in st.message and ".max_runtime(SECONDS)" in st.message
    assert 2 <= st.finished_at - st.started_at < 30
    with pytest.raises(JobFailedError, match="time limit"):
        slow.result(timeout=30)
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "the timed-out ranks were not stopped"
    assert quick.result(timeout=60) == "quick" and quick.status().phase == "succeeded"


def test_high_priority_preempts_and_low_resumes_from_checkpoint(agent):
    n, step_s = 60, 0.05
    expected = sum(i * i for i in range(n))
    low = (gpujobs.job(counting_job, n, step_s).ddp(gpus=2).priority("low")
           .options(grace_period_s=10).submit())
    wait_phase(low, "running")
    time.sleep(1.5)  # let it make progress
    agent(low)
    high = gpujobs.job(sleeper, 0.5, "high-done").ddp(gpus=2).priority("high").submit()
    assert high.result(timeout=120) == "high-done"
    total, restarts, resumed_from = low.result(timeout=180)
    assert total == expected  # same result as an uninterrupted run
    assert restarts == 1 and 0 < resumed_from < n
    st = low.status()
    kinds = [e.kind for e in st.events]
    assert kinds.count("preempted") == 1 and kinds.count("requeued") == 1
    assert kinds.index("preempted") < kinds.index("requeued") < len(kinds) - 1
    assert st.restarts == 1 and st.phase == "succeeded"
    hk = [e.kind for e in high.status().events]
    assert hk.index("admitted") > 0


def test_cancel_queued_job(agent, tmp_path):
    gate = str(tmp_path / "go")
    blocker = gpujobs.submit(wait_for_file, gate, "b", gpus=2)
    queued = gpujobs.submit(wait_for_file, gate, "q", gpus=2)
    last = gpujobs.submit(wait_for_file, gate, "l", gpus=2)
    wait_phase(blocker, "running")
    agent(blocker)
    assert last.status().queue_position == 2
    queued.cancel()
    st = queued.wait(timeout=10)
    assert st.phase == "cancelled" and "started" not in [e.kind for e in st.events]
    assert last.status().queue_position == 1
    with pytest.raises(JobCancelledError):
        queued.result()
    Path(gate).touch()
    assert blocker.result(timeout=60) == "b" and last.result(timeout=60) == "l"
    assert not list((Path(st.extra["job_dir"]) / "results").glob("outcome-*"))


def test_job_outlives_submitter_and_attach_reads_result(agent, gpujobs_home):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import gpujobs
        from tests.local.test_agent import sleeper
        job = gpujobs.submit(sleeper, 2.0, {{"answer": 42}}, gpus=1)
        print(job.id, flush=True)
    """)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ), timeout=60, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().splitlines()[-1]
    job = gpujobs.attach(job_id)
    assert not job.done(), "the job should still be running after its submitter exited"
    agent(job)
    assert job.result(timeout=60) == {"answer": 42}
    assert time.monotonic() - t0 >= 2.0
    assert "done sleeping 2.0" in job.logs()
    assert job.status().events[-1].kind == "finished"


def test_bad_queue_priority_and_quota_are_refused_with_numbers(agent, gpujobs_home):
    with pytest.raises(SpecError, match="unknown queue 'nope'; known: default"):
        gpujobs.job(sleeper, 0, 0).ddp(gpus=1).queue("nope").submit()
    with pytest.raises(SpecError, match="low=100, normal=500, high=1000"):
        gpujobs.job(sleeper, 0, 0).ddp(gpus=1).priority("urgent").submit()
    with pytest.raises(QuotaError, match="asks for 4 gpu and the local agent has 2 GPU slots.*at most 2"):
        gpujobs.submit(sleeper, 0, 0, gpus=4)  # more than the machine: its fix (test_machine_size.py)
    agent()
    assert list((gpujobs_home / "jobs").iterdir()) == []  # nothing half-created
    assert len(gpujobs.jobs()) == 0


def test_agent_crash_readopts_running_job(agent, gpujobs_home):
    job = gpujobs.submit(sleeper, 3.0, "survived", gpus=2)
    wait_phase(job, "running")
    agent(job)
    old = agent_pids(gpujobs_home)
    os.kill(old["agent"], signal.SIGKILL)
    time.sleep(0.3)
    assert job.result(timeout=60) == "survived"  # the next call started a new agent
    new = agent_pids(gpujobs_home)
    assert new["agent"] != old["agent"]
    kinds = [e.kind for e in job.status().events]
    assert "adopted" in kinds and job.status().phase == "succeeded"
    agent(job)


def test_agent_crash_with_ranks_gone_marks_job_lost(agent, gpujobs_home):
    job = gpujobs.submit(sleeper, 30.0, "never", gpus=2)
    wait_phase(job, "running")
    agent(job)
    pids = job.backend.pids(job.id)
    zyg = agent_pids(gpujobs_home)
    os.kill(zyg["agent"], signal.SIGKILL)
    os.kill(zyg["zygote"], signal.SIGKILL)
    for pid in pids:
        os.killpg(pid, signal.SIGKILL)
    time.sleep(0.3)
    st = job.wait(timeout=30)
    assert st.phase == "failed" and st.reason == "lost"
    assert "gone" in st.message or "lost" in st.message


def test_corrupt_state_is_a_state_error_and_kept(gpujobs_home, monkeypatch):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    db = gpujobs_home / "state.db"
    db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError, match="corrupt"):
        gpujobs.submit(sleeper, 0, 0, gpus=1)
    assert db.read_bytes() == b"this is not sqlite" * 100
    assert not agent_pids(gpujobs_home)


def test_unwritable_home_is_a_state_error(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        home = Path("/proc/gpujobs-cannot-exist")
    else:
        home = tmp_path / "ro"
        home.mkdir()
        home.chmod(0o500)
    monkeypatch.setenv("GPUJOBS_HOME", str(home))
    from gpujobs.backends import get_backend
    get_backend.cache_clear()
    with pytest.raises(StateError, match="GPUJOBS_HOME"):
        gpujobs.submit(sleeper, 0, 0, gpus=1)


def test_agent_exits_when_idle(gpujobs_home, monkeypatch):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "1")
    job = gpujobs.submit(sleeper, 0.1, 1, gpus=1)
    pids = agent_pids(gpujobs_home)
    assert job.result(timeout=60) == 1
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids.values() if p) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids.values() if p)
    assert gpujobs.attach(job.id).result() == 1  # read from the state, no agent needed
    assert not agent_pids(gpujobs_home)


def test_sigterm_to_the_agent_cancels_its_running_job_saying_so_and_the_agent_exits(agent, gpujobs_home):
    job = gpujobs.submit(sleeper, 120, "never", gpus=1)
    wait_phase(job, "running")
    agent(job)
    pid = agent_pids(gpujobs_home)["agent"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "the agent did not exit after SIGTERM"
        time.sleep(0.05)
    st = job.status()  # read from the store (a new agent starts for it)
    assert st.phase == "cancelled" and "SIGTERM" in (st.message or ""), (st.phase, st.message)
