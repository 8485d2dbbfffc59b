"""The API vocabulary of the fake cluster: :class:`ApiError` (HTTP status + Kubernetes
``reason``), :class:`Resource` and the resource catalogue (built-in kinds and the CRDs the
simulator serves), and timestamps.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

__all__ = ["ApiError", "Resource", "BUILTIN", "CRDS", "CRD_RESOURCE", "now_iso"]


class ApiError(Exception):
    """An API failure with HTTP status and Kubernetes ``reason``."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details,
                "code": self.code}


@dataclass(frozen=True)
class Resource:
    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True
    status_sub: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def api_version(self, version: str | None = None) -> str:
        v = version or self.versions[0]
        return f"{self.group}/{v}" if self.group else v

    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


def _r(group: str, versions: str, plural: str, kind: str, namespaced: bool = True,
       status_sub: bool = True) -> Resource:
    return Resource(group, tuple(versions.split(",")), plural, kind, namespaced, status_sub)


BUILTIN: tuple[Resource, ...] = (
    _r("", "v1", "pods", "Pod"), _r("", "v1", "configmaps", "ConfigMap", status_sub=False),
    _r("", "v1", "secrets", "Secret", status_sub=False), _r("", "v1", "events", "Event", status_sub=False),
    _r("", "v1", "namespaces", "Namespace", namespaced=False), _r("", "v1", "services", "Service"),
    _r("", "v1", "serviceaccounts", "ServiceAccount", status_sub=False),
    _r("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    _r("", "v1", "nodes", "Node", namespaced=False),
    _r("", "v1", "limitranges", "LimitRange", status_sub=False),
    _r("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False, status_sub=False),
    _r("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False, status_sub=False),
    _r("batch", "v1", "jobs", "Job"), _r("apps", "v1", "deployments", "Deployment"),
    _r("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False, status_sub=False),
    _r("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
       namespaced=False),
)
CRDS: tuple[Resource, ...] = (  # Kueue: v1beta2 only, as Kueue v0.20 serves it (kueue #14558)
    _r("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    _r("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue"),
    _r("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False),
    _r("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False,
       status_sub=False),
    _r("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass",
       namespaced=False, status_sub=False),
    _r("kueue.x-k8s.io", "v1beta2", "cohorts", "Cohort", namespaced=False),
    _r("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", namespaced=False),
    _r("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    _r("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    _r("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    _r("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime"),
    _r("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime",
       namespaced=False),
    _r("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    _r("ray.io", "v1", "rayjobs", "RayJob"),
    _r("ray.io", "v1", "rayclusters", "RayCluster"),
    _r("batch.volcano.sh", "v1alpha1", "jobs", "Job"),
    _r("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    _r("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False),
    _r("workload.codeflare.dev", "v1beta2", "appwrappers", "AppWrapper"),
)
CRD_RESOURCE = BUILTIN[-1]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
