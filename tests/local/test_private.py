"""Where the local agent's socket goes, and which job ids and folders the agent accepts
(gpujobs.backends.local.private; the attacks themselves: tests/security/test_local_isolation.py)."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from gpujobs.backends.local import private
from gpujobs.errors import SpecError, StateError


@pytest.fixture
def runtime(monkeypatch):
    """A temp dir of the test's own, no XDG_RUNTIME_DIR. Short, as /tmp is: pytest's tmp_path
    (longer under xdist's per-worker folders) would push a socket path past the AF_UNIX limit."""
    t = Path(tempfile.mkdtemp(prefix="gj-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(t))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield t
    shutil.rmtree(t, ignore_errors=True)


def test_short_private_home_holds_the_socket(tmp_path, runtime):
    home = tmp_path / "h"
    assert private.socket_path(home) == home / "agent.sock"  # missing: it will be made 0700
    private.make_home(home)
    assert private.socket_path(home) == home / "agent.sock"


def test_a_home_others_may_enter_or_a_long_one_sends_the_socket_to_the_runtime_folder(tmp_path, runtime):
    home = tmp_path / "h"
    private.make_home(home)
    os.chmod(home, 0o755)  # readable by others (an older gpujobs, a umask of 022)
    sock = private.socket_path(home)
    assert sock.parent == runtime / f"gpujobs-{os.geteuid()}" and sock.suffix == ".sock"
    long_home = tmp_path / ("y" * 100)
    assert private.socket_path(long_home).parent == sock.parent
    assert private.socket_path(long_home) != sock  # one socket per home
    assert len(str(private.socket_path(long_home))) < 100


def test_xdg_runtime_dir_is_used_only_when_private_ours_and_short(tmp_path, runtime, monkeypatch):
    xdg = Path(tempfile.mkdtemp(prefix="xdg-", dir="/tmp"))  # short, like /run/user/<uid>
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
        assert private.runtime_dir() == xdg / "gpujobs"
        os.chmod(xdg, 0o755)
        assert private.runtime_dir() == runtime / f"gpujobs-{os.geteuid()}"
    finally:
        os.rmdir(xdg)
    long_xdg = tmp_path / ("z" * 60)
    long_xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(long_xdg))  # no room left for a socket name
    assert private.runtime_dir() == runtime / f"gpujobs-{os.geteuid()}"


def test_runtime_folder_made_private_and_refused_when_not(tmp_path, runtime):
    folder = private.runtime_dir()
    old = os.umask(0)
    try:
        private.make_socket_dir(folder)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    os.chmod(folder, 0o755)
    with pytest.raises(StateError, match=f"chmod 700 {folder}"):
        private.make_socket_dir(folder)


@pytest.mark.parametrize("bad", ["", "..", "../x", "a/b", ".x", "x\x00y", "x y", "a" * 201, 7, None])
def test_job_ids_that_could_name_another_folder_are_refused(tmp_path, bad):
    private.make_home(tmp_path / "h")
    with pytest.raises(SpecError) as err:
        private.job_folder(tmp_path / "h", bad)
    assert err.value.field == "id"


def test_job_folder_must_be_a_private_real_folder_of_ours_in_jobs(tmp_path):
    home = tmp_path / "h"
    private.make_home(home)
    jd = home / "jobs" / "fn-abc123"
    with pytest.raises(SpecError, match="does not exist"):
        private.job_folder(home, "fn-abc123")
    jd.mkdir(mode=0o700)
    assert private.job_folder(home, "fn-abc123", str(jd)) == jd
    assert private.job_folder(home, "fn-abc123", str(home / "jobs" / "." / "fn-abc123")) == jd
    with pytest.raises(SpecError) as err:
        private.job_folder(home, "fn-abc123", str(tmp_path))
    assert err.value.field == "job_dir"
    os.chmod(jd, 0o750)
    with pytest.raises(SpecError, match="private"):
        private.job_folder(home, "fn-abc123")


def test_the_peer_checked_server_keeps_a_deep_listen_queue(tmp_path):
    """A burst of clients (a notebook's many status calls, a cold-start herd) queues at the
    agent's socket instead of getting EAGAIN: the peer-checked server listens with
    LISTEN_BACKLOG (the socketserver default is 5)."""
    import socket
    import socketserver

    from gpujobs.backends.local.server import LISTEN_BACKLOG, PeerCheckedServer
    path = tmp_path / "s.sock"
    server = PeerCheckedServer(str(path), socketserver.BaseRequestHandler)  # listening, not serving
    clients = []
    refused = 0
    try:
        for _ in range(min(200, LISTEN_BACKLOG)):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            clients.append(c)
            try:
                c.connect(str(path))
            except BlockingIOError:
                refused += 1
    finally:
        for c in clients:
            c.close()
        server.server_close()
    assert refused == 0
