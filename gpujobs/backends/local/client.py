"""Talking to the local agent: connect, start it on demand, stop it."""
from __future__ import annotations

import errno
import fcntl
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
from .procs import exited

START_TIMEOUT_S = 30.0
CONNECT_DEADLINE_S = 30.0  # a busy agent (full listen queue) is retried this long
STARTING_POLL_S = 0.02  # how often a client polls for the socket of the agent it started
RETRY_DEADLINE_S = 60.0  # a dropped connection (the agent died: a new one starts) is retried this long

AGENT_MODULE = "gpujobs.backends.local.daemon"  # the agent's process: python -m AGENT_MODULE
OLD_AGENT_MODULE = "gpujobs.backends.local.agent"  # what agents of earlier versions run as


def _busy(exc: BaseException | None) -> bool:
    """The agent is there but its listen queue is full (EAGAIN on a Unix socket)."""
    return isinstance(exc, BlockingIOError) or getattr(exc, "errno", None) == errno.EAGAIN


def _space_note(path: Path) -> str:
    try:
        st = os.statvfs(path)
        return f"{st.f_bavail * st.f_frsize} bytes free on the file system of {path}"
    except OSError as exc:
        return f"cannot read the free space of {path}: {exc}"


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
        self.starting_for: str | None = None  # the job of the submit that starts the agent

    @property
    def sock_path(self) -> Path:
        return protocol.socket_path(self.home)

    def connect(self, start: bool = True, timeout: float | None = 60.0) -> socket.socket:
        """A connected socket; starts the agent when none answers and ``start``.

        An agent that is busy (its listen queue full: EAGAIN) or still starting (its lock held,
        no socket yet) is retried with backoff until CONNECT_DEADLINE_S, never started twice:
        one agent per home (the agent's own lock; the clients' start lock)."""
        try:
            return self._connect(timeout)
        except OSError as exc:
            if not start and not _busy(exc):
                raise BackendUnavailable(f"no gpujobs agent is running for {self.home}") from None
        waited = START_TIMEOUT_S if start else CONNECT_DEADLINE_S
        deadline = time.monotonic() + waited
        delay = 0.01
        spawned = 0.0
        last: OSError | None = None
        while True:
            try:
                return self._connect(timeout)
            except OSError as exc:
                last = exc
            if start and not _busy(last) and not self.agent_alive():
                if time.monotonic() - spawned > 2.0:  # an agent we started may still be booting
                    self._spawn_once()
                    spawned = time.monotonic()
                self._raise_start_error()
            if time.monotonic() >= deadline:
                break
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            # an agent this client started answers within a second or two: polled every
            # STARTING_POLL_S, not with a backoff that may add half a second to its start
            delay = min(delay * 2, STARTING_POLL_S if spawned else 0.5)
        raise BackendUnavailable(
            f"the gpujobs agent for {self.home} did not accept a connection within "
            f"{waited:.0f} s "
            f"(last error: {last}); it may be overloaded or stuck: see {self.home / 'agent.log'}, "
            f"or restart it with `gpujobs agent stop`") from None

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
        except OSError as exc:
            return _busy(exc)  # a full listen queue is an agent that runs

    def agent_alive(self) -> bool:
        """An agent process holds this home's lock (running, or still starting up)."""
        try:
            fh = private.open_private(self.home / "agent.lock", "a+")
        except OSError:
            return False
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            fh.close()  # closing drops a lock this call took
        return False

    def _spawn_once(self) -> None:
        """Start a detached agent, one client at a time (the start lock): a client that waited
        for the lock finds the agent another one started and starts none."""
        check_home(self.home)
        with private.open_private(self.home / "agent.start.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self.agent_alive():
                    return
                try:
                    (self.home / "agent.error").unlink()
                except OSError:
                    pass
                log = private.open_private(self.home / "agent.log", "ab")
                first = ["--for-job", self.starting_for] if self.starting_for else []
                try:
                    p = subprocess.Popen([sys.executable, "-m", AGENT_MODULE,
                                          "--home", str(self.home), "--daemonize", *first],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True, cwd=str(self.home))
                    p.wait(30)
                finally:
                    log.close()
                # The agent takes its lock right after its fork: wait for that (briefly), so
                # the next client waiting here sees it alive.
                until = time.monotonic() + 5.0
                while not self.agent_alive() and time.monotonic() < until:
                    if (self.home / "agent.error").exists():
                        return
                    time.sleep(0.01)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _raise_start_error(self) -> None:
        """Raise what an agent that could not start wrote to agent.error, if it did."""
        err = self.home / "agent.error"
        try:
            text = err.read_text()
        except OSError:
            return
        kind, _, text = text.partition("\n")
        from ... import errors
        cls = getattr(errors, kind, StateError)
        if not (isinstance(cls, type) and issubclass(cls, errors.GpuJobsError)):
            cls = StateError
        if not text.strip():  # e.g. a full disk took the message: never an empty error
            raise StateError(f"the gpujobs agent for {self.home} could not start and left no "
                             f"reason ({_space_note(self.home)}); see {self.home / 'agent.log'}")
        if issubclass(cls, errors.SpecError):
            raise StateError(f"the gpujobs agent cannot start: {text}")
        raise cls(text)

    def start_agent(self) -> None:
        """Start a detached agent for this home (unless one runs) and wait until it answers."""
        self.connect(start=True, timeout=2.0).close()

    def request(self, msg: dict[str, Any], timeout: float | None = 60.0, start: bool = True,
                retries: int | None = None, deadline_s: float = RETRY_DEADLINE_S) -> dict[str, Any]:
        """Send one request (every op is safe to repeat: a submit is idempotent by its id). A
        dropped connection (a dead agent is replaced: a new one recovers the state) is retried
        with backoff until ``deadline_s`` seconds have passed, or ``retries`` times when given."""
        until = time.monotonic() + deadline_s
        delay = 0.1
        attempt = 0
        if msg.get("op") == "submit" and isinstance(msg.get("id"), str):
            self.starting_for = msg["id"]  # an agent this starts warms what the job needs
        while True:
            try:
                with self.connect(start=start, timeout=timeout) as s:
                    protocol.send(s, msg)
                    reply = protocol.LineReader(s).read()
                if reply is None:
                    raise ConnectionResetError("agent closed the connection")
                return protocol.raise_reply(reply)
            except (ConnectionError, socket.timeout, FileNotFoundError) as exc:
                if (retries is not None and attempt >= retries) or time.monotonic() + delay > until:
                    raise BackendUnavailable(
                        f"lost the gpujobs agent: {exc} (tried {attempt + 1} time(s) over "
                        f"{deadline_s - max(0.0, until - time.monotonic()):.0f} s); see "
                        f"{self.home / 'agent.log'}") from None
                attempt += 1
                time.sleep(delay)
                delay = min(delay * 2, 2.0)


def agent_pids(home: Path | None = None) -> dict[str, int | None]:
    """The running agent's pid and its zygotes' (``zygote``: torch's, ``lean_zygote``: the one
    without torch; None when not started; empty when no agent runs)."""
    c = AgentClient(home)
    try:
        r = c.request({"op": "agent_pids"}, timeout=5, start=False, retries=0)
        return {"agent": r["agent"], "zygote": r["zygote"], "lean_zygote": r.get("lean_zygote")}
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
            if any(m in " ".join(proc.cmdline()) for m in (AGENT_MODULE, OLD_AGENT_MODULE)):
                proc.terminate()
                exited(proc, timeout)
                return True
        except (OSError, ValueError, psutil.Error):
            pass
        return _kill_recorded_ranks(c.home)
    try:
        c.request({"op": "stop"}, timeout=5, start=False, retries=0)
    except BackendUnavailable:
        pass
    deadline = time.monotonic() + timeout
    for maybe_pid in (pids.get("agent"), pids.get("zygote"), pids.get("lean_zygote")):
        if not maybe_pid:
            continue
        try:
            proc = psutil.Process(maybe_pid)
            if not exited(proc, max(0.1, deadline - time.monotonic())):
                proc.kill()
        except psutil.NoSuchProcess:
            pass
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
