"""What the Kubeflow kinds share (kinds/: the Trainer v2, Training Operator v1 and MPI Operator v2
kinds): ports, runPolicy, and gpujobs' ClusterTrainingRuntimes for the Trainer v2 kind."""
from __future__ import annotations

from typing import Any

from .bootstrap_script import MPI_SSH_PORT
from .podspec import DEFAULT_TORCH_IMAGE, RenderCtx, deadline_s

TRAINJOB_RUNTIME = "gpujobs-torch"
"""gpujobs' ClusterTrainingRuntime (``training_runtimes``; installed by ``gpujobs admin trainer-runtimes``):
Trainer's torch runtime with restartPolicy Never and backoffLimit 0, so a failing rank fails the job."""
TRAINJOB_VOLCANO_RUNTIME = "gpujobs-torch-volcano"
"""The same with ``podGroupPolicy.volcano``; used for volcano='gang'."""
STOCK_RUNTIME = "torch-distributed"
"""Kubeflow Trainer's own torch runtime (trainer@v2.3.0 manifests/base/runtimes/torch_distributed.yaml):
no restartPolicy, no backoffLimit, so JobSet's webhook makes the pods OnFailure and the node Job gets
batch/v1's backoffLimit 6: a rank that raises runs the user's function again, in place, up to 6 times."""
PYTORCH_PORT = 23456
SSH_PORT = {"name": "ssh", "containerPort": MPI_SSH_PORT, "protocol": "TCP"}

def training_runtimes(image: str = DEFAULT_TORCH_IMAGE) -> list[dict]:
    """gpujobs' ClusterTrainingRuntimes (for ``kubectl apply -f -``): Trainer's torch runtime
    (trainer@v2.3.0 manifests/base/runtimes/torch_distributed.yaml; the Volcano one after
    examples/yaml/04-volcano-integration.yaml, Trainer installs none) with the node Job's
    ``backoffLimit: 0`` and its pods' ``restartPolicy: Never``. Without them JobSet's defaulting
    webhook sets an empty restartPolicy to OnFailure (jobset@v0.12.0 pkg/webhooks/jobset_webhook.go
    Default) and batch/v1 defaults backoffLimit to 6: the kubelet restarts a failed rank's container
    and the user's function runs again; a Trainer v2 job's runtimePatches cannot set restartPolicy
    (trainer@v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go PodSpecPatch)."""
    out = []
    for name, volcano in ((TRAINJOB_RUNTIME, False), (TRAINJOB_VOLCANO_RUNTIME, True)):
        spec: dict[str, Any] = {"mlPolicy": {"numNodes": 1, "torch": {}}}
        if volcano:
            spec["podGroupPolicy"] = {"volcano": {}}
        spec["template"] = {"spec": {"replicatedJobs": [{"name": "node", "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "node", "image": image}]}}}}}]}}
        out.append({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                    "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
                    "spec": spec})
    return out


def runtime_reruns_ranks(runtime: dict) -> str:
    """Why a failing rank would run again under this ClusterTrainingRuntime ('' when it cannot):
    its node Job's pods restart in place unless restartPolicy is Never, and a failed pod is
    replaced while backoffLimit (default 6) is above 0."""
    for rj in ((((runtime.get("spec") or {}).get("template") or {}).get("spec") or {})
               .get("replicatedJobs") or []):
        if rj.get("name") != "node":
            continue
        job = (rj.get("template") or {}).get("spec") or {}
        why = []
        policy = ((job.get("template") or {}).get("spec") or {}).get("restartPolicy")
        if policy != "Never":
            why.append(f"restartPolicy {policy or 'unset (JobSet makes it OnFailure)'}")
        if job.get("backoffLimit", 6) != 0:
            why.append(f"backoffLimit {job.get('backoffLimit', '6 (the default)')}")
        return ", ".join(why)
    return ""


def gpus_per_pod(ctx: RenderCtx) -> int:
    return ctx.spec.gpus_per_proc * ctx.spec.procs_per_node


def run_policy(ctx: RenderCtx, pods: int) -> dict:
    # cleanPodPolicy Running: once the job ends the operator deletes the pods still running (an
    # MPI job's sshd workers never exit; a Training Operator job's ranks may hang in a collective after a peer
    # failed) and keeps the ended ones with their logs (mpi-operator@v0.8.0 mpi_job_controller.go
    # syncHandler / deleteWorkerPods; its default None keeps them all, holding their GPUs)
    rp: dict[str, Any] = {"cleanPodPolicy": "Running", "backoffLimit": 0}
    if ctx.kueue:
        rp["suspend"] = True
    if ctx.spec.max_runtime_s:
        rp["activeDeadlineSeconds"] = deadline_s(ctx.spec.max_runtime_s)
    if ctx.spec.volcano == "gang":
        sp: dict[str, Any] = {"minAvailable": pods}
        if ctx.spec.volcano_queue:
            sp["queue"] = ctx.spec.volcano_queue
        rp["schedulingPolicy"] = sp
    return rp
