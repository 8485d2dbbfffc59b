"""Fixtures for the notebook tests: private GPUJOBS_HOME, a fresh InteractiveShell,
scripted job sources and a comm that records what widgets send."""
from __future__ import annotations

import pytest

from tests.notebook.nbscript import RecordingComm


@pytest.fixture
def nb_env(gpujobs_home, monkeypatch):
    """The root conftest's private GPUJOBS_HOME, the local backend, default display."""
    monkeypatch.setenv("GPUJOBS_BACKEND", "local")
    monkeypatch.delenv("GPUJOBS_DISPLAY", raising=False)
    return gpujobs_home


@pytest.fixture
def shell(nb_env, tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    InteractiveShell.clear_instance()
    from traitlets.config import Config
    cfg = Config()
    cfg.HistoryManager.enabled = False  # no sqlite file left behind (or written at exit)
    sh = InteractiveShell.instance(config=cfg, colors="nocolor")
    sh.run_line_magic("load_ext", "gpujobs_magic")
    yield sh
    sh.run_line_magic("unload_ext", "gpujobs_magic")
    InteractiveShell.clear_instance()


@pytest.fixture
def recording_comm(monkeypatch):
    import comm
    RecordingComm.log = []
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(**kw))
    return RecordingComm
