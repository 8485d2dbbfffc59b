"""Fixtures of the local backend's tests."""
from __future__ import annotations

import time

import pytest

from gpujobs.backends.local.agent import Agent
from tests.ray_mpi.helpers import alive


@pytest.fixture
def local_agent(gpujobs_home, monkeypatch):
    """An Agent in this process (no socket, no zygote); its gangs are ended on teardown."""
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    (gpujobs_home / "jobs").mkdir(exist_ok=True)
    agent = Agent(gpujobs_home)
    seen: set[int] = set()
    agent.seen = seen
    yield agent
    with agent.lock:
        for rec in agent.recs.values():
            if rec.gang is not None:
                seen.update(rec.gang.pids)
    agent._shutdown()
    agent.store.close()
    deadline = time.monotonic() + 10
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(seen), f"processes survived: {alive(seen)}"
