"""Talking to the local agent: connect, start it on demand, stop it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...config import gpujobs_home
from ...errors import BackendUnavailable, StateError
from . import private, protocol

START_TIMEOUT_S = 30.0


def check_home(home: Path) -> None:
    """StateError unless ``home`` and ``jobs/`` exist (or can be made, 0700) and are private:
    this user's, writable by no one else."""
    try:
        private.make_home(home)
    except StateError:
        raise
    except OSError as exc:
        raise StateError(f"cannot create the gpujobs state directory {home}: {exc}. "
                         f"Set GPUJOBS_HOME to a writable directory") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise StateError(f"the gpujobs state directory {home} is not writable. "
                         f"Fix its permissions or set GPUJOBS_HOME to a writable directory")


class AgentClient:
    def __init__(self, home: Path | None = None):
        self.home = Path(home) if home else gpujobs_home()

    @property
    def sock_path(self) -> Path:
        return protocol.socket_path(self.home)

    def connect(self, start: bool = True, timeout: float | None = 60.0) -> socket.socket:
        """A connected socket; starts the agent when none answers and ``start``."""
        try:
            return self._connect(timeout)
        except OSError:
            if not start:
                raise BackendUnavailable(f"no gpujobs agent is running for {self.home}") from None
        self.start_agent()
        return self._connect(timeout)

    def _connect(self, timeout: float | None) -> socket.socket:
        """A socket connected to our own agent. Before anything is sent: the state folders
        and the socket (and its folder) are this user's and private, and the process that
        answered runs as this user (SO_PEERCRED); else StateError. FileNotFoundError or
        another OSError when no agent listens."""
        private.check_home(self.home)
        path = self.sock_path
        private.check_socket_file(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(str(path))
            uid = private.peer_uid(s)
        except OSError:
            s.close()
            raise
        if uid != os.geteuid():
            s.close()
            raise StateError(f"the process listening on {path} runs as uid {uid}, not as you "
                             f"(uid {os.geteuid()}); nothing was sent to it. Tell the machine's "
                             f"admins")
        return s

    def running(self) -> bool:
        try:
            self._connect(2.0).close()
            return True
        except OSError:
            return False

    def start_agent(self) -> None:
        """Start a detached agent for this home and wait until it answers."""
        check_home(self.home)
        err = self.home / "agent.error"
        log = private.open_private(self.home / "agent.log", "ab")
        try:
            p = subprocess.Popen([sys.executable, "-m", "gpujobs.backends.local.agent",
                                  "--home", str(self.home), "--daemonize"],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True, cwd=str(self.home))
            p.wait(30)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                self._connect(2.0).close()
                return
            except OSError:
                pass
            if err.exists():
                kind, _, text = err.read_text().partition("\n")
                from ... import errors
                cls = getattr(errors, kind, StateError)
                if not (isinstance(cls, type) and issubclass(cls, errors.GpuJobsError)):
                    cls = StateError
                if issubclass(cls, errors.SpecError):
                    raise StateError(f"the gpujobs agent cannot start: {text}")
                raise cls(text)
            time.sleep(0.02)
        raise BackendUnavailable(f"the gpujobs agent did not start within {START_TIMEOUT_S:.0f} s; "
                                 f"see {self.home / 'agent.log'}")

    def request(self, msg: dict[str, Any], timeout: float | None = 60.0, start: bool = True,
                retries: int = 1) -> dict[str, Any]:
        """Send one request; a dead agent is replaced once (a new one recovers the state)."""
        for attempt in range(retries + 1):
            try:
                with self.connect(start=start, timeout=timeout) as s:
                    protocol.send(s, msg)
                    reply = protocol.LineReader(s).read()
                if reply is None:
                    raise ConnectionResetError("agent closed the connection")
                return protocol.raise_reply(reply)
            except (ConnectionError, socket.timeout, FileNotFoundError) as exc:
                if attempt == retries:
                    raise BackendUnavailable(f"lost the gpujobs agent: {exc}") from None
                time.sleep(0.2)
        raise AssertionError("unreachable")


def agent_pids(home: Path | None = None) -> dict[str, int | None]:
    """The running agent's pid and its zygote's (empty when none runs)."""
    c = AgentClient(home)
    try:
        r = c.request({"op": "agent_pids"}, timeout=5, start=False, retries=0)
        return {"agent": r["agent"], "zygote": r["zygote"]}
    except BackendUnavailable:
        return {}


def stop_agent(home: Path | None = None, timeout: float = 15.0) -> bool:
    """Stop the agent for ``home`` (running jobs are ended as cancelled). True if one ran."""
    import psutil
    c = AgentClient(home)
    pids = agent_pids(c.home)
    if not pids:
        pid_file = c.home / "agent.pid"
        try:
            pid = int(pid_file.read_text())
            proc = psutil.Process(pid)
            if "gpujobs.backends.local.agent" in " ".join(proc.cmdline()):
                proc.terminate()
                proc.wait(timeout)
                return True
        except (OSError, ValueError, psutil.Error):
            pass
        return _kill_recorded_ranks(c.home)
    try:
        c.request({"op": "stop"}, timeout=5, start=False, retries=0)
    except BackendUnavailable:
        pass
    deadline = time.monotonic() + timeout
    for pid in (pids.get("agent"), pids.get("zygote")):
        if not pid:
            continue
        try:
            proc = psutil.Process(pid)
            proc.wait(max(0.1, deadline - time.monotonic()))
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            proc.kill()
    return True


def _kill_recorded_ranks(home: Path) -> bool:
    """No agent answers: kill ranks the state still records as running (a crashed agent's)."""
    import signal

    import psutil

    from .store import Store
    db = home / "state.db"
    if not db.exists():
        return False
    try:
        store = Store(db, readonly=True)
        rows = store.all()
        store.close()
    except Exception:  # noqa: BLE001 - a corrupt state has nothing we can act on
        return False
    killed = False
    for _, _, st, _, runtime in rows:
        if st.terminal:
            continue
        for pid, started in runtime.get("pids", []):
            try:
                if abs(psutil.Process(pid).create_time() - started) < 1:
                    os.killpg(pid, signal.SIGKILL)
                    killed = True
            except (psutil.Error, OSError):
                pass
    return killed
