"""IPython extension: ``%load_ext gpujobs_magic`` then ``%%gpujob --gpus 4``.

Importing :mod:`gpujobs` never registers magics; loading this extension does.

Modules: ``magics`` (``%%gpujob`` and ``%gpujobs``), ``cell`` (a cell as a function that runs on
every rank).
"""
from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%gpujob`` and ``%gpujobs`` (loading twice is a no-op)."""
    from .magics import GpuJobMagics
    if "GpuJobMagics" in ipython.magics_manager.registry:
        return
    ipython.register_magics(GpuJobMagics(ipython))


def unload_ipython_extension(ipython: Any) -> None:
    mm = ipython.magics_manager
    mm.registry.pop("GpuJobMagics", None)
    mm.magics["cell"].pop("gpujob", None)
    mm.magics["line"].pop("gpujobs", None)
