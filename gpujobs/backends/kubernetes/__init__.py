"""Kubernetes backend: real manifests (TrainJob, PyTorchJob, MPIJob, RayJob, Volcano Job,
AppWrapper) with Kueue labels, a payload ConfigMap, and a safe, idempotent submit.

``gpujobs.backends.kubernetes:KubernetesBackend`` is how the core finds it;
``render_yaml(spec, kind)`` prints the objects for ``kubectl apply -f -``.

Modules: ``backend`` (KubernetesBackend) over three stages, the packages ``render`` (JobSpec ->
objects, no cluster), ``submit`` (checks, then all-or-nothing creation) and ``status`` (what a
job is doing), with ``control`` (cancel, stacks: acting on a job); shared by them: ``naming``
(ids, labels, annotations), ``keys`` (the key store: job keys and submit records), ``kinds``
(the kind table), ``retry`` and ``cluster`` (Cluster: what the stages use of the backend;
ClusterState: its hubs and caches).
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
