"""One factory for the local agent's gangs, with a registry for other launchers.

The agent calls :func:`make_gang` for every admitted job (and again on each restart after
preemption). ddp/fsdp use :class:`~.gang.Gang`; other frameworks may register a launcher
(Ray, mpirun) with :func:`register_launcher`; until one is registered they use Gang too.

A launcher is ``factory(spec, **kw) -> gang``, ``spec`` a :class:`~gpujobs.spec.JobSpec`
(:meth:`.gang.Gang.from_spec` maps it) where the gang offers ``start()``, ``poll() -> GangExit | None`` (may wait while it
cleans up), ``ended()`` and ``all_exited()`` (cheap checks), ``signal_all(sig)``,
``terminate(grace)`` (cleans up once; a later ``poll()`` returns the exit without doing it
again), ``pids`` and ``world_size``. Keyword arguments: ``job_id``, ``job_dir`` (Path),
``key_file`` (Path), ``devices`` (list of GPU index lists per rank, or None for CPU ranks),
``restarts`` (int), ``cwd`` (str | None), ``spawner`` (the agent's zygote, or None).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from ...spec import JobSpec
from .gang import Gang

Launcher = Callable[..., Any]
_LAUNCHERS: dict[str, Launcher] = {}


def register_launcher(framework: str, factory: Launcher) -> None:
    """Use ``factory`` for jobs of ``framework`` (e.g. "ray", "mpi")."""
    _LAUNCHERS[framework] = factory


def launcher_for(framework: str) -> Launcher:
    if framework not in _LAUNCHERS:
        _load_plugins()
    return _LAUNCHERS.get(framework, gang_launcher)


@functools.cache
def _load_plugins() -> None:
    """Launchers from the ``gpujobs.local_launchers`` entry-point group (name = framework),
    read once per process: the scan reads every installed distribution's metadata (tens of
    ms), and ddp jobs, which no launcher is registered for, would pay it on every start."""
    try:
        from importlib.metadata import entry_points
        for ep in entry_points(group="gpujobs.local_launchers"):
            _LAUNCHERS.setdefault(ep.name, ep.load())
    except Exception:  # noqa: BLE001 - a broken plugin must not break the default launcher
        pass


def gang_launcher(spec: JobSpec, **kw: Any) -> Gang:
    """Plain rank processes (torch.distributed env, FileStore rendezvous in the job dir)."""
    return Gang.from_spec(spec, **kw)


def preflight(framework: str) -> None:
    """Run the launcher's own check (``factory.preflight()``, e.g. mpirun/ray installed) at submit."""
    check = getattr(_LAUNCHERS.get(framework), "preflight", None)  # no entry-point scan per submit
    if check is not None:
        check()


def _lazy(module: str, name: str) -> Launcher:
    """A launcher imported on first use (Ray / MPI modules stay unloaded for torch jobs)."""
    def load() -> Launcher:
        import importlib
        return getattr(importlib.import_module(module, __package__), name)

    def factory(spec: JobSpec, **kw: Any) -> Any:
        return load()(spec, **kw)
    factory.preflight = lambda: load().preflight()  # type: ignore[attr-defined]
    return factory


register_launcher("ray", _lazy(".launch_ray", "ray_launcher"))  # [ray-mpi]
register_launcher("mpi", _lazy(".launch_mpi", "mpi_launcher"))


def make_gang(spec: JobSpec, **kw: Any) -> Any:
    """The gang for ``spec``, from the launcher of its framework (a command job's ranks run
    its program: :attr:`.gang.Gang.program`)."""
    return launcher_for(spec.framework)(spec, **kw)
