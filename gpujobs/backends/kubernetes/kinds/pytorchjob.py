"""PyTorchJob (Kubeflow Training Operator v1, kubeflow.org/v1): Master (node rank 0) + Worker
(nodes - 1), container 'pytorch' with its port. Rendered for Kueue it warns: Kueue v0.20 deprecates
its Trainer v1 integration (kueue #12601, #14504; off in the default configuration); the supported
path is the Trainer v2 kind (``SUCCESSOR``)."""
from __future__ import annotations

from typing import Any

from ..render.kubeflow import PYTORCH_PORT, gpus_per_pod, run_policy
from ..render.podspec import RenderCtx, bootstrap_command, container, pod_template
from .base import KindBase, KindState, PodSet, pod_set, replicas_sum
from .kubeflow_v1 import operator_state
from .trainjob import KIND as SUCCESSOR


class PyTorchJob(KindBase):
    name = "PyTorchJob"
    api_kind = "PyTorchJob"
    group = "kubeflow.org"
    version = "v1"
    plural = "pytorchjobs"
    frameworks = ("ddp", "fsdp")
    kueue_integration = "kubeflow.org/pytorchjob"
    rank_env = (["PET_NODE_RANK", "RANK"], ["PET_MASTER_ADDR", "MASTER_ADDR"], ["PET_MASTER_PORT", "MASTER_PORT"])

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
        if ctx.kueue:
            import warnings
            from ....errors import DeprecatedPathWarning
            warnings.warn("PyTorchJob under Kueue: Kueue v0.20 deprecates its Kubeflow Trainer v1 (PyTorchJob) "
                          "integration (kueue #12601, #14504; kubeflow.org/pytorchjob is off in its default "
                          "configuration and due to be removed), so the job may never be admitted. The supported "
                          f"path is {SUCCESSOR.name}, the default for ddp/fsdp: drop kind='PyTorchJob' (.kubernetes("
                          f"kind='{SUCCESSOR.name}'), gpujobs submit --kind {SUCCESSOR.name})", DeprecatedPathWarning,
                          stacklevel=2)
        spec = ctx.spec
        sched = "volcano" if spec.volcano == "gang" else None
        ports = [{"name": "pytorchjob-port", "containerPort": PYTORCH_PORT, "protocol": "TCP"}]
        replicas: dict[str, Any] = {}
        for role, count in (("Master", 1), ("Worker", spec.nodes - 1)):
            if count <= 0:
                continue
            c, vols = container(ctx, "pytorch", bootstrap_command(), procs=spec.procs_per_node,
                                gpus=gpus_per_pod(ctx), ports=ports)
            replicas[role] = {"replicas": count, "restartPolicy": "Never",
                              "template": pod_template(ctx, role.lower(), c, vols, scheduler_name=sched)}
        return {"apiVersion": self.api_version, "kind": self.api_kind, "metadata": meta,
                "spec": {"nprocPerNode": str(spec.procs_per_node),
                         "runPolicy": run_policy(ctx, spec.nodes),
                         "pytorchReplicaSpecs": replicas}}

    def pod_sets(self, job: dict) -> list[PodSet]:
        return [pod_set(k.lower(), v.get("replicas", 1), v["template"])
                for k, v in job["spec"]["pytorchReplicaSpecs"].items()]

    def gang_size(self, job: dict) -> int:
        return replicas_sum((job.get("spec") or {}).get("pytorchReplicaSpecs"))

    def state(self, job: dict) -> KindState:
        return operator_state(job, self.gang_size(job))


KIND = PyTorchJob()
