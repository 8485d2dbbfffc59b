"""Local Ray jobs: the runner is the Ray driver and starts a private Ray instance.

The launcher starts one ``python -m gpujobs.rank.runner`` (rank 0, log ``logs/rank-0.log``)
with ``GPUJOBS_FRAMEWORK=ray``; the runner calls ``ray.init(address="local", num_cpus=,
num_gpus=, include_dashboard=False, _temp_dir=...)`` (see
:func:`gpujobs.rank.runner.frameworks.ray_init_kwargs`), so Ray's processes are the driver's
children, in a temp dir of this job only, and never another Ray on the machine
(no ``ray stop``). When the driver ends, or on cancel, the launcher kills what is left by
process group, descendants and job id (Ray's workers take process groups of their own),
and removes the temp dir by path.

The local instance is one node holding the whole gang's resources: ``workers *
cpus_per_worker`` CPUs and ``workers * gpus_per_worker`` GPUs (logical GPUs when
the machine has none, so ``@ray.remote(num_gpus=1)`` code still runs on CPU).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import PreflightError
from ...spec import JobSpec
from .gang import Gang, GangExit, describe_returncode
from .launch_mpi import descendants, kill_tree
from .private import make_socket_dir, runtime_dir
from ...rank import contract
from ...rank.contract import JobFolder

#: the driver writes what it is doing before fn runs (starting Ray) here; the agent shows it as
#: the job's status message (agent.Agent._on_metrics) and clears it when the file is gone
PHASE_FILE = contract.PHASE_FILE_NAME
RAY_INSTALL_HINT = "install Ray: `pip install 'gpujobs[ray]'` (ray[default])"
_SOCKET_ROOM = 66  # Ray adds "/session_<date>_<pid>/sockets/plasma_store"; AF_UNIX paths <= 107


def check_ray_available() -> str:
    """Return the installed Ray version; raise PreflightError naming what to install."""
    if importlib.util.find_spec("ray") is None:
        raise PreflightError("ray", f"the Python package is not installed; {RAY_INSTALL_HINT}")
    return importlib.metadata.version("ray")


def ray_temp_dir(job_dir: Path) -> Path:
    """``job_dir/ray`` when Ray's socket paths fit under it, else a short dir in the user's
    private runtime folder (the agent socket's: ours, 0700, checked; never a name in the
    temp dir another user could take first)."""
    inside = JobFolder(job_dir).ray_dir
    if len(str(inside)) + _SOCKET_ROOM <= 107:
        return inside
    tag = hashlib.sha1(str(Path(job_dir).resolve()).encode()).hexdigest()[:12]
    return runtime_dir() / f"ray-{tag}"


@dataclass
class RayGang(Gang):
    """One Ray driver plus its private local Ray instance. Same interface as :class:`Gang`.

    ``world_size`` is the number of Ray workers (it is what ``context().world_size`` says);
    only the driver is a process of ours: Ray starts the rest.
    """
    cpus_per_worker: float = 1.0
    gpus_per_worker: int = 0
    _exit: GangExit | None = None

    def __post_init__(self) -> None:
        self.framework = "ray"

    @property
    def temp_dir(self) -> Path:
        return ray_temp_dir(self.job_dir)

    @property
    def num_cpus(self) -> int:
        return max(1, math.ceil(self.world_size * self.cpus_per_worker))

    @property
    def num_gpus(self) -> int:
        if self.devices is not None:
            return len({d for group in self.devices for d in group})
        return self.world_size * self.gpus_per_worker

    def start(self) -> None:
        version = check_ray_available()
        self._prepare_dirs()
        temp = self.temp_dir
        if temp.parent != self.job_dir:
            make_socket_dir(temp.parent)  # ours and 0700 before anything goes in it
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir(mode=0o700)
        if temp.parent != self.job_dir:
            link = self.folder.ray_dir
            if link.is_symlink():
                link.unlink()
            link.symlink_to(temp)
        env = self._base_env()
        env.pop(contract.RAY_ADDRESS, None)
        env.update(RANK="0", LOCAL_RANK="0", GROUP_RANK="0", WORLD_SIZE=str(self.world_size))
        env.update({contract.RAY_NUM_CPUS: str(self.num_cpus), contract.RAY_NUM_GPUS: str(self.num_gpus),
                    contract.RAY_TEMP_DIR: str(temp), contract.RAY_VERSION: version,
                    contract.RAY_LAUNCHER_CLEANS: "1",  # _cleanup() ends Ray: no ray.shutdown()
                    contract.PHASE_FILE: str(self.folder.phase_file)})  # "starting Ray head"
        for var, value in (("RAY_AUTH_MODE", "disabled"), ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"),
                           ("RAY_USAGE_STATS_ENABLED", "0")):
            env.setdefault(var, value)
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(
                str(d) for d in sorted({d for group in self.devices for d in group}))
            env.pop(contract.DEVICE, None)
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray hands out its logical GPU ids itself
        self.procs[0] = self._popen([self.python, "-m", "gpujobs.rank.runner"], env,
                                    self.folder.rank_log(0))

    @property
    def driver_pid(self) -> int | None:
        return self.procs[0].pid if 0 in self.procs else None

    @property
    def pids(self) -> list[int]:
        """The driver and every process Ray started under it (while they run)."""
        pid = self.driver_pid
        return [] if pid is None else [pid, *descendants(pid)]

    def poll(self) -> GangExit | None:
        if self._exit is not None:
            return self._exit
        if 0 not in self.procs or self.procs[0].poll() is None:
            return None
        return self._end()

    def _end(self) -> GangExit:
        """Once the driver has ended (or is to be killed): end all of Ray, once."""
        if self._exit is not None:
            return self._exit
        self._cleanup()
        code = self.procs[0].returncode if 0 in self.procs else -signal.SIGKILL
        if code == 0:
            result = GangExit(True, {0: 0})
        else:
            result = GangExit(False, {0: code}, 0, f"Ray driver {describe_returncode(code)}")
        self._exit = self._finish(result)
        return self._exit

    def signal_all(self, sig: int) -> None:
        """Signal the driver only: SIGTERM to Ray's own processes would end the cluster at once."""
        pid = self.driver_pid
        if pid is not None and self.procs[0].poll() is None:
            os.kill(pid, sig)

    def terminate(self, grace: float = 5.0) -> None:
        """SIGTERM the driver (ctx.should_stop() turns True), then kill all of it after ``grace``."""
        if self._exit is not None:
            return
        if 0 in self.procs:
            self.signal_all(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self.procs[0].poll() is None:
                time.sleep(0.02)
        self._end()

    def _cleanup(self) -> None:
        pid = self.driver_pid
        # Ray's workers and agents may outlive the driver; they carry its job id env.
        kill_tree(pid, self.job_id)
        if pid is not None:
            self.procs[0].wait()
        temp = self.temp_dir
        shutil.rmtree(temp, ignore_errors=True)
        link = self.folder.ray_dir
        if link.is_symlink():
            link.unlink()


def ray_launcher(spec: JobSpec, **kw) -> RayGang:
    """The local agent's launcher for ``framework="ray"`` (see :mod:`.launchers`).

    ``spec``: ``nodes`` workers of ``gpus_per_proc`` GPUs and
    ``cpus_per_proc`` CPUs; ``kw``: job_id, job_dir, key_file, devices, restarts, cwd,
    spawner (ignored: Ray needs a fresh driver process).
    """
    kw.pop("spawner", None)
    return RayGang.from_spec(spec, cpus_per_worker=float(spec.cpus_per_proc),
                             gpus_per_worker=spec.gpus_per_proc, **kw)


ray_launcher.preflight = lambda: check_ray_available() and None  # type: ignore[attr-defined]
