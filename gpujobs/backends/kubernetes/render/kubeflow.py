"""TrainJob (Kubeflow Trainer v2), PyTorchJob (Training Operator v1) and MPIJob (MPI Operator v2)."""
from __future__ import annotations

from typing import Any

from .bootstrap_script import MPI_SSH_PORT
from .podspec import (DEFAULT_TORCH_IMAGE, RenderCtx, bootstrap_command, deadline_s, container, pod_template,
                      sshd_command, sshd_readiness)

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

# Where each operator puts the pod's node rank / master address / port (bootstrap.json).
RANK_ENV: dict[str, tuple[list[str], list[str], list[str]]] = {
    "TrainJob": (["PET_NODE_RANK", "JOB_COMPLETION_INDEX"], ["PET_MASTER_ADDR", "MASTER_ADDR"],
                 ["PET_MASTER_PORT", "MASTER_PORT"]),
    "PyTorchJob": (["PET_NODE_RANK", "RANK"], ["PET_MASTER_ADDR", "MASTER_ADDR"],
                   ["PET_MASTER_PORT", "MASTER_PORT"]),
    "MPIJob": ([], [], []),
}


def training_runtimes(image: str = DEFAULT_TORCH_IMAGE) -> list[dict]:
    """gpujobs' ClusterTrainingRuntimes (for ``kubectl apply -f -``): Trainer's torch runtime
    (trainer@v2.3.0 manifests/base/runtimes/torch_distributed.yaml; the Volcano one after
    examples/yaml/04-volcano-integration.yaml, Trainer installs none) with the node Job's
    ``backoffLimit: 0`` and its pods' ``restartPolicy: Never``. Without them JobSet's defaulting
    webhook sets an empty restartPolicy to OnFailure (jobset@v0.12.0 pkg/webhooks/jobset_webhook.go
    Default) and batch/v1 defaults backoffLimit to 6: the kubelet restarts a failed rank's container
    and the user's function runs again; a TrainJob's runtimePatches cannot set restartPolicy
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


def _gpus_per_pod(ctx: RenderCtx) -> int:
    return ctx.spec.gpus_per_proc * ctx.spec.procs_per_node


def trainjob(ctx: RenderCtx, meta: dict, runtime: str = TRAINJOB_RUNTIME,
             volcano_runtime: str = TRAINJOB_VOLCANO_RUNTIME) -> dict:
    """TrainJob on a torch ClusterTrainingRuntime; pod details go in as a runtime patch."""
    spec = ctx.spec
    c, vols = container(ctx, "node", bootstrap_command(), procs=spec.procs_per_node,
                        gpus=_gpus_per_pod(ctx))
    tmpl = pod_template(ctx, "node", c, vols, restart_policy=None)
    pod_patch: dict[str, Any] = {k: v for k, v in tmpl["spec"].items()
                                 if k in ("volumes", "nodeSelector", "tolerations", "securityContext",
                                          "terminationGracePeriodSeconds")}
    pod_patch["containers"] = [{"name": "node", "volumeMounts": c["volumeMounts"],
                                "securityContext": c["securityContext"]}]
    body: dict[str, Any] = {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                       "name": volcano_runtime if spec.volcano == "gang" else runtime},
        "trainer": {"image": c["image"], "command": c["command"], "env": c["env"],
                    "numNodes": spec.nodes, "numProcPerNode": spec.procs_per_node,
                    "resourcesPerNode": c["resources"]},
        "runtimePatches": [{
            "manager": "gpujobs.dev/submitter",
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"spec": {"template": {"metadata": tmpl["metadata"],
                                                   "spec": pod_patch}}}}]}}}}],
    }
    if ctx.kueue:
        body["suspend"] = True
    if spec.max_runtime_s:
        body["activeDeadlineSeconds"] = deadline_s(spec.max_runtime_s)
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
            "spec": body}


def _run_policy(ctx: RenderCtx, pods: int) -> dict:
    # cleanPodPolicy Running: once the job ends the operator deletes the pods still running (an
    # MPIJob's sshd workers never exit; a PyTorchJob's ranks may hang in a collective after a peer
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


def pytorchjob(ctx: RenderCtx, meta: dict) -> dict:
    """PyTorchJob: Master (node rank 0) + Worker (nodes - 1); container 'pytorch' with its port.
    Rendered for Kueue it warns: Kueue v0.20 deprecates its Trainer v1 (PyTorchJob) integration
    (kueue #12601, #14504; off in the default configuration), TrainJob is the supported path."""
    if ctx.kueue:
        import warnings
        from ....errors import DeprecatedPathWarning
        warnings.warn("PyTorchJob under Kueue: Kueue v0.20 deprecates its Kubeflow Trainer v1 (PyTorchJob) "
                      "integration (kueue #12601, #14504; kubeflow.org/pytorchjob is off in its default "
                      "configuration and due to be removed), so the job may never be admitted. The supported "
                      "path is TrainJob, the default for ddp/fsdp: drop kind='PyTorchJob' (.kubernetes(kind="
                      "'TrainJob'), gpujobs submit --kind TrainJob)", DeprecatedPathWarning, stacklevel=2)
    spec = ctx.spec
    sched = "volcano" if spec.volcano == "gang" else None
    ports = [{"name": "pytorchjob-port", "containerPort": PYTORCH_PORT, "protocol": "TCP"}]
    replicas: dict[str, Any] = {}
    for role, count in (("Master", 1), ("Worker", spec.nodes - 1)):
        if count <= 0:
            continue
        c, vols = container(ctx, "pytorch", bootstrap_command(), procs=spec.procs_per_node,
                            gpus=_gpus_per_pod(ctx), ports=ports)
        replicas[role] = {"replicas": count, "restartPolicy": "Never",
                          "template": pod_template(ctx, role.lower(), c, vols, scheduler_name=sched)}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"nprocPerNode": str(spec.procs_per_node),
                     "runPolicy": _run_policy(ctx, spec.nodes),
                     "pytorchReplicaSpecs": replicas}}


def mpijob(ctx: RenderCtx, meta: dict) -> dict:
    """MPIJob v2beta1: one launcher running mpirun, ``nodes`` workers running sshd, slots = ranks/node.
    ``launcherCreationPolicy: WaitForWorkersReady``: the launcher is created once every worker is
    Ready, i.e. its sshd accepts connections (readiness probe); until then gpujobs' status says so
    (status.hints.mpi_workers_hint). volcano='gang' needs the MPI Operator run with
    ``--gang-scheduling=volcano`` (mpi-operator@v0.8.0 cmd/mpi-operator/app/options/options.go; its
    release manifest passes none), else no PodGroup is made (status.hints.mpi_gang_hint)."""
    spec = ctx.spec
    sched = "volcano" if spec.volcano == "gang" else None
    lc, lvols = container(ctx, "launcher", bootstrap_command("mpi-launcher"), procs=1, gpus=0,
                          cpus=1, shm=False, mode="root")
    wc, wvols = container(ctx, "worker", sshd_command(), procs=spec.procs_per_node,
                          gpus=_gpus_per_pod(ctx), mode="sshd", ports=[SSH_PORT])
    wc["readinessProbe"] = sshd_readiness()
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta,
            "spec": {"slotsPerWorker": spec.procs_per_node,
                     "mpiImplementation": "OpenMPI",
                     "launcherCreationPolicy": "WaitForWorkersReady",
                     "sshAuthMountPath": "/root/.ssh",
                     "runPolicy": _run_policy(ctx, spec.nodes + 1),
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "restartPolicy": "Never",
                                      "template": pod_template(ctx, "launcher", lc, lvols,
                                                               mode="root", scheduler_name=sched,
                                                               topology=False)},
                         "Worker": {"replicas": spec.nodes, "restartPolicy": "Never",
                                    "template": pod_template(ctx, "worker", wc, wvols, mode="sshd",
                                                             scheduler_name=sched)}}}}
