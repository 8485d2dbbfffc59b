"""Real jobs through the installed ``gpujobs`` command on the local backend (2 CPU ranks)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from gpujobs.errors import BackendUnavailable

GPUJOBS = Path(sys.executable).parent / "gpujobs"

WORK = '''
import gpujobs

def double(x="21"):
    ctx = gpujobs.context()
    print(f"hello from rank {ctx.rank} of {ctx.world_size}", flush=True)
    return int(x) * 2 + ctx.rank

def boom():
    raise ValueError("boom on purpose")
'''


def survivors(home, job_id: str | None = None) -> list[psutil.Process]:
    """Processes (other than this one) whose environment points into this test's GPUJOBS_HOME;
    with ``job_id``, only that job's ranks (titled "gpujobs JOB rank R"), not the agent or its zygotes."""
    out = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if job_id is not None and not _titled_rank_of(p, job_id):
            continue
        if any(str(home) in v for v in env.values()):
            out.append(p)
    return out


def _titled_rank_of(p: psutil.Process, job_id: str) -> bool:
    """A rank forked by a zygote keeps the zygote's /proc environ; its title names the job."""
    try:
        return " ".join(p.cmdline()).startswith(f"gpujobs {job_id} rank ")
    except (psutil.Error, OSError):
        return False


@pytest.fixture
def jobs_cli(cli):
    (cli.cwd / "work.py").write_text(WORK)
    yield cli
    stop = cli("agent", "stop", timeout=60)
    assert stop.returncode == 0, stop.stderr
    left = survivors(cli.home)
    for p in left:  # only processes tied to this test's GPUJOBS_HOME
        p.kill()
    assert not left, f"processes survived the test: {[p.pid for p in left]}"


@pytest.mark.slow
def test_submit_wait_status_logs(jobs_cli):
    cli = jobs_cli
    r = cli("submit", "work.py:double", "5", "--gpus", "2", "--wait", "-o", "json", timeout=240)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert done["phase"] == "succeeded" and done["terminal"] is True
    assert done["result"] == 10          # rank 0: 5 * 2 + 0, unpickled after the HMAC check
    assert done["gang_size"] == 2 and done["gpus"] == 2
    assert "running" in r.stderr          # plain progress lines when stderr is not a terminal
    job_id = done["job_id"]

    st = cli("status", job_id, "-o", "json")
    assert st.returncode == 0, st.stderr
    d = json.loads(st.stdout)
    assert (d["job_id"], d["phase"], d["exit_code"]) == (job_id, "succeeded", 0)
    assert [e["kind"] for e in d["events"]][:1] == ["submitted"]
    assert yaml.safe_load(cli("status", job_id, "-o", "yaml").stdout)["phase"] == "succeeded"
    human = cli("status", job_id).stdout
    assert "Phase:" in human and "succeeded" in human

    logs = cli("logs", job_id)
    assert logs.returncode == 0
    assert "[rank 0] hello from rank 0 of 2" in logs.stdout
    assert "[rank 1] hello from rank 1 of 2" in logs.stdout
    one = cli("logs", job_id, "--rank", "1").stdout
    assert "[rank 1] hello" in one and "[rank 0]" not in one

    c = cli("cancel", job_id)
    assert c.returncode == 0 and "already succeeded" in c.stdout


@pytest.mark.slow
def test_failing_job_exits_1_with_the_remote_error(jobs_cli):
    r = jobs_cli("submit", "work.py:boom", "--gpus", "2", "--wait", timeout=240)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "ValueError: boom on purpose" in r.stderr
    assert "Traceback" not in r.stderr
    assert "failed" in r.stdout


SLEEPY = '''
import time

def sleepy():
    print("sleeping", flush=True)
    time.sleep(60)
'''


@pytest.mark.slow
def test_ctrl_c_while_waiting_exits_130_and_cancel_stops_the_job(jobs_cli):
    import signal
    import subprocess
    cli = jobs_cli
    (cli.cwd / "sleepy.py").write_text(SLEEPY)
    proc = subprocess.Popen([str(GPUJOBS),
                             "submit", "sleepy.py:sleepy", "--gpus", "1", "--wait", "-o", "json"],
                            cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        job_dir = cli.home / "jobs"
        job_id = None
        while time.time() < deadline:
            logs = list(job_dir.glob("*/logs/rank-0.log")) if job_dir.exists() else []
            if logs and "sleeping" in logs[0].read_text():
                job_id = logs[0].parent.parent.name
                break
            time.sleep(0.2)
        assert job_id, "the job never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "keeps running" in err and f"gpujobs cancel {job_id}" in err
    from gpujobs.backends import local
    if not hasattr(local, "stop_agent"):
        # First local backend (no agent): the gang lived in the CLI process; reap what it left.
        for p in survivors(cli.home):
            p.kill()
        pytest.skip("cancel from another process needs the local agent")
    assert survivors(cli.home, job_id), "the job's rank is not running (or not found) before the cancel"
    r = cli("cancel", job_id)
    assert r.returncode == 0, r.stderr
    assert json.loads(cli("status", job_id, "-o", "json").stdout)["phase"] == "cancelled"
    deadline = time.time() + 30  # the agent ends the rank; the fixture then checks the rest
    while (ranks := survivors(cli.home, job_id)) and time.time() < deadline:
        time.sleep(0.2)
    assert not ranks, f"the cancelled job's ranks still run: {[p.pid for p in ranks]}"


TYPED = '''
from pathlib import Path

def typed(n: int, scale: float = 1.0, loud: bool = False, out: Path = Path("."), tag="x"):
    print(f"typed n={n!r}", flush=True)
    return [sum(range(n)) * scale, loud, type(out).__name__, tag]
'''


@pytest.mark.slow
def test_submit_follow_prints_the_id_the_logs_and_converts_arguments(jobs_cli):
    cli = jobs_cli
    (cli.cwd / "typed.py").write_text(TYPED)
    r = cli("submit", "typed.py:typed", "15", "2", "yes", "/tmp", "t1", "--gpus", "1", "--follow",
            timeout=240)
    assert r.returncode == 0, r.stderr
    job_id = r.stderr.split("submitted ", 1)[1].split()[0]
    assert job_id.startswith("typed-")
    assert "[rank 0] typed n=15" in r.stdout          # the logs, followed
    assert "result: [210.0, True, 'PosixPath', 't1']" in r.stdout
    assert "passing" not in r.stderr  # tag="x": its default says str
    w = cli("submit", "typed.py:typed", "3", "--gpus", "1", "--wait", timeout=240)
    assert w.returncode == 0, w.stderr
    assert "submitted typed-" in w.stderr and "gpujobs logs typed-" in w.stderr
    assert "result: [3.0, False, 'PosixPath', 'x']" in w.stdout


@pytest.mark.slow
def test_agent_stop_stays_stopped_while_views_read_until_the_next_submit(jobs_cli):
    from gpujobs.backends.local.backend import HELD_MESSAGE, LocalBackend
    cli = jobs_cli
    (cli.cwd / "sleepy.py").write_text(SLEEPY)
    one_slot = {"GPUJOBS_LOCAL_GPUS": "1"}
    ids = []
    for _ in range(2):  # the first holds the only slot, the second queues behind it
        r = cli("submit", "sleepy.py:sleepy", "--gpus", "1", "-o", "name", env=one_slot)
        assert r.returncode == 0, r.stderr
        ids.append(r.stdout.strip())
    be = LocalBackend(home=cli.home)
    deadline = time.time() + 120
    while be.status(ids[0]).phase != "running" and time.time() < deadline:
        time.sleep(0.2)
    stop = cli("agent", "stop", env=one_slot)
    assert stop.returncode == 0 and "stays stopped" in stop.stdout, stop.stdout
    assert f"its running jobs were cancelled: {ids[0]}" in stop.stdout, stop.stdout
    # what a notebook's live views do: poll status, list the queue, subscribe, wait
    assert be.status(ids[0]).phase == "cancelled"
    queued = be.status(ids[1])
    assert queued.phase == "queued" and queued.message == HELD_MESSAGE
    assert {s.job_id for s in be.jobs()} == set(ids)
    assert be.wait(ids[1], timeout=1.0).phase == "queued"
    with pytest.raises(BackendUnavailable):  # a stopped agent: views read the saved state
        be.subscribe(ids[1], lambda st: None)
    time.sleep(1.0)
    assert not be.client.running(), "a read started the stopped agent again"
    r = cli("submit", "work.py:double", "1", "--gpus", "1", "-o", "name", env=one_slot)
    assert r.returncode == 0, r.stderr
    assert be.client.running()          # the next submit starts it
    assert cli("cancel", ids[1], r.stdout.strip(), env=one_slot).returncode == 0
    while be.status(r.stdout.strip()).phase != "cancelled" and time.time() < deadline:
        time.sleep(0.2)
    # #31: an agent with nothing running said "its running jobs were cancelled"
    again = cli("agent", "stop", env=one_slot)
    assert "no job was running" in again.stdout and "were cancelled" not in again.stdout, again.stdout
