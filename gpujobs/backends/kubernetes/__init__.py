"""Kubernetes backend: real manifests (the job kinds of ``kinds/``, one module each: Kubeflow
Trainer, Training Operator and MPI Operator jobs, KubeRay, Volcano, CodeFlare's wrapper) with Kueue
labels, a payload ConfigMap, and a safe, idempotent submit.

``gpujobs.backends.kubernetes:KubernetesBackend`` is how the core finds it;
``render_yaml(spec, kind)`` prints the objects for ``kubectl apply -f -``.
"""
from __future__ import annotations

from typing import Any

__all__ = ["KubernetesBackend", "kind_names", "render_yaml"]


def kind_names() -> tuple[str, ...]:
    """The job kinds this backend renders (``kind=``), in the order help texts list them."""
    from .kinds import KINDS
    return tuple(KINDS)


def __getattr__(name: str) -> Any:  # lazy: importing the package must not need the client
    if name == "KubernetesBackend":
        from .backend import KubernetesBackend
        return KubernetesBackend
    if name == "render_yaml":
        from .render.yamlout import render_yaml
        return render_yaml
    raise AttributeError(name)
