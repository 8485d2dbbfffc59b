"""The local client's connections per call (issue 36: each connection costs the agent a
thread and a peer check, and the client its checks): with an agent running, ``status()`` and
``wait()`` ask it in one connection each, without a probe first; with none running, a
finished job is read from the stored state and no agent is started."""
from __future__ import annotations

import json
import socket

from gpujobs.backends.local.backend import LocalBackend
from gpujobs.status import JobStatus


class Replying:
    """``_connect()`` for an AgentClient: every connection is answered with ``status``."""

    def __init__(self, status: JobStatus):
        self.status, self.calls, self._ends = status, 0, []

    def __call__(self, timeout: float | None = None) -> socket.socket:
        mine, theirs = socket.socketpair()
        self._ends.append(theirs)
        self.calls += 1
        theirs.sendall((json.dumps({"ok": True, "status": self.status.to_dict()}) + "\n").encode())
        return mine


def test_status_and_wait_take_one_connection_each_on_a_running_agent(gpujobs_home, monkeypatch):
    backend = LocalBackend(gpujobs_home)
    agent = Replying(JobStatus(job_id="j-1", phase="succeeded"))
    monkeypatch.setattr(backend.client, "_connect", agent)
    assert backend.status("j-1").phase == "succeeded"
    assert agent.calls == 1, f"{agent.calls} connections for one status()"
    assert backend.wait("j-1").phase == "succeeded"
    assert agent.calls == 2, f"{agent.calls - 1} connections for one wait()"


def test_a_finished_job_is_read_from_the_state_when_no_agent_runs(gpujobs_home, monkeypatch):
    from gpujobs.backends.local.store import Store
    store = Store(gpujobs_home / "state.db")
    store.write([("j-2", 1, JobStatus(job_id="j-2", phase="succeeded"), {}, {})])
    store.close()
    backend = LocalBackend(gpujobs_home)
    spawned: list[bool] = []
    monkeypatch.setattr(backend.client, "_spawn_once", lambda: spawned.append(True))
    assert backend.status("j-2").phase == "succeeded"
    assert backend.wait("j-2", timeout=5).phase == "succeeded"
    assert spawned == []  # no agent was started to read it
