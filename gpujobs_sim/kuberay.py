"""The simulated KubeRay operator's RayJob steps, after kuberay@v1.7.0
ray-operator/controllers/ray/rayjob_controller.go: validation at the start of every reconcile
(validateRayJob; checks from controllers/ray/utils/validation.go) and the K8sJobMode submitter
Job (controllers/ray/common/job.go BuildJobSubmitCommand / GetSubmitterTemplate). The RayCluster's
pods are listed in pod_templates.py, the RayJob's status in job_status.py.
"""
from __future__ import annotations

import copy
from typing import Any

from .kubelet import ANN_FOLLOWS, ANN_RAY_HEAD, ANN_ROLE, ANN_WORLD, RAY_SUBMITTER
from .pod_templates import OWNER


# kuberay@v1.7.0 ray-operator/controllers/ray/utils/constant.go: MaxRayClusterNameLength = 53,
# MaxRayJobNameLength = MaxRayClusterNameLength - 6
RAY_MAX_JOB_NAME = 47


def _ray_invalid(ctrl: Any, job: dict) -> bool:
    """KubeRay validates the RayJob at the start of every reconcile, suspended or not, and on an
    error only writes the status (rayjob_controller.go Reconcile)."""
    md, st = job["metadata"], job.get("status") or {}
    if st.get("jobDeploymentStatus") == "ValidationFailed":
        return True
    err = kuberay_validation_error(job)
    if err:
        ctrl.store.mutate(job["apiVersion"], "RayJob", md["name"], md["namespace"], lambda o: o.setdefault(
            "status", {}).update(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=err))
    return bool(err)


def kuberay_validation_error(job: dict) -> str:
    """The first of KubeRay's own RayJob checks that ``job`` fails ('' if none): KubeRay validates in
    its controller, not a webhook, and writes jobDeploymentStatus ValidationFailed, reason
    ValidationFailed, message = the error (kuberay@v1.7.0 ray-operator/controllers/ray/
    rayjob_controller.go Reconcile -> validateRayJob; checks from controllers/ray/utils/validation.go
    ValidateRayJobMetadata / ValidateRayJobSpec / ValidateRayClusterSpec; a subset)."""
    name, spec = job["metadata"]["name"], job.get("spec") or {}
    if len(name) > RAY_MAX_JOB_NAME:
        return f"The RayJob metadata is invalid: RayJob name should be no more than {RAY_MAX_JOB_NAME} characters"
    if not spec.get("shutdownAfterJobFinishes") and spec.get("suspend"):
        return ("The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not "
                "allowed to be suspended")
    if spec.get("activeDeadlineSeconds") is not None and int(spec["activeDeadlineSeconds"]) <= 0:
        return "The RayJob spec is invalid: activeDeadlineSeconds must be a positive integer"
    if spec.get("backoffLimit") is not None and int(spec["backoffLimit"]) < 0:
        return "The RayJob spec is invalid: backoffLimit must be a positive integer"
    if spec.get("ttlSecondsAfterFinished") is not None and int(spec["ttlSecondsAfterFinished"]) < 0:
        return "The RayJob spec is invalid: TTLSecondsAfterFinished must be a non-negative integer"
    rc = spec.get("rayClusterSpec") or {}
    head = (((rc.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    if not head:
        return "The RayJob spec is invalid: headGroupSpec should have at least one container"
    if any(e.get("name") == "RAY_REDIS_ADDRESS" for e in head[0].get("env") or []) and \
            not rc.get("gcsFaultToleranceOptions"):
        return ("The RayJob spec is invalid: RAY_REDIS_ADDRESS is set which implicitly enables GCS fault "
                "tolerance, but GcsFaultToleranceOptions is not set. Please set GcsFaultToleranceOptions "
                "to enable GCS fault tolerance")
    for g in rc.get("workerGroupSpecs") or []:
        if g.get("minReplicas") is None or g.get("maxReplicas") is None:
            if not rc.get("enableInTreeAutoscaling"):
                return (f"The RayJob spec is invalid: worker group {g.get('groupName')} must set both "
                        "minReplicas and maxReplicas when autoscaling is disabled")
    return ""


def _ray_submitter(ctrl: Any, job: dict, cluster_pods: list[dict]) -> list[dict]:
    """KubeRay's K8sJobMode: once the RayCluster is up, a batch/v1 Job named after the RayJob runs
    ``ray job submit --no-wait -- <entrypoint>; ray job logs --follow`` (kuberay@v1.7.0
    controllers/ray/common/job.go BuildJobSubmitCommand). Its pod template is
    ``spec.submitterPodTemplate`` or KubeRay's default (common/job.go GetSubmitterTemplate: one
    ``ray-job-submitter`` container, the head's image), to whose labels KubeRay adds only
    ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd`` and
    ``app.kubernetes.io/created-by`` (rayjob_controller.go getSubmitterTemplate); the Job controller
    names its pod ``<job>-<5 random chars>`` and adds ``batch.kubernetes.io/job-name``. The pod's log
    is the driver's output (`ray job logs --follow`). Returns the submitter pods."""
    store, md, spec = ctrl.store, job["metadata"], job.get("spec") or {}
    if (spec.get("submissionMode") or "K8sJobMode") != "K8sJobMode":
        return []
    mine = store.list("v1", "Pod", md["namespace"], f"{OWNER}={md['uid']}-submitter")
    if mine:
        failed = [p for p in mine if p["status"].get("phase") == "Failed"]
        if len(failed) == len(mine) and len(failed) <= submitter_backoff_limit(job):
            # the Job controller replaces a failed submitter pod while its backoffLimit allows; the
            # new pod finds the Ray job submitted (`ray job status`) and only follows its logs from
            # the start again (kuberay@v1.7.0 common/job.go BuildJobSubmitCommand)
            first = min(mine, key=lambda p: int(p["metadata"]["resourceVersion"]))
            _submitter_pod(ctrl, job, {**(first["metadata"].get("annotations") or {}),
                                       ANN_FOLLOWS: first["metadata"]["name"]})
            mine = store.list("v1", "Pod", md["namespace"], f"{OWNER}={md['uid']}-submitter")
        return mine
    if not cluster_pods or not all(p["status"].get("phase") == "Running" for p in cluster_pods):
        return []
    head = next((p for p in cluster_pods if p["metadata"]["name"].endswith("-head")), cluster_pods[0])
    tmpl = copy.deepcopy(spec.get("submitterPodTemplate") or {"spec": {
        "containers": [{"name": "ray-job-submitter", "image": head["spec"]["containers"][0].get("image", ""),
                        "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                      "requests": {"cpu": "500m", "memory": "200Mi"}}}],
        "restartPolicy": "Never"}})
    kr = {"ray.io/originated-from-cr-name": md["name"], "ray.io/originated-from-crd": "RayJob",
          "app.kubernetes.io/created-by": "kuberay-operator"}
    bjob = store.get("batch/v1", "Job", md["name"], md["namespace"])
    if bjob is None:
        bjob = store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": md["name"], "namespace": md["namespace"], "labels": dict(kr),
            "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": "RayJob", "name": md["name"],
                                 "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"backoffLimit": submitter_backoff_limit(job),
                     "template": tmpl}})
    tmd = tmpl.get("metadata") or {}
    ann = {**(tmd.get("annotations") or {}), ANN_ROLE: RAY_SUBMITTER, ANN_RAY_HEAD: head["metadata"]["name"],
           ANN_WORLD: "1"}
    _submitter_pod(ctrl, job, ann)
    return store.list("v1", "Pod", md["namespace"], f"{OWNER}={md['uid']}-submitter")


def submitter_backoff_limit(job: dict) -> int:
    """The submitter Job's backoffLimit: spec.submitterConfig.backoffLimit, else KubeRay's 2
    (kuberay@v1.7.0 rayjob_controller.go createNewK8sJob: submitterBackoffLimit)."""
    limit = ((job.get("spec") or {}).get("submitterConfig") or {}).get("backoffLimit")
    return 2 if limit is None else int(limit)


def _submitter_pod(ctrl: Any, job: dict, ann: dict) -> None:
    """A pod of the submitter Job ``<job>-<5 chars>`` from the Job's template."""
    import secrets as _secrets
    store, md = ctrl.store, job["metadata"]
    bjob = store.get("batch/v1", "Job", md["name"], md["namespace"])
    if bjob is None:
        return
    tmpl = bjob["spec"]["template"]
    tmd = tmpl.get("metadata") or {}
    kr = {"ray.io/originated-from-cr-name": md["name"], "ray.io/originated-from-crd": "RayJob",
          "app.kubernetes.io/created-by": "kuberay-operator"}
    labels = {**(tmd.get("labels") or {}), **kr, "batch.kubernetes.io/job-name": md["name"],
              "job-name": md["name"], OWNER: f"{md['uid']}-submitter"}
    pod_spec = copy.deepcopy(tmpl.get("spec") or {})
    store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{md['name']}-{_secrets.token_hex(3)[:5]}", "namespace": md["namespace"], "labels": labels,
        "annotations": ann, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["name"],
                                                 "uid": bjob["metadata"]["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
        "spec": pod_spec})
