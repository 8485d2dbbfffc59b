"""Local MPI gangs: one ``mpirun`` (Open MPI) running ``python -m gpujobs.rank.runner`` in every rank.

Each rank's output goes to ``logs/rank-N.log`` through a one-line ``sh`` wrapper
(``exec`` keeps the rank's pid); mpirun's own messages go to ``logs/mpirun.txt``.
mpirun tears the whole job down when one rank fails. Ranks get their own
process groups from mpirun, so stopping a gang walks mpirun's descendants and
then sweeps every process whose environment carries the job id: nothing survives.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

import psutil

from ...errors import PreflightError
from ...spec import JobSpec
from .gang import Gang, GangExit, failed_rank_message
from .procs import running
from ...rank import contract

MPI_INSTALL_HINT = ("install Open MPI and mpi4py: `apt-get install openmpi-bin libopenmpi-dev` "
                    "and `pip install mpi4py` (or `pip install 'gpujobs[mpi]'`)")
_RANK_WRAPPER = (f'exec "$0" -m gpujobs.rank.runner >>"${contract.LOG_DIR}/{contract.RANK_LOG.prefix}'
                 f'$OMPI_COMM_WORLD_RANK{contract.RANK_LOG.suffix}" 2>&1')
_FIRST_FAILED = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")


def check_mpi_available() -> str:
    """Return the mpirun path; raise PreflightError naming what to install when MPI is missing."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise PreflightError("mpirun", f"not found on PATH; {MPI_INSTALL_HINT}")
    if importlib.util.find_spec("mpi4py") is None:
        raise PreflightError("mpi4py", f"the Python package is not installed; {MPI_INSTALL_HINT}")
    return mpirun


def job_processes(job_id: str) -> list[psutil.Process]:
    """Live processes (not this one, not zombies) whose environment has GPUJOBS_JOB_ID=job_id."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(contract.JOB_ID) == job_id:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_tree(root_pid: int | None, job_id: str, sig: int = signal.SIGKILL) -> None:
    """Signal ``root_pid``'s process group and descendants, then every process of ``job_id``.

    Swept until a look finds nothing running (at most 5 s): a rank that mpirun's daemon was
    forking during the first sweep is caught by the next one.
    """
    deadline = time.monotonic() + 5.0
    while True:
        victims = _tree(root_pid, job_id)
        if root_pid is not None:
            try:
                os.killpg(root_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in victims:
            try:
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        # Wait until they are gone or zombies (an orphan's zombie may wait long for its reaper).
        # No wait() here: it would reap our own children and hide exit codes from their Popen.
        pending = victims
        while pending and time.monotonic() < deadline:
            pending = [p for p in pending if running(p)]
            if pending:
                time.sleep(0.01)
        if not victims or time.monotonic() >= deadline:
            return
        if not any(running(p) for p in _tree(root_pid, job_id)):
            return


def _tree(root_pid: int | None, job_id: str) -> list[psutil.Process]:
    """The running processes of ``root_pid``'s tree and of ``job_id`` (by environment)."""
    victims: dict[int, psutil.Process] = {}
    if root_pid is not None:
        try:
            root = psutil.Process(root_pid)
            victims.update({p.pid: p for p in [root, *root.children(recursive=True)]})
        except psutil.NoSuchProcess:
            pass
    victims.update({p.pid: p for p in job_processes(job_id)})
    return [p for p in victims.values() if running(p)]


def descendants(pid: int | None) -> list[int]:
    if pid is None:
        return []
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@dataclass
class MpiGang(Gang):
    """The ranks of one MPI job under one mpirun. Same interface as :class:`Gang`."""
    mpirun_path: str | None = None
    _mpirun: subprocess.Popen | None = None
    _exit: GangExit | None = None

    def __post_init__(self) -> None:
        self.framework = "mpi"

    @property
    def launcher_log(self):
        return self.log_dir / contract.MPIRUN_LOG

    def command(self) -> list[str]:
        cmd = [self.mpirun_path or check_mpi_available(), "-np", str(self.world_size),
               "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        return cmd + ["sh", "-c", _RANK_WRAPPER, self.python]

    def start(self) -> None:
        self.mpirun_path = check_mpi_available()
        self._prepare_dirs()
        env = self._base_env()
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
            env.pop(var, None)  # the runner must read Open MPI's rank, not a stale one
        env[contract.LOG_DIR] = str(self.log_dir)
        # Containers often forbid the cross-memory-attach single copy; shared memory still works.
        env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        if self.devices is not None:
            env[contract.MPI_DEVICES] = ";".join(",".join(map(str, d)) for d in self.devices)
            env.pop("CUDA_VISIBLE_DEVICES", None)
        self._mpirun = self._popen(self.command(), env, self.launcher_log)
        self.procs[0] = self._mpirun

    @property
    def pids(self) -> list[int]:
        if self._mpirun is None:
            return []
        return [self._mpirun.pid, *descendants(self._mpirun.pid)]

    def poll(self) -> GangExit | None:
        if self._exit is not None:
            return self._exit
        if self._mpirun is None or self._mpirun.poll() is None:
            return None
        return self._end()

    def _end(self) -> GangExit:
        """Once mpirun has ended (or is to be killed): kill what is left of the job, once."""
        if self._exit is not None:
            return self._exit
        kill_tree(self._mpirun.pid if self._mpirun else None, self.job_id)  # nothing outlives mpirun
        code = self._mpirun.wait() if self._mpirun else -signal.SIGKILL
        if code == 0:
            result = GangExit(True, {r: 0 for r in range(self.world_size)})
        else:
            rank, rank_code = self._first_failure(code)
            result = GangExit(False, {rank: rank_code}, rank,
                              failed_rank_message(self.result_dir, rank, rank_code))
        self._exit = self._finish(result)
        return self._exit

    def _first_failure(self, mpirun_code: int) -> tuple[int, int]:
        """The first failing rank and its exit code, from mpirun's report or the outcome files."""
        try:
            text = self.launcher_log.read_text(errors="replace")
        except OSError:
            text = ""
        if m := _FIRST_FAILED.search(text):
            return int(m.group(1)), int(m.group(2))
        if m := _SIGNALLED.search(text):
            return int(m.group(1)), -int(m.group(2))
        written = sorted(r for p in self.result_dir.glob(contract.OUTCOME.glob)
                         if (r := contract.OUTCOME.rank_of(p.name)) is not None)
        failed = [r for r in written if r != 0] or written
        return (failed[0] if failed else 0), mpirun_code

    def signal_all(self, sig: int) -> None:
        """Signal the ranks only (mpirun would turn a SIGTERM into an immediate kill)."""
        for pid in descendants(self._mpirun.pid if self._mpirun else None):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self, grace: float = 5.0) -> None:
        """SIGTERM the ranks (ctx.should_stop() turns True), SIGKILL everything after ``grace``."""
        if self._exit is not None:
            return
        if self._mpirun is not None:
            self.signal_all(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._mpirun.poll() is None:
                time.sleep(0.02)
        self._end()


def mpi_launcher(spec: JobSpec, **kw) -> MpiGang:
    """The local agent's launcher for ``framework="mpi"`` (see :mod:`.launchers`).

    ``kw``: job_id, job_dir, key_file, devices, restarts,
    cwd, spawner (ignored: ranks must be mpirun's children).
    """
    kw.pop("spawner", None)
    return MpiGang.from_spec(spec, **kw)


mpi_launcher.preflight = check_mpi_available  # type: ignore[attr-defined]
