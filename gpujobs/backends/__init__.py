"""Backends, found lazily by name (or the ``gpujobs.backends`` entry-point group).

Backends never import each other; the core never imports a backend at import time. The
front ends import this package only: :func:`get_backend` and the protocols of the seam
(:mod:`.base`); a backend's own entry (``gpujobs.backends.kubernetes``) for what only it does.

Modules: ``base`` (the interface every backend implements, the seam's protocols); packages
``local`` and ``kubernetes``.
"""
from __future__ import annotations

import importlib
from functools import lru_cache

from ..errors import SpecError
from ..spec import default_backend_name
from .base import (CAPABILITIES, Backend, ChecksQueues, HasMetricsHistory, HasProgressHistory,
                   HasStacks, Plans, Renders)

_BUILTIN = {
    "local": "gpujobs.backends.local:LocalBackend",
    "kubernetes": "gpujobs.backends.kubernetes:KubernetesBackend",
}
_ALIASES = {"k8s": "kubernetes", "kube": "kubernetes"}


def _available() -> dict[str, str]:
    found = dict(_BUILTIN)
    try:
        from importlib.metadata import entry_points
        for ep in entry_points(group="gpujobs.backends"):
            found.setdefault(ep.name, ep.value)
    except Exception:
        pass
    return found


__all__ = ["get_backend", "default_backend_name", "Backend", "CAPABILITIES", "Renders", "Plans",
           "ChecksQueues", "HasStacks", "HasMetricsHistory", "HasProgressHistory"]


@lru_cache(maxsize=None)
def get_backend(name: str | None = None) -> Backend:
    """The backend instance for ``name`` (shared per process)."""
    name = _ALIASES.get(name or default_backend_name(), name or default_backend_name())
    table = _available()
    if name not in table:
        raise SpecError("backend", f"unknown backend {name!r}",
                        f"use one of {', '.join(sorted(table))}")
    module, _, attr = table[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    return cls()
