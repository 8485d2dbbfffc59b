"""Driving an in-process :class:`~gpujobs.backends.local.agent.Agent` (no socket, no zygote)
from a test: submit into it as LocalBackend.submit would, run its loop until a condition holds.
The fixture that makes one: ``local_agent`` (conftest.py)."""
from __future__ import annotations

import os
import secrets
import time

from gpujobs.backends.local.agent import Agent
from gpujobs.backends.local.gang import save_submitter_env
from gpujobs.backends.local.jobdir import JobDir


def submit(agent: Agent, builder) -> tuple[str, JobDir]:
    """What LocalBackend.submit does, straight into the in-process agent."""
    spec = builder.spec()
    jid = f"{spec.display_name}-{secrets.token_hex(3)}"
    jd = JobDir(agent.home / "jobs" / jid)
    jd.create(spec.to_dict(), spec.payload())
    save_submitter_env(jd.root)
    with agent.lock:
        agent.submit({"id": jid, "spec": spec.to_dict(), "name": spec.display_name,
                      "job_dir": str(jd.root), "cwd": os.getcwd(), "user": "test"})
    return jid, jd


def drive(agent: Agent, until, timeout: float = 60.0) -> None:
    """Run loop rounds until ``until()`` (called under the lock) holds."""
    deadline = time.monotonic() + timeout
    while True:
        agent.step()
        with agent.lock:
            for rec in agent.recs.values():
                if rec.gang is not None:
                    agent.seen.update(rec.gang.pids)
            if until():
                return
        assert time.monotonic() < deadline, "the agent loop did not get there in time"
        time.sleep(0.05)
