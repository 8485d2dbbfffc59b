"""A gang: the rank processes of one job on this machine.

Ranks meet through a FileStore in the job dir (no port, nothing for rank 0 to open first);
they run ``python -m gpujobs.rank.runner`` (or are forked from the agent's warm zygote) in their
own process group with per-rank log files; any rank failing tears the whole gang down.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Self, Sequence

from ...rank import contract
from ...rank.contract import EXIT, FAILURE, OUTCOME, PROCESS, RENDEZVOUS, STARTED, JobFolder, RankEnv
from ...rank.filemodes import open_private, replace_private
from ...spec import JobSpec


@dataclass
class GangExit:
    """How a gang ended. ``failed_rank`` is the first rank that failed (None on success)."""
    ok: bool
    returncodes: dict[int, int]
    failed_rank: int | None = None
    message: str = ""


SUBMITTER_ENV = contract.SUBMITTER_ENV_FILE


def save_submitter_env(job_dir: Path) -> None:
    """Record the submitting process's environment (0600): ranks see what the notebook saw."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(contract.KEY_PREFIX)}
    fd = os.open(JobFolder(job_dir).submitter_env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(env, fh)


def submitter_env(job_dir: Path) -> dict[str, str]:
    """The environment recorded at submit, else this process's (jobs from older clients)."""
    try:
        return json.loads(JobFolder(job_dir).submitter_env_file.read_text())
    except (OSError, ValueError):
        return dict(os.environ)


def write_launch(folder: JobFolder, token: str, go: bool) -> None:
    """The start gate of ``folder``'s ranks, replaced atomically (0600): launch ``token``
    waits, or runs (``go``); a token no rank has stops every rank still at the gate."""
    replace_private(folder.launch_file, contract.launch_line(token, go))


def exit_order(result_dir: Path, rank: int) -> int:
    """The cause first: a rank's own exception (0), then a rank that died without one (killed,
    exit code: 1), then ranks whose error only reports a lost peer (2; runner's failure-N)."""
    marker = result_dir / FAILURE.name(rank)
    if marker.exists():
        try:
            return 2 if json.loads(marker.read_text()).get("collateral") else 0
        except (OSError, ValueError):
            return 0
    return 1


def first_failed(result_dir: Path, ranks: list[int]) -> int:
    """The failed rank to blame among ``ranks`` (see :func:`exit_order`)."""
    return min(ranks, key=lambda r: (exit_order(result_dir, r), r))


def failed_rank_message(result_dir: Path, rank: int, code: int) -> str:
    """``KeyError: 'missing_key' (rank 1); exit code 1`` when the rank left its exception in its
    failure marker (plain JSON: nothing unpickled), else ``rank 1 exit code 1``."""
    try:
        marker = json.loads((result_dir / FAILURE.name(rank)).read_text())
    except (OSError, ValueError):
        marker = None
    if not isinstance(marker, dict) or not marker.get("type"):
        return f"rank {rank} {describe_returncode(code)}"
    from ...rank.outcome import exception_line
    return f"{exception_line(str(marker['type']), str(marker.get('message') or ''), rank)}; " \
        f"{describe_returncode(code)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def describe_returncode(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Gang:
    """Start, watch and stop the ranks of one job.

    ``devices[r]`` lists the GPU indices of rank r (CUDA_VISIBLE_DEVICES); None means CPU ranks.
    """
    job_id: str
    job_dir: Path
    framework: str
    world_size: int
    key_file: Path
    devices: Sequence[Sequence[int]] | None = None
    env: dict[str, str] = field(default_factory=dict)
    return_all: bool = False
    program: tuple[str, ...] | None = None
    """A command job's program (every rank runs it instead of a function)."""
    restarts: int = 0
    python: str = sys.executable
    cwd: str | None = None
    spawner: Callable[..., Any] | None = None
    """``spawner(env=, log_path=, cwd=, exit_file=)`` -> a Popen-like process (the agent's
    zygote); None, or a spawner that raises OSError, means ``subprocess.Popen``."""
    gated: bool = False
    """The ranks wait at their start gate until :meth:`release` (the agent: once it has
    recorded their pids); ungated ranks run at once."""
    launch: str = ""
    """This start's token (``start()`` draws it): ranks of another launch are stale."""
    procs: dict[int, Any] = field(default_factory=dict)
    _log_files: list = field(default_factory=list)

    @property
    def folder(self) -> JobFolder:
        return JobFolder(self.job_dir)

    @property
    def result_dir(self) -> Path:
        return self.folder.result_dir

    @property
    def log_dir(self) -> Path:
        return self.folder.log_dir

    def _base_env(self) -> dict[str, str]:
        env = submitter_env(self.job_dir)
        if self.world_size > 1 and "OMP_NUM_THREADS" not in env and "OMP_NUM_THREADS" not in self.env:
            env["OMP_NUM_THREADS"] = "1"  # as torchrun does: N ranks must not each spawn N threads
        env.update(self.env)
        env.update(self.rank_env().to_env())
        env["PYTHONUNBUFFERED"] = "1"
        env.pop(contract.KEY, None)
        if self.devices is None:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def rank_env(self) -> RankEnv:
        """What every rank of this gang is told (the rank contract)."""
        folder = self.folder
        return RankEnv(job_id=self.job_id, framework=self.framework,
                       payload=str(folder.payload_file), key_file=str(self.key_file),
                       result_sink=contract.dir_sink(folder.result_dir),
                       return_all=self.return_all, checkpoint_dir=str(folder.checkpoint_dir),
                       restarts=self.restarts, command=self.program,
                       device="cpu" if self.devices is None else None,
                       launch_file=str(folder.launch_file), launch=self.launch or None)

    def _rendezvous(self, env: dict[str, str]) -> None:
        """A one-machine gang meets through a FileStore in the job dir (no port to take).

        Measured here: creating a TCPStore master stalls for 5 s in ~4% of creations (inside
        torch, libuv or not), which stalled whole admissions when the launcher hosted one per
        gang; a FileStore never did. MASTER_ADDR/MASTER_PORT are still set for user code.
        """
        path = self.job_dir / RENDEZVOUS.name(self.restarts)
        for stale in self.job_dir.glob(RENDEZVOUS.glob):
            stale.unlink()
        env.update(RankEnv(rendezvous_file=str(path)).to_env())

    @classmethod
    def from_spec(cls, spec: JobSpec, **kw: Any) -> Self:
        """The gang of ``spec``: rank count, env, return_all and command from it, the rest
        (job_id, job_dir, key_file, devices, restarts, cwd, spawner …) from ``kw``."""
        return cls(framework=spec.framework, world_size=spec.world_size, env=spec.env_dict(),
                   return_all=spec.return_all, program=spec.command, **kw)

    def _prepare_dirs(self) -> None:
        """Result, log, checkpoint and pid dirs exist; a requeued gang starts clean (checkpoints
        stay); a new launch token is at the ranks' start gate before any rank starts."""
        folder = self.folder
        for d in (self.result_dir, self.log_dir, folder.checkpoint_dir, folder.pid_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        for kind in (OUTCOME, EXIT, FAILURE, STARTED):
            for stale in self.result_dir.glob(kind.any_glob):
                stale.unlink()
        for stale in folder.pid_dir.glob(PROCESS.any_glob):
            stale.unlink()
        self.launch = secrets.token_hex(8)
        write_launch(folder, self.launch, go=not self.gated)

    def release(self) -> None:
        """Let the ranks of a gated start run (their pids are recorded)."""
        write_launch(self.folder, self.launch, go=True)

    def _popen(self, cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
        """``cmd`` in a session of its own, stdout and stderr appended to ``log_path``."""
        log = open_private(log_path, "ab", buffering=0)
        self._log_files.append(log)
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=self.cwd or os.getcwd())

    def start(self) -> None:
        self._prepare_dirs()
        base = self._base_env()
        if self.framework in ("ddp", "fsdp"):
            base.setdefault("MASTER_ADDR", "127.0.0.1")
            self._rendezvous(base)
            base.setdefault("MASTER_PORT", str(free_port()))
        base["WORLD_SIZE"] = str(self.world_size)
        base["LOCAL_WORLD_SIZE"] = str(self.world_size)
        for rank in range(self.world_size):
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0")
            if self.devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.devices[rank]))
            log_path = self.folder.rank_log(rank)
            if self.spawner is not None:
                try:
                    self.procs[rank] = self.spawner(env=env, log_path=log_path, cwd=self.cwd,
                                                    exit_file=self.folder.result(EXIT, rank))
                    continue
                except OSError:
                    pass  # no warm zygote: a fresh interpreter
            self.procs[rank] = self._popen([self.python, "-m", "gpujobs.rank.runner"], env, log_path)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def all_exited(self) -> bool:
        """Every process of the gang has ended (cheap: no waiting, no clean-up)."""
        return all(p.poll() is not None for p in self.procs.values())

    def ended(self) -> bool:
        """:meth:`poll` would return a GangExit now: all ranks ended, or one failed (cheap)."""
        codes = [p.poll() for p in self.procs.values()]
        return all(c is not None for c in codes) or any(c not in (None, 0) for c in codes)

    def poll(self) -> GangExit | None:
        """None while running; a GangExit once all ranks ended, or one failed (others torn down)."""
        codes = {r: p.poll() for r, p in self.procs.items()}
        failed = [r for r, c in codes.items() if c not in (None, 0)]
        if failed:
            first = first_failed(self.result_dir, failed)
            self.terminate(grace=2.0)
            codes = {r: p.returncode for r, p in self.procs.items()}
            return self._finish(GangExit(False, codes, first,
                                         failed_rank_message(self.result_dir, first, codes[first])))
        if all(c == 0 for c in codes.values()):
            return self._finish(GangExit(True, codes))
        return None

    def wait(self, timeout: float | None = None, interval: float = 0.05) -> GangExit | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = self.poll()
            if done is not None:
                return done
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(interval)

    def signal_all(self, sig: int) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def terminate(self, grace: float = 5.0) -> None:
        """SIGTERM every rank's process group, SIGKILL what is left after ``grace`` seconds."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.02)
        self.signal_all(signal.SIGKILL)
        for p in self.procs.values():
            p.wait()
            try:  # children the rank left behind in its group
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._close_logs()

    def _close_logs(self) -> None:
        for log in self._log_files:
            log.close()
        self._log_files.clear()

    def _finish(self, result: GangExit) -> GangExit:
        self._close_logs()
        return result
