"""Kubernetes backend: real manifests (the job kinds of ``kinds/``, one module each: Kubeflow
Trainer, Training Operator and MPI Operator jobs, KubeRay, Volcano, CodeFlare's wrapper) with Kueue
labels, a payload ConfigMap, and a safe, idempotent submit.

``gpujobs.backends.kubernetes:KubernetesBackend`` is how the core finds it;
``render_yaml(spec, kind)`` prints the objects for ``kubectl apply -f -``. The front ends (the
CLI's ``render`` and ``admin`` verbs) import this package's names only (``__all__``), never its
modules (an import-linter contract).

Modules: ``backend`` (KubernetesBackend) over three stages, the packages ``render`` (JobSpec ->
objects, no cluster), ``submit`` (checks, then all-or-nothing creation) and ``status`` (what a
job is doing), with ``control`` (cancel, stacks: acting on a job); shared by them: ``naming``
(ids, labels, annotations), ``keys`` (the key store: job keys and submit records), ``kinds``
(one module per job kind, each a Kind, and their registry), ``retry``, ``access`` (the API
server's refusals: unreachable, 401, 403, each with its fix) and ``cluster`` (Cluster: what the
stages use of the backend; ClusterState: its hubs and caches).
"""
from __future__ import annotations

from typing import Any

__all__ = ["KubernetesBackend", "check_kind", "kind_names", "render_yaml", "render_objects", "to_yaml", "user_manifests",
           "training_runtimes", "MPI_DOCKERFILE"]


def check_kind(framework: str, kind: str | None) -> None:
    """SpecError when ``kind`` is not one of this backend's kinds, or cannot run a ``framework`` job."""
    from .kinds import check_kind as check
    check(framework, kind)


def kind_names() -> tuple[str, ...]:
    """The job kinds this backend renders (``kind=``), in the order help texts list them."""
    from .kinds import KINDS
    return tuple(KINDS)


def __getattr__(name: str) -> Any:  # lazy: importing the package must not need the client
    if name == "KubernetesBackend":
        from .backend import KubernetesBackend
        return KubernetesBackend
    if name in ("render_yaml", "render_objects", "to_yaml"):
        from .render import yamlout
        return getattr(yamlout, name)
    if name == "user_manifests":
        from .submit.rbac import user_manifests
        return user_manifests
    if name == "training_runtimes":
        from .render.kubeflow import training_runtimes
        return training_runtimes
    if name == "MPI_DOCKERFILE":
        from .render.images import MPI_DOCKERFILE
        return MPI_DOCKERFILE
    raise AttributeError(name)
