"""A warm fork server for rank processes (the "zygote").

Starting a rank with ``python -m gpujobs.rank.runner`` costs an interpreter start plus
``import torch`` (about 1 s of CPU). The agent instead keeps one child process that has
imported torch, cloudpickle and the runner once; each rank is an ``os.fork()`` of it,
in its own session, with its own environment, working directory and log file.

Protocol (JSON lines): agent -> zygote on stdin ``{"req", "env", "log", "cwd", "exit_file"}``;
zygote -> agent on stdout ``{"ready"}``, ``{"req", "pid"}`` or ``{"req", "error"}``, and
``{"exit": pid, "code"}`` when a rank ends (also written to ``exit_file``, so a restarted
agent can still learn how a rank ended). When the agent goes away the zygote keeps reaping
its ranks and exits after the last one.

Only fork from a single-threaded, CUDA-free parent: the zygote never touches CUDA, so each
rank's CUDA_VISIBLE_DEVICES still applies.

The agent runs two: this one with torch, and a lean one (``--lean``, :data:`LEAN_MODULES`) for
the gangs :mod:`.lean` picks (one CPU rank whose call needs no torch, command jobs): forking
and ending a copy of a ~600 MB torch image costs ~20 ms of kernel time, a lean one ~2 ms.
Both start with the agent; when the daemon's ``--for-job`` names a first job whose call tells
which one it needs, the other starts with the first job that needs it.
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ...rank.filemodes import open_private, replace_private


# ---------------------------------------------------------------- zygote side
#: imported once by the zygote so that forked ranks do not import them each (psutil alone
#: took 84 ms per rank: the runner records its start time with it)
LEAN_MODULES = ("cloudpickle", "gpujobs.rank.runner", "gpujobs.rank.runner.frameworks",
                "gpujobs.rank.envelope", "gpujobs.rank.outcome", "gpujobs.rank.shipping",
                "gpujobs.rank.context", "faulthandler", "psutil", "ctypes")  # ctypes: set_title
WARM_MODULES = (*LEAN_MODULES, "torch", "torch.distributed")


def _warm_imports(modules: tuple[str, ...] = WARM_MODULES) -> None:
    """Import ``modules`` (the lean zygote: LEAN_MODULES, without torch), then move every object made so far out of the garbage collector's
    reach (gc.freeze): a forked rank's collections no longer touch, and so copy, the pages of
    torch's millions of objects it shares with the zygote (page faults were most of a tiny
    rank's CPU time)."""
    for mod in modules:
        try:
            __import__(mod)
        except Exception:  # noqa: BLE001 - a missing optional framework is fine
            pass
    gc.freeze()


def _child(req: dict, close_fds: list[int]) -> None:
    """In the forked rank: become the runner. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(log, 0o600)  # explicit: not widened by the umask (SECURITY.md)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        try:
            sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except Exception:
            pass
        cwd = req.get("cwd")
        if cwd:
            try:
                os.chdir(cwd)
            except OSError:
                pass
            sys.path[0:0] = [cwd]
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = ["gpujobs.rank.runner"]
        from gpujobs.rank.runner import main
        code = main() or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(lean: bool = False) -> None:
    """The zygote's main loop; ``lean``: without torch (:mod:`.lean`)."""
    _warm_imports(LEAN_MODULES if lean else WARM_MODULES)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints must not corrupt the protocol
    rfd = sys.stdin.fileno()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the agent stops us by closing stdin
    children: dict[int, str] = {}

    def send(msg: dict) -> None:
        try:
            out.write(json.dumps(msg) + "\n")
            out.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            exit_file = children.pop(pid, None)
            if exit_file:
                try:  # atomically: a reader never sees an empty exit file
                    replace_private(exit_file, str(code))
                except OSError:
                    pass
            send({"exit": pid, "code": code})

    send({"ready": True, "pid": os.getpid()})
    buf = b""
    eof = False
    while not (eof and not children):
        watch = [wake_r] if eof else [rfd, wake_r]
        try:
            ready, _, _ = select.select(watch, [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        if rfd in ready:
            data = os.read(rfd, 1 << 16)
            if not data:
                eof = True
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                req = json.loads(line)
                sys.stderr.flush()
                out.flush()
                try:
                    pid = os.fork()
                except OSError as exc:
                    send({"req": req["req"], "error": str(exc)})
                    continue
                if pid == 0:
                    _child(req, [rfd, wake_r, wake_w, out.fileno()])
                children[pid] = req.get("exit_file", "")
                send({"req": req["req"], "pid": pid})
        reap()


# ----------------------------------------------------------------- agent side
class ZProc:
    """A rank forked by the zygote, with the slice of the Popen interface Gang uses."""

    def __init__(self, pid: int, zygote: "Zygote", exit_file: str):
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        self._exit_file = exit_file
        self._done = threading.Event()

    def _set(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def poll(self) -> int | None:
        if self.returncode is None and not self._zygote.alive():
            self._orphan_check()
        return self.returncode

    def _orphan_check(self) -> None:
        import psutil
        try:
            if psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            pass
        try:
            self._set(int(Path(self._exit_file).read_text()))
        except (OSError, ValueError):
            self._set(-signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("rank", timeout or 0)
            self._done.wait(0.2 if left is None else min(left, 0.2))
        return self.returncode  # type: ignore[return-value]


def _kill_abandoned(pid: int) -> None:
    """A rank the zygote forked after :meth:`Zygote.spawn` stopped waiting: the gang started
    that rank as a fresh process instead, so this one would be its twin in the rendezvous."""
    try:
        os.killpg(pid, signal.SIGKILL)  # the rank leads its own session (setsid)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Zygote:
    """The agent's handle on its fork server; ``on_exit`` is called when a rank ends (it may
    be set after the start: the daemon starts the zygote before it builds the agent);
    ``lean``: a zygote without torch (:mod:`.lean`)."""

    #: how long spawn() waits for a fork (a loaded machine can be slow to answer)
    SPAWN_TIMEOUT_S = 30.0

    def __init__(self, log_path: Path, on_exit: Callable[[], Any] | None = None, lean: bool = False,
                 load_file: Path | None = None):
        self.lean = lean
        self.load_file = load_file  # where the time to ready is recorded (:func:`load_times`)
        self._t0 = time.monotonic()
        self._log = open_private(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "gpujobs.backends.local.zygote",
                                      *(["--lean"] if lean else [])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, start_new_session=False)
        self.on_exit = on_exit
        self._lock = threading.Lock()
        self._req = 0
        self._pending: dict[int, list] = {}
        self._procs: dict[int, ZProc] = {}
        self._early: dict[int, int] = {}
        self._ready = threading.Event()
        self._dead = False
        self.abandoned: list[int] = []  # ranks forked too late, killed
        threading.Thread(target=self._read, daemon=True, name="gpujobs-zygote").start()

    def alive(self) -> bool:
        return not self._dead

    def ready(self, timeout: float = 0.0) -> bool:
        return self._ready.wait(timeout) and not self._dead

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("ready"):
                if self.load_file is not None:
                    record_load_time(self.load_file, self.lean, time.monotonic() - self._t0)
                self._ready.set()
            elif "exit" in msg:
                with self._lock:
                    p = self._procs.pop(msg["exit"], None)
                    if p is None:
                        self._early[msg["exit"]] = msg["code"]
                if p is not None:
                    p._set(msg["code"])
                if self.on_exit:
                    self.on_exit()
            elif "req" in msg:
                with self._lock:
                    slot = self._pending.get(msg["req"])
                    if slot is None and "pid" in msg:  # forked after spawn() gave up on it
                        self.abandoned.append(msg["pid"])
                if slot is not None:
                    slot.append(msg)
                    slot[0].set()
                elif "pid" in msg:
                    _kill_abandoned(msg["pid"])
        self._dead = True
        self._ready.set()
        for slot in list(self._pending.values()):
            slot[0].set()
        if self.on_exit:
            self.on_exit()

    def spawn(self, env: dict[str, str], log_path: Path, cwd: str | None, exit_file: Path) -> ZProc:
        """Fork a rank; raises OSError when the zygote is gone (callers fall back to Popen)."""
        if self._dead or self.proc.stdin is None:
            raise OSError("zygote is not running")
        ev = threading.Event()
        with self._lock:
            self._req += 1
            req = self._req
            self._pending[req] = [ev]
        msg = {"req": req, "env": env, "log": str(log_path), "cwd": cwd, "exit_file": str(exit_file)}
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise OSError(f"zygote is gone: {exc}") from None
        ev.wait(self.SPAWN_TIMEOUT_S)
        with self._lock:
            slot = self._pending.pop(req)
        if len(slot) < 2:  # its late fork is killed when it comes (the caller starts the rank
            raise OSError("zygote did not answer")  # itself: one process per rank, never two)
        if len(slot) < 2 or "pid" not in slot[1]:
            raise OSError(f"zygote could not fork: {slot[1].get('error') if len(slot) > 1 else 'gone'}")
        pid = slot[1]["pid"]
        p = ZProc(pid, self, str(exit_file))
        with self._lock:
            code = self._early.pop(pid, None)
            if code is None:
                self._procs[pid] = p
        if code is not None:
            p._set(code)
        return p

    def close(self) -> None:
        """Close its stdin: it exits once its last rank has ended."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass


def start_zygote(home: Path, log: Callable[[str], None],
                 lean: bool = False) -> tuple[Zygote | None, float]:
    """The home's warm fork server (``lean``: the one without torch), started now, and when
    (monotonic); None when it cannot start (ranks then start as fresh interpreters; ``log``
    says why). The daemon calls it before it builds the agent: the zygote's imports (torch,
    seconds) overlap the agent's start."""
    started = time.monotonic()
    try:
        return Zygote(home / ("zygote-lean.log" if lean else "zygote.log"), lean=lean,
                      load_file=home / LOAD_TIMES), started
    except Exception:  # noqa: BLE001 - ranks fall back to fresh interpreters
        log(traceback.format_exc())
        return None, started


LOAD_TIMES = "zygote-load.json"  # in the home: each zygote's last time from start to ready
_LOAD_LOCK = threading.Lock()  # the two zygotes' reader threads may record at once


def _load_key(lean: bool) -> str:
    return "lean" if lean else "torch"


def load_times(home: Path) -> dict[bool, float]:
    """The home's last time from start to ready of each zygote (by ``lean``), as the zygotes
    recorded it; empty when none was recorded (or the file cannot be read)."""
    try:
        data = json.loads((home / LOAD_TIMES).read_text())
        return {lean: float(data[_load_key(lean)]) for lean in (False, True) if _load_key(lean) in data}
    except (OSError, ValueError, TypeError):
        return {}


def record_load_time(path: Path, lean: bool, seconds: float) -> None:
    """Note that this home's zygote (``lean`` or the torch one) took ``seconds`` to be ready:
    the next agent's forecasts of jobs held for it count on as long (best effort)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with _LOAD_LOCK:
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
            data[_load_key(lean)] = round(seconds, 2)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except (OSError, ValueError, TypeError):
            tmp.unlink(missing_ok=True)


if __name__ == "__main__":
    serve(lean="--lean" in sys.argv[1:])
