"""RayJob (KubeRay), Volcano Job (pytorch / mpi plugins) and AppWrapper around a Volcano Job."""
from __future__ import annotations

import copy
import math
import shlex
from typing import Any

from ....rank import contract
from .bootstrap_script import MPI_SSH_PORT
from .podspec import (RenderCtx, bootstrap_command, client_ray_version, container, pod_labels,
                      sshd_command,
                      pod_spec_extras, ray_image, security_context, pod_template)
from .kubeflow import PYTORCH_PORT

RANK_ENV: dict[str, tuple[list[str], list[str], list[str]]] = {
    "RayJob": ([], [], []),
    # Volcano's pytorch plugin: RANK = pod index (master 0, worker i+1), WORLD_SIZE = pods.
    "VolcanoJob": (["RANK"], ["MASTER_ADDR"], ["MASTER_PORT"]),
    "AppWrapper": (["RANK"], ["MASTER_ADDR"], ["MASTER_PORT"]),
}
RAY_TTL_AFTER_FINISHED_S = 60


def rayjob(ctx: RenderCtx, meta: dict) -> dict:
    """RayJob: fn runs as the driver on the head (entrypoint); ``nodes`` fixed-size GPU workers.

    Under Kueue: ``shutdownAfterJobFinishes: true`` and no ``clusterSelector`` (Kueue's
    webhook rejects anything else); ``suspend: true`` until admission.
    """
    spec = ctx.spec
    gpu = spec.gpus_per_proc > 0
    image = ctx.spec.image or ray_image(gpu)
    hc, hvols = container(ctx, "ray-head", [], procs=1, gpus=0, cpus=max(1.0, spec.cpus_per_proc),
                          image=image, ports=[{"containerPort": 6379, "name": "gcs-server"},
                                              {"containerPort": 8265, "name": "dashboard"},
                                              {"containerPort": 10001, "name": "client"}])
    del hc["command"]  # KubeRay starts `ray start --head`; the entrypoint runs the bootstrap
    wc, wvols = container(ctx, "ray-worker", [], procs=1, gpus=spec.gpus_per_proc, image=image)
    del wc["command"]
    if spec.volcano == "gang":
        meta.setdefault("labels", {})["ray.io/scheduler-name"] = "volcano"
        meta["labels"]["volcano.sh/queue-name"] = spec.volcano_queue or "default"
    body: dict[str, Any] = {
        # The runner compares the cluster's Ray with the client's and fails clearly on a mismatch.
        "entrypoint": shlex.join(["env", f"{contract.RAY_VERSION}={client_ray_version() or image_ray_version(image)}",
                                  *bootstrap_command()]),
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": RAY_TTL_AFTER_FINISHED_S,
        "backoffLimit": 0,
        # the submitter Job's own backoffLimit is 2 unless set (kuberay@v1.7.0 rayjob_controller.go
        # getSubmitterTemplate / createNewK8sJob): a dropped `ray job logs --follow` made a second
        # submitter pod that follows the driver from the start again (common/job.go
        # BuildJobSubmitCommand), and logs() showed its output twice
        "submitterConfig": {"backoffLimit": 0},
        "submitterPodTemplate": submitter_template(ctx, submitter_image(image)),
        "rayClusterSpec": {
            "rayVersion": image_ray_version(image),
            "headGroupSpec": {"rayStartParams": {"num-gpus": "0"},
                              "template": pod_template(ctx, "head", hc, hvols, restart_policy=None,
                                                       topology=False)},
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": spec.nodes, "minReplicas": spec.nodes,
                "maxReplicas": spec.nodes, "rayStartParams": {},
                "template": pod_template(ctx, "worker", wc, wvols, restart_policy=None)}],
        },
    }
    if ctx.kueue:
        body["suspend"] = True
    if spec.max_runtime_s:
        # KubeRay refuses activeDeadlineSeconds <= 0 (ValidationFailed; kuberay@v1.7.0
        # ray-operator/controllers/ray/utils/validation.go ValidateRayJobSpec)
        body["activeDeadlineSeconds"] = max(1, math.ceil(spec.max_runtime_s))
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": body}


# KubeRay's default submitter container (kuberay@v1.7.0 ray-operator/controllers/ray/common/job.go
# GetDefaultSubmitterContainer): the head's image, requests cpu 500m / memory 200Mi, limits 1 / 1Gi.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def submitter_template(ctx: RenderCtx, image: str) -> dict:
    """``spec.submitterPodTemplate``: in K8sJobMode KubeRay runs the entrypoint from a separate
    batch/v1 Job (``ray job submit --no-wait -- <entrypoint>; ray job logs --follow``,
    kuberay@v1.7.0 ray-operator/controllers/ray/common/job.go BuildJobSubmitCommand) whose pod
    log is the driver's output, result line included. Its pod gets only this template's labels plus
    KubeRay's own (rayjob_controller.go getSubmitterTemplate), so the template carries gpujobs'
    pod labels (role ``submitter``) for gpujobs to find and read it. No command: KubeRay fills in
    the submit command when the container has none (configureSubmitterContainer)."""
    spec = pod_spec_extras(ctx)
    spec.update(restartPolicy="Never", containers=[{
        "name": SUBMITTER_CONTAINER, "image": image, "resources": copy.deepcopy(SUBMITTER_RESOURCES),
        "securityContext": security_context()}])
    spec.pop("terminationGracePeriodSeconds", None)
    return {"metadata": {"labels": pod_labels(ctx, "submitter")}, "spec": spec}


def submitter_image(image: str) -> str:
    """The image of the submitter pod, which only runs the Ray CLI: a GPU image of rayproject/ray
    (``...-gpu``, ``...-cu121``) becomes its CPU tag (the same Ray and Python; KubeRay's default
    is the head's image, kuberay@v1.7.0 common/job.go GetDefaultSubmitterContainer). Other images
    are kept: gpujobs cannot know a CPU twin of them."""
    import re
    m = re.fullmatch(r"((?:docker\.io/)?rayproject/ray(?:-ml)?:[^-]+-py\d+)-(?:gpu|cu\d+)", image)
    return m.group(1) if m else image


def image_ray_version(image: str) -> str:
    """The Ray version a rayproject/ray tag names ("rayproject/ray:2.52.0-py311-gpu" -> "2.52.0")."""
    return image.split(":", 1)[-1].split("-", 1)[0]


def _task(name: str, replicas: int, template: dict, complete_job: bool = False) -> dict:
    t: dict[str, Any] = {"name": name, "replicas": replicas, "minAvailable": replicas,
                         "template": template}
    if complete_job:
        t["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    return t


def volcanojob(ctx: RenderCtx, meta: dict) -> dict:
    """batch.volcano.sh Job. minAvailable = every pod (the whole gang).

    ddp/fsdp: pytorch plugin (+svc, env); tasks master (1) and worker (nodes-1); each pod
    runs procs_per_node ranks (the bootstrap turns the plugin's pod RANK/WORLD_SIZE into
    process ranks). mpi: mpi + ssh + svc plugins; a master task runs mpirun (no GPU),
    ``nodes`` worker pods run sshd.
    """
    spec = ctx.spec
    gpus = spec.gpus_per_proc * spec.procs_per_node
    tasks: list[dict] = []
    if spec.framework == "mpi":
        plugins = {"mpi": ["--master=master", "--worker=worker", f"--port={MPI_SSH_PORT}"], "ssh": [], "svc": []}
        mc, mvols = container(ctx, "master", bootstrap_command("mpi-launcher"), procs=1, gpus=0,
                              cpus=1, shm=False, mode="root")
        wc, wvols = container(ctx, "worker", sshd_command(), procs=spec.procs_per_node, gpus=gpus,
                              mode="sshd")
        tasks.append(_task("master", 1, pod_template(ctx, "master", mc, mvols, mode="root",
                                                     topology=False), complete_job=True))
        tasks.append(_task("worker", spec.nodes, pod_template(ctx, "worker", wc, wvols, mode="sshd")))
    else:
        plugins = {"pytorch": ["--master=master", "--worker=worker", f"--port={PYTORCH_PORT}"],
                   "svc": [], "env": []}
        for role, count in (("master", 1), ("worker", spec.nodes - 1)):
            if count <= 0:
                continue
            c, vols = container(ctx, role, bootstrap_command(), procs=spec.procs_per_node, gpus=gpus)
            tasks.append(_task(role, count, pod_template(ctx, role, c, vols),
                               complete_job=(role == "master")))
    body: dict[str, Any] = {
        "schedulerName": "volcano",
        "minAvailable": sum(t["replicas"] for t in tasks),
        "queue": spec.volcano_queue or "default",
        "maxRetry": 1,
        "plugins": plugins,
        "policies": [{"event": "PodEvicted", "action": "RestartJob"},
                     {"event": "PodFailed", "action": "TerminateJob"}],
        "tasks": tasks,
    }
    if spec.priority and not ctx.kueue:
        body["priorityClassName"] = spec.priority
    # max_runtime_s: Volcano has no runtime limit on the Job; Kueue's max-exec-time label
    # covers the AppWrapper case.
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta, "spec": body}


def appwrapper(ctx: RenderCtx, meta: dict) -> dict:
    """AppWrapper holding the Volcano Job, with declared podSets so Kueue can queue it.

    The wrapped Job keeps only name and gpujobs labels (the AppWrapper carries the Kueue
    labels; the AppWrapper controller creates the Job after admission, in its namespace).
    """
    inner_meta = {"name": ctx.name, "labels": {k: v for k, v in meta.get("labels", {}).items()
                                                if not k.startswith("kueue.x-k8s.io/")}}
    inner = volcanojob(ctx, inner_meta)
    inner["spec"].pop("priorityClassName", None)
    pod_sets = [{"path": f"template.spec.tasks[{i}].template", "replicas": t["replicas"]}
                for i, t in enumerate(inner["spec"]["tasks"])]
    meta = dict(meta, annotations={**(meta.get("annotations") or {}), **APPWRAPPER_ANNOTATIONS})
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": meta, "spec": {"components": [{"template": copy.deepcopy(inner),
                                                       "podSets": pod_sets}]}}


AW_FAILURE_HOLD = "5m"
APPWRAPPER_ANNOTATIONS = {
    # appwrapper@v1.1.2 api/v1beta2/appwrapper_types.go RetryLimitAnnotation; the controller resets
    # (deletes and re-creates the components, re-running the user's code) up to its
    # FaultTolerance.RetryLimit, 3, times on any failure (appwrapper_controller.go resetOrFail):
    # gpujobs jobs are not idempotent, so no retries
    "workload.codeflare.dev.appwrapper/retryLimit": "0",
    # DeletionOnFailureGracePeriodAnnotation: a Failed AppWrapper deletes its components (pods,
    # their logs, the tracebacks and result lines) at once unless held; hold them (and the quota)
    # this long so a client can read the outcome (Kueue may still end it earlier by suspending it)
    "workload.codeflare.dev.appwrapper/deletionOnFailureGracePeriodDuration": AW_FAILURE_HOLD,
}
