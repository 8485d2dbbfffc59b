"""Other users of the same machine against the local backend (issue 21, SECURITY.md).

The attacks are the ones the issue reports, run for real: the tests run as root and fork a
child that drops to ``nobody`` (uid 65534) and then uses only the standard library, as a
second user of the machine would. The child reports through a pipe.
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

import pytest

import gpujobs
from gpujobs.backends.local import protocol
from gpujobs.backends.local.client import AgentClient, agent_pids, stop_agent
from gpujobs.errors import SpecError, StateError

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


# ------------------------------------------------------------------------------ helpers
class Nobody:
    """A forked child running ``fn(report, drop)`` ; ``drop()`` makes it uid/gid 65534 (``fn``
    calls it, after any set-up that needs root). ``report(obj)`` sends one JSON line back."""

    def __init__(self, fn, *args, drop_first: bool = True):
        r, w = os.pipe()
        self._go_r, self._go_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: standard library only, always os._exit
            os.close(r)
            try:
                def report(obj):
                    os.write(w, (json.dumps(obj) + "\n").encode())

                def drop():
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                if drop_first:
                    drop()
                fn(report, drop, self._go_r, *args)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                os.write(w, (json.dumps({"child_error": repr(exc)}) + "\n").encode())
            finally:
                os._exit(0)
        os.close(w)
        self._r = os.fdopen(r)

    def line(self, timeout: float = 60.0) -> dict:
        ready, _, _ = select.select([self._r], [], [], timeout)
        assert ready, "the child reported nothing"
        out = json.loads(self._r.readline() or '{"child_error": "EOF"}')
        assert "child_error" not in out, out
        return out

    def go(self) -> None:
        os.write(self._go_w, b"x")

    def close(self) -> None:
        try:
            os.write(self._go_w, b"x")
        except OSError:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        self._r.close()


def _probe_agent(report, drop, go_r, path):
    """As another user: what the agent answers to ``jobs`` and ``stop`` on ``path``."""
    out = {}
    for op in ("jobs", "stop"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(15)
        try:
            s.connect(path)
        except OSError as exc:
            out[op] = f"connect refused: {exc}"
            continue
        try:
            s.sendall((json.dumps({"op": op}) + "\n").encode())
            out[op] = "reply: " + s.recv(1 << 16).decode(errors="replace")
        except OSError as exc:
            out[op] = f"closed: {exc}"
        finally:
            s.close()
    report(out)


def _planted_server(report, drop, go_r, path, bind_as_root):
    """A socket at ``path`` that another user listens on; reports what reached it."""
    if not bind_as_root:
        os.makedirs(os.path.dirname(path), mode=0o777, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    if bind_as_root:
        drop()  # the file is root's, the listener (SO_PEERCRED, set at listen) is nobody
    else:
        os.chmod(path, 0o777)
    srv.listen(4)
    report({"ready": True})
    got = {"connections": 0, "received": ""}
    while True:
        ready, _, _ = select.select([srv, go_r], [], [], 60)
        if srv in ready:  # before a "go": a connection may be waiting with it
            conn, _ = srv.accept()
            got["connections"] += 1
            conn.settimeout(2)
            try:
                got["received"] += conn.recv(1 << 16).decode(errors="replace")
            except OSError:
                pass
            conn.close()
        else:  # "go" (or a minute of nothing): done
            break
    report(got)


def answer():
    return 42


@pytest.fixture
def open_tmp():
    """A folder under /tmp that ``nobody`` may enter (pytest's own tmp folders are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="gpujobs-sec-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _private_home(home: Path) -> None:
    home.mkdir(mode=0o700)
    (home / "jobs").mkdir(mode=0o700)


def _use_home(monkeypatch, home: Path) -> None:
    from gpujobs.backends import get_backend
    monkeypatch.setenv("GPUJOBS_HOME", str(home))
    get_backend.cache_clear()


def _modes(root: Path) -> tuple[dict[str, int], set[str]]:
    """Permission bits of everything under ``root`` (relative names), and which are folders."""
    modes, dirs = {".": stat.S_IMODE(os.lstat(root).st_mode)}, {"."}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            modes[str(p.relative_to(root))] = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                dirs.add(str(p.relative_to(root)))
    return modes, dirs


# ------------------------------------------------------------------- another uid vs the agent
@pytest.mark.slow
def test_another_uid_cannot_list_or_stop_the_agent(open_tmp, monkeypatch):
    """The issue's attack: a second user connects with the standard library and sends
    ``{"op": "jobs"}`` and ``{"op": "stop"}``. The folders are opened up by hand first (as a
    shared group folder, an ACL or an admin's chmod would), so that only the agent's own
    SO_PEERCRED check stands between them: the connection is closed before any op."""
    home = open_tmp / "h"
    _use_home(monkeypatch, home)
    try:
        job = gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).submit()
        assert job.result(timeout=120) == 42
        before = agent_pids(home)["agent"]
        sock = protocol.socket_path(home)
        assert sock.parent == home  # the short private home holds it
        for p, mode in ((open_tmp, 0o711), (home, 0o711), (sock, 0o777)):
            os.chmod(p, mode)
        child = Nobody(_probe_agent, str(sock))
        try:
            seen = child.line()
        finally:
            child.close()
        for p, mode in ((home, 0o700), (sock, 0o600)):
            os.chmod(p, mode)
        for op in ("jobs", "stop"):
            assert not seen[op].startswith("connect refused"), seen  # it reached the agent …
            assert '"ok"' not in seen[op] and job.id not in seen[op], seen  # … and got nothing
        time.sleep(1.0)  # a stop would have taken effect by now
        assert agent_pids(home)["agent"] == before  # still the same, still running
        assert [j.job_id for j in gpujobs.jobs()] == [job.id]
        assert "refused a connection from uid 65534" in (home / "agent.log").read_text()
    finally:
        stop_agent(home)


@pytest.mark.slow
def test_submit_naming_a_folder_outside_jobs_is_refused(tmp_path, monkeypatch):
    """The agent runs a job from ``jobs/<id>`` only: a submit naming another folder (the
    issue's "point it at a folder of their own"), an id that climbs out, and a job folder
    that is a symlink out are refused before anything is queued or run."""
    home = tmp_path / "h"
    _use_home(monkeypatch, home)
    try:
        warm = gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).submit()
        warm.wait(timeout=120)
        spec = gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).spec().to_dict()
        evil = tmp_path / "evil"
        evil.mkdir(mode=0o700)
        client = AgentClient(home)
        cases = [
            ("outside-1", str(evil), "job_dir"),              # a folder of someone else's choosing
            ("../../evil", str(home / "jobs" / "../../evil"), "id"),  # climbs out of jobs/
            ("a/b", str(home / "jobs" / "a" / "b"), "id"),
            (".hidden", str(home / "jobs" / ".hidden"), "id"),
        ]
        (home / "jobs" / "linked-1").symlink_to(evil)  # no symlinks out of jobs/
        cases.append(("linked-1", str(home / "jobs" / "linked-1"), "job_dir"))
        for jid, job_dir, field in cases:
            with pytest.raises(SpecError) as err:
                client.request({"op": "submit", "id": jid, "spec": spec, "name": "x",
                                "job_dir": job_dir, "cwd": str(tmp_path), "user": "u"})
            assert err.value.field == field, (jid, err.value)
        assert [j.job_id for j in gpujobs.jobs()] == [warm.id]  # nothing was queued
    finally:
        stop_agent(home)


# ------------------------------------------------------------------- a socket another uid made
@pytest.mark.slow
def test_client_refuses_a_socket_planted_by_another_uid(open_tmp, tmp_path, monkeypatch):
    """A home too long for AF_UNIX puts the socket in a runtime folder under the temp dir.
    Another user (here in a 1777 temp dir) takes the predicted name first and listens: the
    client refuses it and sends nothing (nor does it start an agent into their folder)."""
    os.chmod(open_tmp, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(open_tmp))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    home = tmp_path / ("long-" + "x" * 100)
    _use_home(monkeypatch, home)
    sock = protocol.socket_path(home)
    assert str(sock).startswith(str(open_tmp))
    child = Nobody(_planted_server, str(sock), False)
    try:
        assert child.line()["ready"]
        with pytest.raises(StateError, match="uid 65534") as err:
            AgentClient(home).request({"op": "jobs"})
        assert str(sock.parent) in str(err.value)
        with pytest.raises(StateError, match="uid 65534"):  # nor does it start an agent there
            gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).submit()
        assert not any((home / "jobs").iterdir())
        child.go()
        got = child.line()
    finally:
        child.close()
        shutil.rmtree(sock.parent, ignore_errors=True)  # the planted folder
        stop_agent(home)  # (none should run)
    assert got == {"connections": 0, "received": ""}, got


@pytest.mark.slow
def test_client_refuses_a_listener_of_another_uid_and_a_socket_file_of_another_uid(tmp_path,
                                                                                   monkeypatch):
    """In a private home: (1) a socket file that belongs to another uid is refused before
    connecting; (2) a socket file of ours with another uid's process listening on it (it
    bound as root, then dropped to nobody) is refused after connecting (SO_PEERCRED),
    before a byte is sent."""
    home = tmp_path / "h"
    _private_home(home)
    _use_home(monkeypatch, home)
    sock = protocol.socket_path(home)
    assert sock.parent == home
    child = Nobody(_planted_server, str(sock), True, drop_first=False)
    try:
        assert child.line()["ready"]
        with pytest.raises(StateError, match="runs as uid 65534"):
            AgentClient(home).request({"op": "jobs"}, start=False)
        os.chown(sock, NOBODY, NOBODY)
        with pytest.raises(StateError, match=re.escape(f"{sock} belongs to uid 65534")):
            AgentClient(home).request({"op": "jobs"})
        child.go()
        got = child.line()
    finally:
        child.close()
        try:
            sock.unlink()
        except OSError:
            pass
    assert got["received"] == "", got  # nothing was ever sent to another uid's process
    assert got["connections"] == 1, got  # (2) connected (that is how its uid is learnt); (1) never


# ------------------------------------------------------------------------------ umask
@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o002, 0o000])
def test_state_is_private_under_a_loose_umask(umask, open_tmp, monkeypatch):
    """The issue's set-up: GPUJOBS_HOME made inside a setgid group folder (drwxrwsr-x) under
    umask 002 (and 000). Every folder gpujobs makes is 0700; the database, logs, key,
    payload, spec and environment files are 0600; the socket 0600 in a 0700 folder."""
    shared = open_tmp / "group-share"
    shared.mkdir()
    os.chmod(shared, 0o2775)
    home = shared / "me" / "gpujobs"
    _use_home(monkeypatch, home)
    old = os.umask(umask)
    try:
        job = gpujobs.job(answer).ddp(gpus_per_node=0, procs_per_node=1).submit()
        assert job.result(timeout=120) == 42
        sock = protocol.socket_path(home)
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
        modes, dirs = _modes(home)
    finally:
        os.umask(old)
        stop_agent(home)
    jd = f"jobs/{job.id}"
    for d in (".", "jobs", jd, f"{jd}/results", f"{jd}/logs", f"{jd}/checkpoint"):
        assert modes[d] & 0o777 == 0o700, (d, oct(modes[d]))
    assert stat.S_IMODE(os.stat(shared / "me").st_mode) == 0o700  # a parent gpujobs made
    # the job names no torch, so its rank forks from the lean zygote (backends/local/lean.py) and
    # the torch zygote never starts: each zygote's log that exists is checked, and one must
    zygote_logs = [f for f in ("zygote.log", "zygote-lean.log") if f in modes]
    assert zygote_logs, sorted(modes)
    files = ["state.db", "agent.log", *zygote_logs, "agent.lock", f"{jd}/key", f"{jd}/payload.bin",
             f"{jd}/spec.json", f"{jd}/env.json", f"{jd}/logs/rank-0.log"]
    files += [f for f in ("state.db-wal", "state.db-shm") if f in modes]
    for f in files:
        assert modes[f] == 0o600, (f, oct(modes[f]))
    for d in dirs:  # no folder anywhere in the state that a group could enter
        assert modes[d] & 0o077 == 0, (d, oct(modes[d]))


def test_a_state_folder_others_can_write_is_refused_with_the_chmod(tmp_path, monkeypatch):
    """Client use (and agent start) refuse a GPUJOBS_HOME or jobs/ that others can write,
    naming the folder and the command that fixes it; after the chmod it works."""
    home = tmp_path / "h"
    _private_home(home)
    _use_home(monkeypatch, home)
    for folder in (home, home / "jobs"):
        os.chmod(folder, 0o775)
        with pytest.raises(StateError, match=re.escape(f"{folder} can be written by other users")) as err:
            gpujobs.jobs()
        assert f"chmod 700 {folder}" in str(err.value)
        with pytest.raises(StateError, match="chmod 700"):
            AgentClient(home).connect(start=True)
        from gpujobs.backends.local.daemon import main
        assert main(["--home", str(home)]) == 1  # the agent does not start either
        assert not (home / "agent.lock").exists()
        os.chmod(folder, 0o700)
    assert gpujobs.jobs() == []
    os.chown(home / "jobs", NOBODY, NOBODY)
    with pytest.raises(StateError, match="belongs to uid 65534"):
        gpujobs.jobs()
