"""The pods each simulated operator creates from a job's pod templates: name, template and the
simulated kubelet's role for each (MPIJob's launcher and workers, the Training Operator's
PyTorchJob replicas, a TrainJob's JobSet nodes, KubeRay's RayCluster head and workers, a Volcano
Job's tasks), and the label that ties a pod to the job that owns it.
"""
from __future__ import annotations

import copy
from typing import Any

from .trainer import trainjob_node_template

OWNER = "sim.gpujobs.dev/owner-uid"


def _template_pods(job: dict, lookup: Any = None) -> list[tuple[str, dict, str]]:
    """(pod name, pod template, role) for every pod the operator would create; ``lookup(job)``
    reads a TrainJob's runtime."""
    name, spec, kind = job["metadata"]["name"], job.get("spec") or {}, job["kind"]
    out: list[tuple[str, dict, str]] = []
    if kind == "MPIJob":
        for rtype, r in (spec.get("mpiReplicaSpecs") or {}).items():
            for i in range(int(r.get("replicas", 1))):
                role = "mpi-launcher" if rtype == "Launcher" else "idle"
                out.append((f"{name}-{rtype.lower()}" + ("" if rtype == "Launcher" else f"-{i}"),
                            r.get("template") or {}, role))
        out.sort(key=lambda t: t[2] != "mpi-launcher")
    elif kind == "PyTorchJob":
        reps = spec.get("pytorchReplicaSpecs") or {}
        for rtype in sorted(reps, key=lambda k: k != "Master"):
            for i in range(int(reps[rtype].get("replicas", 1))):
                out.append((f"{name}-{rtype.lower()}-{i}", reps[rtype].get("template") or {}, "rank"))
    elif kind == "TrainJob":
        t = spec.get("trainer") or {}
        runtime = lookup(job) if lookup is not None else None
        nodes = int(t.get("numNodes") or ((((runtime or {}).get("spec") or {}).get("mlPolicy") or {})
                                          .get("numNodes")) or 1)
        tmpl = trainjob_node_template(job, runtime)
        for i in range(nodes):
            pod = copy.deepcopy(tmpl)
            c = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
            c["env"] = [e for e in c.get("env") or [] if e["name"] != "PET_NODE_RANK"] + [
                {"name": "PET_NODE_RANK", "value": str(i)}]
            # JobSet -> Indexed Job <trainjob>-node-0 -> pods <job>-<index>-<random 5>, labelled with
            # batch.kubernetes.io/job-completion-index (kubernetes.io docs, Job completion mode) and
            # jobset.sigs.k8s.io/replicatedjob-name / job-index (jobset api/jobset/v1alpha2 labels)
            import secrets as _secrets
            pod.setdefault("metadata", {}).setdefault("labels", {}).update({
                "batch.kubernetes.io/job-completion-index": str(i), "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/jobset-name": name})
            out.append((f"{name}-node-0-{i}-{_secrets.token_hex(3)[:5]}", pod, "rank"))
    elif kind == "RayJob":
        # the RayCluster's pods: the head runs `ray start --head --block` and the workers `ray start
        # --block` (KubeRay builds their commands); the entrypoint is not run here but in the
        # submitter Job (kuberay@v1.7.0 ray-operator/controllers/ray/rayjob_controller.go
        # createK8sJobIfNeed), see _ray_submitter
        rc = spec.get("rayClusterSpec") or {}
        out.append((f"{name}-head", (rc.get("headGroupSpec") or {}).get("template") or {}, "idle"))
        for g in rc.get("workerGroupSpecs") or []:
            for i in range(int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1))):
                out.append((f"{name}-{g.get('groupName', 'worker')}-{i}", g.get("template") or {}, "idle"))
    elif kind == "Job":  # Volcano Job
        plugins = spec.get("plugins") or {}
        for ti, t in enumerate(spec.get("tasks") or []):
            for i in range(int(t.get("replicas", 1))):
                role = "rank"
                if "mpi" in plugins:
                    role = "mpi-launcher" if ti == 0 else "idle"
                out.append((f"{name}-{t['name']}-{i}", t.get("template") or {}, role))
    return out
