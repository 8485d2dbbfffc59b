"""TrainJob (Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1): the default kind of ddp and fsdp.

Kueue lists the Kubeflow Trainer v1 integration (the Training Operator's kind) as deprecated,
tentatively removed in v0.20, and leaves it out of its default configuration, whereas
``trainer.kubeflow.org/trainjob`` is enabled by default
(kueue@ff69552 site/content/en/docs/tasks/run/kubeflow/pytorchjobs.md#L14-17 and
kueue@ff69552 config/components/manager/controller_manager_config.yaml#L53-57; snapshots in
docs/kubernetes-kinds.md). The pods come from a ClusterTrainingRuntime (``render.kubeflow``
makes gpujobs' own); the pod details go in as a runtime patch.
"""
from __future__ import annotations

from typing import Any

from ....status import Progress
from ..render.kubeflow import gpus_per_pod
from ..render.podspec import RenderCtx, bootstrap_command, container, deadline_s, pod_template
from ..status.objects import conditions, parse_time, true_condition
from .base import KindBase, KindState, PodSet, pod_set


def trainer_progress(job: dict) -> Progress | None:
    """``status.trainerStatus`` (trainer@8c0f505 manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml):
    ``progressPercentage`` (0..100), ``estimatedRemainingSeconds``, ``metrics`` ([{name, value}],
    values as strings) and ``lastUpdatedTime`` (required when trainerStatus is present), read as a
    Progress of ``step = progressPercentage`` out of ``total = 100``."""
    ts = ((job or {}).get("status") or {}).get("trainerStatus")
    if not isinstance(ts, dict):
        return None
    updated = parse_time(ts.get("lastUpdatedTime"))
    pct = ts.get("progressPercentage")
    remaining = ts.get("estimatedRemainingSeconds")
    metrics: dict[str, Any] = {}
    for m in ts.get("metrics") or ():
        if isinstance(m, dict) and m.get("name"):
            value = m.get("value")
            if value is not None:
                try:
                    value = float(value)
                except (TypeError, ValueError):
                    pass  # kept as written (a text value)
            metrics[str(m["name"])] = value
    if pct is None and remaining is None and not metrics:
        return None
    expected = updated + float(remaining) if updated is not None and remaining is not None else None
    return Progress(step=float(pct) if pct is not None else 0.0,
                    total=100.0 if pct is not None else None, rate=None, expected_end=expected,
                    metrics=metrics, updated=updated or 0.0, rank=0)


class TrainJob(KindBase):
    name = "TrainJob"
    api_kind = "TrainJob"
    group = "trainer.kubeflow.org"
    version = "v1alpha1"
    plural = "trainjobs"
    frameworks = ("ddp", "fsdp")
    default_for = ("ddp", "fsdp")
    kueue_integration = "trainer.kubeflow.org/trainjob"
    rank_env = (["PET_NODE_RANK", "JOB_COMPLETION_INDEX"], ["PET_MASTER_ADDR", "MASTER_ADDR"],
                ["PET_MASTER_PORT", "MASTER_PORT"])
    phases = frozenset({"succeeded", "failed", "suspended", "starting", None})
    name_rule = "TrainJob's CRD rule"  # metadata.name matches RFC 1035 (x-kubernetes-validations)

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
        """On a torch ClusterTrainingRuntime (``opts.trainjob_runtime``, or the Volcano one for
        volcano='gang'); pod details go in as a runtime patch."""
        spec = ctx.spec
        c, vols = container(ctx, "node", bootstrap_command(), procs=spec.procs_per_node,
                            gpus=gpus_per_pod(ctx))
        tmpl = pod_template(ctx, "node", c, vols, restart_policy=None)
        pod_patch: dict[str, Any] = {k: v for k, v in tmpl["spec"].items()
                                     if k in ("volumes", "nodeSelector", "tolerations", "securityContext",
                                              "terminationGracePeriodSeconds")}
        pod_patch["containers"] = [{"name": "node", "volumeMounts": c["volumeMounts"],
                                    "securityContext": c["securityContext"]}]
        runtime = opts.trainjob_volcano_runtime if spec.volcano == "gang" else opts.trainjob_runtime
        body: dict[str, Any] = {
            "runtimeRef": {"apiGroup": self.group, "kind": "ClusterTrainingRuntime", "name": runtime},
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
        return {"apiVersion": self.api_version, "kind": self.api_kind, "metadata": meta, "spec": body}

    def pod_sets(self, job: dict) -> list[PodSet]:
        t = job["spec"]["trainer"]
        tmpl = {"spec": {"containers": [{"name": "node", "resources": t.get("resourcesPerNode", {})}]}}
        return [pod_set("node", t.get("numNodes", 1), tmpl)]

    def gang_size(self, job: dict) -> int:
        return int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)

    def progress(self, job: dict) -> Progress | None:
        return trainer_progress(job)

    def state(self, job: dict) -> KindState:
        spec, conds = job.get("spec") or {}, conditions(job)
        for t, ph in (("Complete", "succeeded"), ("Succeeded", "succeeded"), ("Failed", "failed")):
            c = true_condition(conds, t)
            if c:
                return KindState(ph, c.get("reason", t), c.get("message", ""),
                                 finished_at=parse_time(c.get("lastTransitionTime")))
        if spec.get("suspend") or true_condition(conds, "Suspended"):
            return KindState("suspended", "Suspended")
        return KindState("starting" if true_condition(conds, "Created") else None)


KIND = TrainJob()
