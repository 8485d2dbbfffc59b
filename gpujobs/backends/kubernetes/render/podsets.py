"""The pod sets of a rendered job object: (name, replicas, pod template, per-pod requests).

Mirrors how Kueue derives Workload PodSets per kind (kueue@ff69552 pkg/controller/jobs/: mpijob,
kubeflow/kubeflowjob, rayjob and trainjob controllers' PodSets; snapshots in docs/kubernetes-kinds.md); used
by the quota preflight and by the render tests' GPU / gang-size rules.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ....quantity import parse_quantity


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    template: dict          # PodTemplateSpec (for TrainJob: synthesised from trainer + patch)
    requests: dict[str, Decimal]  # per pod, parsed (requests, falling back to limits like the apiserver)


def container_requests(containers: list[dict]) -> dict[str, Decimal]:
    """Per-pod requests summed over containers (limits where no request, like the apiserver).

    Each quantity is parsed once, here; the amounts are exact Decimals.
    """
    total: dict[str, Decimal] = {}
    for i, c in enumerate(containers):
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            field = f"containers[{i}] ({c.get('name', '?')}) resources {k}"
            total[k] = total.get(k, Decimal(0)) + parse_quantity(v, field)
    return total


def _ps(name: str, count: int, template: dict) -> PodSet:
    return PodSet(name, int(count), template, container_requests(template.get("spec", {}).get("containers", [])))


def _path_get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        m = re.fullmatch(r"([A-Za-z]+)(?:\[(\d+)\])?", part)
        if not m:
            raise KeyError(path)
        obj = obj[m.group(1)]
        if m.group(2) is not None:
            obj = obj[int(m.group(2))]
    return obj


RAY_SUBMITTER_TEMPLATE = {"spec": {"containers": [{"name": "ray-job-submitter", "resources": {
    "requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}}


def pod_sets(job: dict) -> list[PodSet]:
    kind, spec = job["kind"], job["spec"]
    if kind == "TrainJob":
        t = spec["trainer"]
        tmpl = {"spec": {"containers": [{"name": "node", "resources": t.get("resourcesPerNode", {})}]}}
        return [_ps("node", t.get("numNodes", 1), tmpl)]
    if kind == "PyTorchJob":
        return [_ps(k.lower(), v.get("replicas", 1), v["template"])
                for k, v in spec["pytorchReplicaSpecs"].items()]
    if kind == "MPIJob":
        return [_ps(k.lower(), v.get("replicas", 1), v["template"])
                for k, v in spec["mpiReplicaSpecs"].items()]
    if kind == "RayJob":
        rc = spec["rayClusterSpec"]
        out = [_ps("head", 1, rc["headGroupSpec"]["template"])]
        out += [_ps(g["groupName"], int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1) or 1), g["template"])
                for g in rc.get("workerGroupSpecs", [])]
        if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            # Kueue counts the submitter Job's pod too (rayjob_controller.go#L286-330), with
            # KubeRay's default submitter template: requests cpu 500m, memory 200Mi
            out.append(_ps("submitter", 1, spec.get("submitterPodTemplate") or RAY_SUBMITTER_TEMPLATE))
        return out
    if kind == "Job" and job["apiVersion"].startswith("batch.volcano.sh/"):
        return [_ps(t["name"], t.get("replicas", 1), t["template"]) for t in spec["tasks"]]
    if kind == "AppWrapper":
        # Kueue names them "<appwrapper>-<index>" over all components' podSets (its AppWrapper
        # integration, v0.17.0): the plan's Workload then carries the names the real one will
        sets = [(ps.get("replicas", 1), _path_get(comp, ps["path"]))
                for comp in spec["components"] for ps in comp.get("podSets", [])]
        name = job["metadata"]["name"]
        return [_ps(f"{name}-{i}", n, tmpl) for i, (n, tmpl) in enumerate(sets)]
    raise ValueError(f"not a job kind gpujobs renders: {job.get('apiVersion')}/{kind}")


def total_requests(sets: list[PodSet]) -> dict[str, Decimal]:
    """The whole job's requests: each pod set's (already parsed) requests times its count."""
    out: dict[str, Decimal] = {}
    for ps in sets:
        for k, v in ps.requests.items():
            out[k] = out.get(k, Decimal(0)) + v * ps.count
    return out
