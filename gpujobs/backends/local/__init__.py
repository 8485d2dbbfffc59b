"""The local backend: a one-machine batch scheduler that runs real rank processes.

``LocalBackend`` is the client; the detached agent (:mod:`.agent`) owns the GPUs. The front ends
import this package's names only (``__all__``), never its modules (an import-linter contract).

Modules: ``backend`` (LocalBackend) talks through ``client`` and ``protocol`` to the agent's
``server`` (its peer-checked socket, ops table); ``daemon`` (the process) runs ``agent`` (the
scheduler: records, commands, the admit/start/stop loop), which owns ``adoption`` (Recovery:
ranks of a previous agent), ``liveness`` (GangWatcher: metrics, progress and stalls of running
gangs) and ``forecasting`` (reasons, expected starts, plan()); ``queue_config`` (its queues
from the typed settings); ``records`` (a job's record), ``store`` (SQLite), ``jobdir`` (a job's
folder), ``private`` (0700 state), ``diskspace`` (which device is full); ``gang``, ``zygote`` and
``lean`` (which fork server a gang's ranks come from: the torch zygote or the lean one without
torch), ``launchers`` (the gang factory), ``launch_ray`` and ``launch_mpi``; ``startup`` (ranks that
have not reached the job's function yet); ``stacks`` (live stacks); ``procs`` (whether a
process still runs, a zombie counting as ended).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import STOPPED_MARKER, LocalBackend
    from .client import agent_pids, stop_agent
    from .launchers import make_gang, register_launcher

__all__ = ["LocalBackend", "STOPPED_MARKER", "stop_agent", "agent_pids", "make_gang", "register_launcher"]


def __getattr__(name: str) -> Any:
    """The package's names, imported when first read: the agent's daemon and its zygotes run
    modules of this package (``python -m``), and this file is imported before them; a zygote
    imports none of the client's modules before torch, on the agent's start-up path."""
    if name in ("LocalBackend", "STOPPED_MARKER"):
        from . import backend
        value = getattr(backend, name)
    elif name in ("stop_agent", "agent_pids"):
        from . import client
        value = getattr(client, name)
    elif name in ("make_gang", "register_launcher"):
        from . import launchers
        value = getattr(launchers, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
