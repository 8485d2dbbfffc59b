"""RayJob (KubeRay, ray.io/v1): the function runs as the driver on the head (entrypoint), ``nodes``
fixed-size GPU workers; the only kind of the ray framework.

Under Kueue: ``shutdownAfterJobFinishes: true`` and no ``clusterSelector`` (Kueue's webhook
rejects anything else); ``suspend: true`` until admission.
"""
from __future__ import annotations

import math
import shlex
from typing import Any

from ....rank import contract
from ..render.podspec import RenderCtx, bootstrap_command, client_ray_version, container, pod_template, ray_image
from ..render.ray_submitter import (RAY_TTL_AFTER_FINISHED_S, SUBMITTER_CONTAINER, SUBMITTER_RESOURCES,
                                  image_ray_version, submitter_image, submitter_template)
from ..status.objects import conditions, parse_time, true_condition
from .base import KindBase, KindState, PodSet, annotated_gang, pod_set

RAY_SUBMITTER_TEMPLATE = {"spec": {"containers": [{"name": SUBMITTER_CONTAINER, "resources": SUBMITTER_RESOURCES}]}}


class RayJob(KindBase):
    name = "RayJob"
    api_kind = "RayJob"
    group = "ray.io"
    version = "v1"
    plural = "rayjobs"
    frameworks = ("ray",)
    default_for = ("ray",)
    kueue_integration = "ray.io/rayjob"
    mode_fix = "use volcano='none' or 'gang' (KubeRay's Volcano batch scheduler)"

    def gang_pods(self, spec: Any) -> int:
        return spec.nodes + 1  # head + workers

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
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
        return {"apiVersion": self.api_version, "kind": self.api_kind, "metadata": meta, "spec": body}

    def pod_sets(self, job: dict) -> list[PodSet]:
        spec = job["spec"]
        rc = spec["rayClusterSpec"]
        out = [pod_set("head", 1, rc["headGroupSpec"]["template"])]
        out += [pod_set(g["groupName"], int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1) or 1), g["template"])
                for g in rc.get("workerGroupSpecs", [])]
        if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            # Kueue counts the submitter Job's pod too (rayjob_controller.go#L286-330), with
            # KubeRay's default submitter template: requests cpu 500m, memory 200Mi
            out.append(pod_set("submitter", 1, spec.get("submitterPodTemplate") or RAY_SUBMITTER_TEMPLATE))
        return out

    def gang_size(self, job: dict) -> int:
        rc = (job.get("spec") or {}).get("rayClusterSpec") or {}
        return 1 + sum(int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1))
                       for g in rc.get("workerGroupSpecs") or [])

    def state(self, job: dict) -> KindState:
        st, spec = job.get("status") or {}, job.get("spec") or {}
        if not isinstance(st, dict):
            st = {}
        dep, js = st.get("jobDeploymentStatus", ""), st.get("jobStatus", "")
        msg, reason = st.get("message", ""), st.get("reason", "")
        start, end = parse_time(st.get("startTime")), parse_time(st.get("endTime"))
        if dep == "ValidationFailed":
            # KubeRay refused the spec in its controller and stops there (kuberay@v1.7.0
            # ray-operator/apis/ray/v1/rayjob_types.go JobDeploymentStatusValidationFailed,
            # reason ValidationFailed, message = the error; rayjob_controller.go Reconcile)
            return KindState("failed", "ValidationFailed", msg or "KubeRay refused the RayJob",
                             started_at=start, finished_at=end)
        # Terminal only on jobDeploymentStatus: in K8sJobMode KubeRay keeps it Running after the Ray
        # job's jobStatus is terminal until the submitter (`ray job logs --follow`) has finished, so
        # the driver's last lines, the result among them, may not be in its log yet (kuberay@v1.7.0
        # ray-operator/controllers/ray/rayjob_controller.go, isJobTerminal && finishedAt; kuberay #1919)
        if dep in ("Complete", "Failed"):
            if dep == "Complete" and js == "SUCCEEDED":
                return KindState("succeeded", "SUCCEEDED", msg, started_at=start, finished_at=end)
            return KindState("failed", reason or js or dep, msg, started_at=start, finished_at=end)
        if spec.get("suspend") or dep in ("Suspended", "Suspending"):
            return KindState("suspended", dep or "Suspended")
        rcs = st.get("rayClusterStatus") or {}
        rc_conds = conditions({"status": rcs})
        ready = None
        if true_condition(rc_conds, "RayClusterProvisioned") or rcs.get("state") == "ready":
            gang = annotated_gang(job)
            ready = self.gang_size(job) if gang is None else gang
        elif "readyWorkerReplicas" in rcs:
            head = 1 if true_condition(rc_conds, "HeadPodReady") else 0
            ready = head + int(rcs.get("readyWorkerReplicas") or 0)
        if dep == "Running" or js == "RUNNING":
            return KindState("running", js or dep, msg, ready=ready, started_at=start)
        if dep in ("Initializing", "Retrying", "Waiting") or js == "PENDING":
            return KindState("starting", dep or js, msg, ready=ready, started_at=start,
                             restarts=int(st.get("failed") or 0))
        return KindState(None, ready=ready)


KIND = RayJob()
