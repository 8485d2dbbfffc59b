"""The lean zygote (issue 36): which gangs fork from the zygote without torch, that a job
forked from it still finds torch.distributed set up when it imports torch, and that cancel
and agent-crash recovery work for its ranks as for the torch zygote's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import gpujobs
from tests.local import lean_fns
from gpujobs.backends.local import agent_pids
from gpujobs.backends.local.lean import call_needs_torch, gang_is_lean, shipped_imports
from gpujobs.payload import seal
from gpujobs.spec import JobSpec
from gpujobs.payload.call import pack_call
from gpujobs.rank.shipping import _pack_modules
from tests.local.inproc import drive, submit

ROOT = Path(__file__).resolve().parents[2]
KEY = b"k" * 32


def sealed(fn, *args) -> bytes:
    """What a payload file holds: the packed call sealed as bytes (JobDir.create)."""
    return seal(pack_call(fn, args, {}, 1 << 22, shares_pythonpath=True), KEY)


def uses_torch_inside():
    import torch
    return os.getppid(), float(torch.zeros(1)[0])


# ------------------------------------------------------------------ the scan
def test_a_call_of_the_standard_library_alone_needs_no_torch():
    assert not call_needs_torch(sealed(lean_fns.where))
    assert not call_needs_torch(sealed(lean_fns.sleeps, 1.0, "x"))


def test_a_call_that_names_torch_or_a_third_party_module_needs_torch():
    assert call_needs_torch(sealed(uses_torch_inside))  # this test module imports pytest too
    assert call_needs_torch(sealed(lean_fns.sleeps, psutil.Process, "x"))  # a psutil global


def test_shipped_sources_count_by_what_they_import():
    assert shipped_imports(_pack_modules({"mine": ("import json\nimport mine2\n", False, None, None),
                                          "mine2": ("x = 1\n", False, None, None)})) == {"json"}
    assert shipped_imports(_pack_modules({"mine": ("import psutil\n", False, None, None)})) == {"psutil"}
    assert shipped_imports(_pack_modules({"mine": ("import torch\n", False, None, None)})) is None


def test_what_cannot_be_read_needs_torch():
    assert call_needs_torch(b"")
    assert call_needs_torch(b"not a payload at all")
    assert call_needs_torch(sealed(lean_fns.where)[:60])  # cut short


def test_which_gangs_are_lean(tmp_path):
    lean, torch = tmp_path / "lean.bin", tmp_path / "torch.bin"
    lean.write_bytes(sealed(lean_fns.where))
    torch.write_bytes(sealed(uses_torch_inside))
    assert gang_is_lean("ddp", 1, None, None, lean)
    assert not gang_is_lean("ddp", 1, None, None, torch)
    assert not gang_is_lean("ddp", 2, None, None, lean)  # peers to meet: torch.distributed first
    assert not gang_is_lean("ddp", 1, [[0]], None, lean)  # a real GPU: its device is set first
    assert not gang_is_lean("mpi", 1, None, None, lean)
    assert gang_is_lean("ddp", 4, None, ("python", "train.py"), torch)  # a command: no framework
    assert not gang_is_lean("ddp", 1, None, None, tmp_path / "missing.bin")


# ------------------------------------------------- the agent's choice of zygote
class FakeZygote:
    """A ready zygote that records the gangs it was asked to fork (and forks nothing: the
    ranks then start as fresh interpreters)."""

    def __init__(self):
        self.spawned: list[str] = []

    def ready(self, timeout: float = 0.0) -> bool:
        return True

    def alive(self) -> bool:
        return True

    def spawn(self, **kw):
        self.spawned.append(str(kw["log_path"]))
        raise OSError("a test zygote forks nothing")

    def close(self):
        pass


def test_a_lean_gang_forks_from_the_lean_zygote_and_a_torch_gang_from_the_torch_one(local_agent):
    agent = local_agent
    agent.zygote, agent.lean_zygote = torch_z, lean_z = FakeZygote(), FakeZygote()
    try:
        lean_id, _ = submit(agent, gpujobs.job(lean_fns.sleeps, 0, "lean").ddp(gpus=1))
        torch_id, _ = submit(agent, gpujobs.job(uses_torch_inside).ddp(gpus=1))
        drive(agent, lambda: agent.status(lean_id).terminal and agent.status(torch_id).terminal)
        assert [lean_id in p for p in lean_z.spawned] == [True]
        assert [torch_id in p for p in torch_z.spawned] == [True]
    finally:
        agent.zygote = agent.lean_zygote = None


def test_a_lean_gang_forks_from_the_torch_zygote_while_there_is_no_lean_one(local_agent):
    agent = local_agent
    agent.zygote = torch_z = FakeZygote()
    try:
        jid, _ = submit(agent, gpujobs.job(lean_fns.sleeps, 0, "lean").ddp(gpus=1))
        drive(agent, lambda: agent.status(jid).terminal)
        assert agent.status(jid).phase == "succeeded"
        assert [jid in p for p in torch_z.spawned] == [True]
    finally:
        agent.zygote = None



def test_a_deferred_zygote_starts_with_the_first_job_that_needs_it(local_agent, monkeypatch):
    """The daemon defers the zygote the agent's first job does not need (either one)."""
    agent = local_agent
    started: list[str] = []

    def start(lean: bool):
        started.append("lean" if lean else "torch")
        agent.use_zygote(FakeZygote(), time.monotonic(), lean=lean)

    monkeypatch.setattr(agent, "_start_zygote", lambda: start(False))
    monkeypatch.setattr(agent, "_start_lean_zygote", lambda: start(True))
    agent.use_zygote(FakeZygote(), time.monotonic())
    agent.lean_zygote_deferred = True  # what the daemon sets when its first job needs torch
    try:
        torch_ids = [submit(agent, gpujobs.job(uses_torch_inside).ddp(gpus=1))[0] for _ in range(2)]
        assert started == []
        lean_ids = [submit(agent, gpujobs.job(lean_fns.sleeps, 0, "lean").ddp(gpus=1))[0] for _ in range(2)]
        assert started == ["lean"] and not agent.lean_zygote_deferred
        drive(agent, lambda: all(agent.status(j).terminal for j in torch_ids + lean_ids))
        assert sorted(j for j in lean_ids if any(j in p for p in agent.lean_zygote.spawned)) == sorted(lean_ids)
        assert not any(j in p for j in lean_ids for p in agent.zygote.spawned)
    finally:
        agent.zygote = agent.lean_zygote = None


class _StartedAgent:
    """Stands for the agent in the daemon's main(): records the zygotes it is given."""
    last: "_StartedAgent | None" = None

    def __init__(self, home):
        self.zygotes: dict[bool, object] = {}
        _StartedAgent.last = self

    def use_zygote(self, zygote, started, lean=False):
        self.zygotes[lean] = zygote

    def run(self):
        pass


@pytest.mark.parametrize("first, torch_z, lean_z", [
    ("torch", True, False), ("lean", False, True), ("command", True, True), ("none", True, True)])
def test_the_daemon_starts_the_zygote_its_first_job_needs(gpujobs_home, monkeypatch, first, torch_z, lean_z):
    """Before: the lean zygote started with every agent, its imports competing with torch's
    for the CPU when the first job needed torch."""
    from gpujobs.backends.local import agent as agent_mod
    from gpujobs.backends.local import daemon
    from gpujobs.backends.local.jobdir import JobDir
    started: list[bool] = []
    monkeypatch.setattr(daemon, "start_zygote",
                        lambda home, log, lean=False: (started.append(lean) or f"z-{lean}", 1.0))
    monkeypatch.setattr(agent_mod, "Agent", _StartedAgent)
    specs = {"torch": gpujobs.job(uses_torch_inside).ddp(gpus=1).spec(),
             "lean": gpujobs.job(lean_fns.sleeps, 0, "lean").ddp(gpus=1).spec(),
             "command": JobSpec(command=("true",))}
    argv = ["--home", str(gpujobs_home)]
    if first in specs:
        spec = specs[first]
        JobDir(gpujobs_home / "jobs" / f"first-{first}").create(spec.to_dict(), spec.payload())
        argv += ["--for-job", f"first-{first}"]
    assert daemon.main(argv) == 0
    assert sorted(started) == sorted(lean for lean, want in ((False, torch_z), (True, lean_z)) if want)
    agent = _StartedAgent.last
    assert agent is not None and (agent.zygotes[False] is not None) == torch_z
    assert (agent.zygotes[True] is not None) == lean_z
    assert agent.torch_zygote_deferred == (not torch_z) and agent.lean_zygote_deferred == (not lean_z)


# ------------------------------------------------------- in a rank (real processes)
DEFERRED = """
import json, os, sys
from pathlib import Path
from gpujobs.rank import contract
from gpujobs.rank.context import JobContext
from gpujobs.rank.runner import frameworks
os.environ.update({contract.DEVICE: "cpu", contract.RENDEZVOUS_FILE: sys.argv[1],
                   "RANK": "0", "WORLD_SIZE": "1"})
ctx = JobContext(job_id="j", rank=0, world_size=1, local_rank=0, node_rank=0, device="?",
                 checkpoint_dir=Path("."), framework="ddp", restarts=0)
state = frameworks.setup("ddp", ctx)
loaded = "torch" in sys.modules
import torch.distributed as dist
out = [loaded, ctx.device, dist.is_initialized(), dist.get_world_size(), dist.get_backend()]
frameworks.teardown("ddp", state)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_one_cpu_rank_sets_up_torch_distributed_when_it_imports_torch(tmp_path):
    """Before: the set-up imported torch (a second of CPU) before every tiny function."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", DEFERRED, str(tmp_path / "rdzv")], env=env,
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, "cpu", True, 1, "gloo"]


@pytest.fixture
def agent(gpujobs_home, monkeypatch):
    """A real agent with two CPU slots, stopped at the end (conftest's gpujobs_home)."""
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    monkeypatch.setenv("GPUJOBS_AGENT_IDLE_S", "60")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return gpujobs_home


@pytest.mark.slow
def test_jobs_fork_from_the_zygote_they_need(agent):
    lean = gpujobs.submit(lean_fns.where, gpus=1)
    ppid, torch_loaded = lean.result(timeout=120)
    pids = agent_pids(agent)
    assert ppid == pids["lean_zygote"] and not torch_loaded
    assert pids["zygote"] is None  # the first job needed no torch: its zygote waits for a job that does
    late = gpujobs.submit(lean_fns.imports_by_a_name_built_at_run_time, gpus=1)
    assert late.result(timeout=300) == (pids["lean_zygote"], False, True, 1)
    heavy = gpujobs.submit(uses_torch_inside, gpus=1)
    ppid, zero = heavy.result(timeout=300)
    assert zero == 0.0 and ppid == agent_pids(agent)["zygote"] is not None


@pytest.mark.slow
def test_a_lean_rank_is_cancelled(agent, tmp_path):
    flag = tmp_path / "running"
    job = gpujobs.submit(lean_fns.touches, str(flag), 60.0, "never", gpus=1)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert time.monotonic() < deadline and not job.status().terminal, job.status()
        time.sleep(0.05)
    pid = int(flag.read_text())
    assert psutil.Process(pid).ppid() == agent_pids(agent)["lean_zygote"]
    job.cancel()
    assert job.wait(timeout=60).phase == "cancelled"
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the cancelled rank still runs"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_lean_rank_outlives_a_killed_agent_and_its_result_is_kept(agent, tmp_path):
    flag = tmp_path / "running"
    job = gpujobs.submit(lean_fns.touches, str(flag), 3.0, "survived", gpus=1)
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert time.monotonic() < deadline and not job.status().terminal, job.status()
        time.sleep(0.05)
    old = agent_pids(agent)
    assert psutil.Process(int(flag.read_text())).ppid() == old["lean_zygote"]
    os.kill(old["agent"], signal.SIGKILL)
    time.sleep(0.3)
    assert job.result(timeout=120) == "survived"  # the next call started a new agent
    assert agent_pids(agent)["agent"] != old["agent"]
    assert "adopted" in [e.kind for e in job.status().events]
