"""The local backend: a one-machine batch scheduler that runs real rank processes.

``LocalBackend`` is the client; the detached agent (:mod:`.agent`) owns the GPUs. The front ends
import this package's names only (``__all__``), never its modules (an import-linter contract).
"""
from .backend import STOPPED_MARKER, LocalBackend
from .client import agent_pids, stop_agent
from .launchers import make_gang, register_launcher

__all__ = ["LocalBackend", "STOPPED_MARKER", "stop_agent", "agent_pids", "make_gang", "register_launcher"]
