"""The simulated Kubeflow Trainer (trainer.kubeflow.org/v1alpha1 TrainJob): a TrainJob's node pod
template, from its training runtime merged with ``spec.runtimePatches`` and ``spec.trainer`` as
Kubeflow Trainer builds it (trainer@8c0f505 pkg/apis/trainer/v1alpha1/trainjob_types.go; the PET_*
variables of the torch plugin from shared/crds/examples/trainer/trainjob-multi-node.yaml), and the
runtime a TrainJob's ``spec.runtimeRef`` names. The TrainJob's pods (JobSet's names and labels) are
listed in pod_templates.py, its status in job_status.py.
"""
from __future__ import annotations

import copy
from typing import Any


def _merge_named(base: list[dict], patch: list[dict]) -> list[dict]:
    """Lists of containers / volumes / env merged by ``name`` (their list-map key in the pod
    schema, x-kubernetes-list-map-keys / patchMergeKey: name); a patch entry's fields win."""
    out = [copy.deepcopy(x) for x in base]
    for p in patch:
        cur = next((x for x in out if x.get("name") == p.get("name")), None)
        if cur is None:
            out.append(copy.deepcopy(p))
        else:
            for k, v in p.items():
                cur[k] = _merge_named(cur.get(k) or [], v) if k in _NAMED_LISTS and isinstance(v, list) else \
                    copy.deepcopy(v)
    return out


_NAMED_LISTS = ("containers", "initContainers", "volumes", "env", "volumeMounts")


def _merge_pod_spec(base: dict, patch: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if k in _NAMED_LISTS and isinstance(v, list):
            out[k] = _merge_named(out.get(k) or [], v)
        elif k == "metadata" or (isinstance(v, dict) and isinstance(out.get(k), dict)):
            out[k] = {**(out.get(k) or {}), **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    return out


def trainjob_node_template(job: dict, runtime: dict | None) -> dict:
    """The pod template of a TrainJob node as Kubeflow Trainer builds it (trainer@8c0f505
    pkg/apis/trainer/v1alpha1/trainjob_types.go): the runtime's replicated job ``node`` pod template,
    then each of ``spec.runtimePatches[].trainingRuntimeSpec`` (merged by name, as the list-map keys
    of the pod schema say), then ``trainer`` overriding the ``node`` container's image, command,
    args, env and resources (resourcesPerNode); the torch plugin adds the PET_* variables
    (PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT; PET_NODE_RANK per node)
    (shared/crds/examples/trainer/trainjob-multi-node.yaml header)."""
    spec = job.get("spec") or {}
    t = spec.get("trainer") or {}

    def node_template(rt_spec: dict) -> dict:
        for rj in ((rt_spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            if rj.get("name") == "node":
                return ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
        return {}

    base = node_template((runtime or {}).get("spec") or {})
    tmpl = {"metadata": copy.deepcopy(base.get("metadata") or {}), "spec": copy.deepcopy(base.get("spec") or {})}
    if not any(c.get("name") == "node" for c in tmpl["spec"].get("containers") or []):
        tmpl["spec"]["containers"] = [*(tmpl["spec"].get("containers") or []), {"name": "node"}]
    for patch in spec.get("runtimePatches") or []:
        p = node_template(patch.get("trainingRuntimeSpec") or {})
        for k in ("labels", "annotations"):
            if (p.get("metadata") or {}).get(k):
                tmpl["metadata"].setdefault(k, {}).update(p["metadata"][k])
        tmpl["spec"] = _merge_pod_spec(tmpl["spec"], p.get("spec") or {})
    c = next(c for c in tmpl["spec"]["containers"] if c.get("name") == "node")
    for k, field in (("image", "image"), ("command", "command"), ("args", "args"), ("resourcesPerNode", "resources")):
        if t.get(k) is not None:
            c[field] = copy.deepcopy(t[k])
    nnodes = t.get("numNodes") or (((runtime or {}).get("spec") or {}).get("mlPolicy") or {}).get("numNodes") or 1
    pet = [{"name": "PET_NNODES", "value": str(nnodes)},
           {"name": "PET_NPROC_PER_NODE", "value": str(t.get("numProcPerNode", "auto"))},
           {"name": "PET_MASTER_ADDR", "value": f"{job['metadata']['name']}-node-0-0.{job['metadata']['name']}"},
           {"name": "PET_MASTER_PORT", "value": "29400"}]
    c["env"] = _merge_named(c.get("env") or [], [*(t.get("env") or []), *pet])
    if not tmpl["spec"].get("restartPolicy"):
        # JobSet's defaulting webhook: an empty pod restartPolicy becomes OnFailure
        # (jobset@v0.12.0 pkg/webhooks/jobset_webhook.go Default); Trainer's runtime patch
        # cannot set it (trainer@v2.3.0 trainjob_types.go PodSpecPatch has no restartPolicy)
        tmpl["spec"]["restartPolicy"] = "OnFailure"
    return tmpl


def trainjob_backoff_limit(runtime: dict | None) -> int:
    """The backoffLimit of the runtime's ``node`` Job: its template's, else batch/v1's default 6
    (k8s.io/api batch/v1 types.go JobSpec.BackoffLimit: "Defaults to 6")."""
    for rj in (((((runtime or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
               .get("replicatedJobs") or []):
        if rj.get("name") == "node":
            limit = ((rj.get("template") or {}).get("spec") or {}).get("backoffLimit")
            if limit is not None:
                return int(limit)
    return 6


def job_failed(pods: list[dict], backoff_limit: int) -> bool:
    """Whether the batch/v1 Job controller fails the node Job (kubernetes
    pkg/controller/job/job_controller.go): more Failed pods than backoffLimit, or, with
    restartPolicy OnFailure, the container restarts of its Running/Pending pods reaching
    backoffLimit (pastBackoffLimitOnFailure: ``> 0`` when the limit is 0)."""
    failed = sum(p["status"].get("phase") == "Failed" for p in pods)
    if failed > backoff_limit:
        return True
    restarts = sum(int(cs.get("restartCount") or 0) for p in pods
                   if p["status"].get("phase") in ("Running", "Pending") and p["spec"].get("restartPolicy") == "OnFailure"
                   for cs in p["status"].get("containerStatuses") or [])
    return restarts > 0 if backoff_limit == 0 else restarts >= backoff_limit


def _runtime_of(ctrl: Any, job: dict) -> dict | None:
    ref = (job.get("spec") or {}).get("runtimeRef") or {}
    if not ref.get("name"):
        return None
    return ctrl.store.get("trainer.kubeflow.org/v1alpha1", ref.get("kind", "ClusterTrainingRuntime"), ref["name"],
                          None if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime"
                          else job["metadata"]["namespace"])
