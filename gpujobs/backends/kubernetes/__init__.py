"""Kubernetes backend: real manifests (TrainJob, PyTorchJob, MPIJob, RayJob, Volcano Job,
AppWrapper) with Kueue labels, a payload ConfigMap, and a safe, idempotent submit.

``gpujobs.backends.kubernetes:KubernetesBackend`` is how the core finds it;
``render_yaml(spec, kind)`` prints the objects for ``kubectl apply -f -``.
"""
from __future__ import annotations

from typing import Any

__all__ = ["KubernetesBackend", "render_yaml"]


def __getattr__(name: str) -> Any:  # lazy: importing the package must not need the client
    if name == "KubernetesBackend":
        from .backend import KubernetesBackend
        return KubernetesBackend
    if name == "render_yaml":
        from .render.yamlout import render_yaml
        return render_yaml
    raise AttributeError(name)
