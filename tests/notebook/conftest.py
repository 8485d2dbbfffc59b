"""Fixtures for the notebook tests: private GPUJOBS_HOME, a fresh InteractiveShell,
scripted job sources and a comm that records what widgets send."""
from __future__ import annotations

import pytest

from tests.notebook.nbscript import RecordingComm
from tests.support import ipython_shell


@pytest.fixture
def nb_env(gpujobs_home, monkeypatch):
    """The root conftest's private GPUJOBS_HOME, the local backend, default display."""
    monkeypatch.setenv("GPUJOBS_BACKEND", "local")
    monkeypatch.delenv("GPUJOBS_DISPLAY", raising=False)
    return gpujobs_home


@pytest.fixture
def shell(nb_env, tmp_path, monkeypatch):
    with ipython_shell(monkeypatch, tmp_path / "ipython") as sh:
        yield sh


@pytest.fixture
def recording_comm(monkeypatch):
    import comm
    RecordingComm.log = []
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(**kw))
    return RecordingComm
