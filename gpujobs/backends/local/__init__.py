"""The local backend: a one-machine batch scheduler that runs real rank processes.

``LocalBackend`` is the client; the detached agent (:mod:`.agent`) owns the GPUs.
"""
from .backend import LocalBackend
from .client import agent_pids, stop_agent
from .launchers import make_gang, register_launcher

__all__ = ["LocalBackend", "stop_agent", "agent_pids", "make_gang", "register_launcher"]
