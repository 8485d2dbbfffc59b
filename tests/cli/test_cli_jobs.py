"""Real jobs through the installed ``gpujobs`` command on the local backend (2 CPU ranks)."""
from __future__ import annotations

import json
import os

import psutil
import pytest
import yaml

WORK = '''
import gpujobs

def double(x="21"):
    ctx = gpujobs.context()
    print(f"hello from rank {ctx.rank} of {ctx.world_size}", flush=True)
    return int(x) * 2 + ctx.rank

def boom():
    raise ValueError("boom on purpose")
'''


def survivors(home) -> list[psutil.Process]:
    """Processes (other than this one) whose environment points into this test's GPUJOBS_HOME."""
    out = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if any(str(home) in v for v in env.values()):
            out.append(p)
    return out


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
