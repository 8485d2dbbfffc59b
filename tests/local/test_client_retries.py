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
