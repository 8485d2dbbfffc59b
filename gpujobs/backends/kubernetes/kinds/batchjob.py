"""BatchJob: a plain Kubernetes ``batch/v1`` Job running torch ranks (ddp, fsdp) on one or more
nodes, with no operator. Chosen only by ``kind="BatchJob"`` (never a default).

The object (facts from kubernetes v1.37.2 ``pkg/controller/job/`` and ``k8s.io/api@v0.37.2
batch/v1/types.go``; docs/kubernetes-kinds.md, "batch/v1 Job"):

- an Indexed Job, ``completions = parallelism = nodes``: the Job controller gives each pod its
  index in the ``batch.kubernetes.io/job-completion-index`` annotation and label and the
  ``JOB_COMPLETION_INDEX`` env var (indexed_job_utils.go), which is the node rank here, and the
  hostname ``<job>-<index>`` (job_controller.go); with ``subdomain`` naming a headless Service
  (a companion object, created after the job and owned by it), rank 0 is ``<job>-0.<job>``;
- a gang: ``backoffLimit: 0`` and a ``podFailurePolicy`` FailJob rule on any non-zero exit of the
  ``node`` container, so the first failed pod fails the Job (FailureTarget, then Failed once the
  other pods are gone) instead of a replacement that could not rejoin the rendezvous. Pods the
  controller itself deletes on suspend (Kueue's preemption) lose their tracking finalizer first
  and are not counted as failures (deleteJobPods, getValidPodsWithFilter), but the policy still
  judges them until they are gone (getFailJobMessage reads every pod): a rank stopped by the
  SIGTERM exits ``STOPPED_EXIT`` (143), which an Ignore rule before the FailJob one leaves alone
  (exiting 1 there failed a preempted Job on the real control plane), and so does a rank still
  running shortly before the SIGKILL that ends its grace period (whose 137 would fail it too);
- for Kueue: ``suspend: true`` and the queue label; Kueue's ``batch/job`` integration makes one
  pod set ``main`` of ``parallelism`` pods (kueue@ff69552 pkg/controller/jobs/job/job_controller.go);
- ``activeDeadlineSeconds``: the Job controller fails it with DeadlineExceeded, counted from
  ``status.startTime``, which a resume resets.
"""
from __future__ import annotations

from typing import Any

from ....errors import SpecError
from ....rank.contract import STOPPED_EXIT
from ....spec import JobSpec
from ..naming import LABEL_JOB
from ..render.kubeflow import PYTORCH_PORT, gpus_per_pod
from ..render.podspec import RenderCtx, bootstrap_command, container, deadline_s, pod_template
from ..status.objects import conditions, parse_time, true_condition
from .base import KindBase, KindState, PodSet, annotated_gang, pod_set

CONTAINER = "node"
INDEX_ENV = "JOB_COMPLETION_INDEX"  # kubernetes@v1.37.2 pkg/controller/job/indexed_job_utils.go


def master_host(name: str) -> str:
    """Rank 0's DNS name: the Indexed Job's pod hostname ``<job>-0`` under the Service ``<job>``."""
    return f"{name}-0.{name}"


class BatchJob(KindBase):
    name = "BatchJob"
    api_kind = "Job"
    group = "batch"
    version = "v1"
    plural = "jobs"
    frameworks = ("ddp", "fsdp")
    kueue_integration = "batch/job"
    rank_env = ([INDEX_ENV], ["MASTER_ADDR"], ["MASTER_PORT"])

    def check(self, spec: JobSpec) -> None:
        if spec.volcano != "none":
            raise SpecError("volcano", f"a plain batch/v1 Job ({self.name}) has no Volcano gang placement "
                            f"(volcano={spec.volcano!r})", "use volcano='none', or another kind for Volcano")

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
        spec, name = ctx.spec, ctx.name
        env = {}
        if spec.nodes > 1:  # one node: the bootstrap's own 127.0.0.1
            env = {"MASTER_ADDR": master_host(name), "MASTER_PORT": str(PYTORCH_PORT)}
        ports = [{"name": "rendezvous", "containerPort": PYTORCH_PORT, "protocol": "TCP"}]
        c, vols = container(ctx, CONTAINER, bootstrap_command(), procs=spec.procs_per_node,
                            gpus=gpus_per_pod(ctx), env=env, ports=ports)
        tmpl = pod_template(ctx, CONTAINER, c, vols)  # restartPolicy Never: podFailurePolicy needs it
        if spec.nodes > 1:
            tmpl["spec"]["subdomain"] = name
        body: dict[str, Any] = {
            "completionMode": "Indexed", "completions": spec.nodes, "parallelism": spec.nodes,
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                                     "values": [STOPPED_EXIT]}},
                {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn",
                                                      "values": [0]}}]},
            "template": tmpl}
        if ctx.kueue:
            body["suspend"] = True
        if spec.max_runtime_s:
            body["activeDeadlineSeconds"] = deadline_s(spec.max_runtime_s)
        return {"apiVersion": self.api_version, "kind": self.api_kind, "metadata": meta, "spec": body}

    def companions(self, ctx: RenderCtx, job: dict) -> list[dict]:
        """The headless Service whose name is the pods' ``subdomain`` (several nodes only);
        ``publishNotReadyAddresses`` so rank 0's name resolves as soon as its pod has an IP."""
        if ctx.spec.nodes <= 1:
            return []
        return [{"apiVersion": "v1", "kind": "Service",
                 "metadata": {"name": ctx.name, "namespace": ctx.namespace, "labels": dict(ctx.labels)},
                 "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                          "selector": {LABEL_JOB: ctx.name},
                          "ports": [{"name": "rendezvous", "port": PYTORCH_PORT, "protocol": "TCP"}]}}]

    def pod_sets(self, job: dict) -> list[PodSet]:
        spec = job["spec"]
        return [pod_set("main", spec.get("parallelism", 1), spec["template"])]

    def gang_size(self, job: dict) -> int:
        return int(((job.get("spec") or {}).get("parallelism")) or 1)

    def state(self, job: dict) -> KindState:
        """From the Job's conditions (k8s.io/api@v0.37.2 batch/v1 JobConditionType): Complete /
        Failed are terminal; SuccessCriteriaMet / FailureTarget come first, while the last pods
        terminate, and are never taken back, so they already decide the phase. Then Suspended (or
        spec.suspend), then the pod counts: ``status.active`` pods exist, ``status.ready`` of them
        are ready."""
        spec, conds = job.get("spec") or {}, conditions(job)
        st = job.get("status") or {}
        if not isinstance(st, dict):
            st = {}
        start = parse_time(st.get("startTime"))
        for t, ph in (("Complete", "succeeded"), ("Failed", "failed"),
                      ("SuccessCriteriaMet", "succeeded"), ("FailureTarget", "failed")):
            c = true_condition(conds, t)
            if c:
                end = parse_time(st.get("completionTime")) if t == "Complete" else None
                return KindState(ph, c.get("reason", t), c.get("message", ""), started_at=start,
                                 finished_at=end or parse_time(c.get("lastTransitionTime")))
        if spec.get("suspend") or true_condition(conds, "Suspended"):
            return KindState("suspended", "Suspended")
        active, ready = int(st.get("active") or 0), int(st.get("ready") or 0)
        if not active:
            return KindState(None)
        gang = annotated_gang(job) or self.gang_size(job)
        if ready >= gang:
            return KindState("running", "Running", ready=ready, started_at=start)
        return KindState("starting", "Starting", f"{ready}/{gang} pods ready", ready=ready, started_at=start)


KIND = BatchJob()
