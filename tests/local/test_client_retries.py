"""The local client under dropped connections (gpujobs.backends.local.client): retried with
backoff until a deadline, not once (issue 27: an agent-kill storm reached callers as
BackendUnavailable)."""
from __future__ import annotations

import json
import socket

import pytest

from gpujobs.backends.local.client import AgentClient
from gpujobs.errors import BackendUnavailable


class DroppingAgent:
    """``connect()`` for an AgentClient: the first ``drops`` connections are closed unanswered."""

    def __init__(self, drops: int):
        self.drops, self.calls, self._ends = drops, 0, []

    def __call__(self, start: bool = True, timeout: float | None = None) -> socket.socket:
        mine, theirs = socket.socketpair()
        self._ends.append(theirs)
        self.calls += 1
        if self.calls <= self.drops:
            theirs.close()  # the agent died with the request in flight
        else:
            theirs.sendall((json.dumps({"ok": True, "n": self.calls}) + "\n").encode())
        return mine


def test_a_dropped_connection_is_retried_with_backoff_until_it_answers(gpujobs_home, monkeypatch):
    client = AgentClient(gpujobs_home)
    agent = DroppingAgent(drops=4)
    monkeypatch.setattr(client, "connect", agent)
    sleeps: list[float] = []
    monkeypatch.setattr("gpujobs.backends.local.client.time.sleep", sleeps.append)
    assert client.request({"op": "ping"})["n"] == 5
    assert agent.calls == 5 and sleeps == sorted(sleeps) and sleeps[0] < sleeps[-1]


def test_retries_end_at_the_deadline_with_a_clear_error(gpujobs_home, monkeypatch):
    client = AgentClient(gpujobs_home)
    agent = DroppingAgent(drops=10 ** 6)
    monkeypatch.setattr(client, "connect", agent)
    clock = [0.0]
    monkeypatch.setattr("gpujobs.backends.local.client.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("gpujobs.backends.local.client.time.sleep",
                        lambda s: clock.__setitem__(0, clock[0] + s))
    with pytest.raises(BackendUnavailable, match="lost the gpujobs agent.*agent.log"):
        client.request({"op": "ping"}, deadline_s=20.0)
    assert 3 < agent.calls < 30 and clock[0] <= 20.0


def test_retries_zero_tries_once(gpujobs_home, monkeypatch):
    client = AgentClient(gpujobs_home)
    agent = DroppingAgent(drops=1)
    monkeypatch.setattr(client, "connect", agent)
    with pytest.raises(BackendUnavailable):
        client.request({"op": "agent_pids"}, retries=0)
    assert agent.calls == 1


def test_the_agent_a_client_started_is_polled_often_and_told_the_job_it_starts_for(
        gpujobs_home, monkeypatch):
    """The connect loop's backoff grew to 0.5 s while the agent it had started was booting,
    which could add that much to the first submit of a session; and the agent is told which
    job's submit started it (it then starts the torch zygote only if that job may need it)."""
    from gpujobs.backends.local import client as client_mod
    client = AgentClient(gpujobs_home)
    answers = iter([FileNotFoundError()] * 12 + [None])
    theirs: list[socket.socket] = []

    def connect_once(timeout):
        err = next(answers)
        if err is not None:
            raise err
        mine, other = socket.socketpair()
        other.sendall((json.dumps({"ok": True}) + "\n").encode())
        theirs.append(other)
        return mine
    spawned: list[list[str]] = []

    class Popen:
        def __init__(self, argv, **kw):
            spawned.append(argv)

        def wait(self, timeout=None):
            return 0
    alive = iter([False, False] + [True] * 100)  # the loop, the start lock, then it runs
    monkeypatch.setattr(client, "_connect", connect_once)
    monkeypatch.setattr(client, "agent_alive", lambda: next(alive))
    monkeypatch.setattr(client_mod.subprocess, "Popen", Popen)
    sleeps: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", sleeps.append)
    assert client.request({"op": "submit", "id": "job-1"})["ok"]
    assert len(spawned) == 1 and spawned[0][-2:] == ["--for-job", "job-1"]
    assert max(sleeps) <= client_mod.STARTING_POLL_S
