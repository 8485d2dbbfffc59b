"""AppWrapper (workload.codeflare.dev/v1beta2; ``volcano="appwrapper"``): a Volcano Job inside an
AppWrapper, with declared podSets, so a Kueue queue can hold it. The wrapped Job keeps only name
and gpujobs labels (the AppWrapper carries the Kueue labels; the AppWrapper controller creates the
Job after admission, in its namespace)."""
from __future__ import annotations

import copy
from typing import Any

from ....errors import SpecError
from ....spec import JobSpec
from ..render.podspec import RenderCtx
from ..status.objects import conditions, true_condition
from .base import KindBase, KindState, PodSet, annotated_gang, path_get, pod_set
from .mpijob import KIND as MPI_KIND
from .volcanojob import KIND as VOLCANO_JOB, volcano_job

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


class AppWrapper(KindBase):
    name = "AppWrapper"
    api_kind = "AppWrapper"
    group = "workload.codeflare.dev"
    version = "v1beta2"
    plural = "appwrappers"
    frameworks = ("ddp", "fsdp", "mpi")
    kueue_integration = "workload.codeflare.dev/appwrapper"
    volcano_mode = "appwrapper"
    mode_mismatch = ("volcano='appwrapper' wraps a Volcano Job, not a {kind}", "drop kind= or use volcano='gang'")
    own_deadline = False
    rank_env = VOLCANO_JOB.rank_env
    wraps = VOLCANO_JOB  # the AppWrapper controller creates the inner Volcano Job

    def check(self, spec: JobSpec) -> None:
        if spec.framework == "mpi":
            # Volcano ends an MPI Job's sshd workers when the master completes (TaskCompleted ->
            # CompleteJob), which the AppWrapper controller sees as failed pods: it resets and, after
            # its retries, fails a job that succeeded (appwrapper@v1.1.2 appwrapper_controller.go)
            raise SpecError("volcano", "MPI inside an AppWrapper cannot succeed: Volcano deletes the running sshd "
                            "workers when the launcher completes, and the AppWrapper controller counts that as a "
                            "failure", f"use an {MPI_KIND.name} (drop volcano='appwrapper'; volcano='gang' keeps Volcano's "
                            "gang placement) or volcano='job' without Kueue")

    def gang_pods(self, spec: JobSpec) -> int:
        return VOLCANO_JOB.gang_pods(spec)

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
        inner_meta = {"name": ctx.name, "labels": {k: v for k, v in meta.get("labels", {}).items()
                                                    if not k.startswith("kueue.x-k8s.io/")}}
        inner = volcano_job(ctx, inner_meta, VOLCANO_JOB.api_version, VOLCANO_JOB.api_kind)
        inner["spec"].pop("priorityClassName", None)
        pod_sets = [{"path": f"template.spec.tasks[{i}].template", "replicas": t["replicas"]}
                    for i, t in enumerate(inner["spec"]["tasks"])]
        meta = dict(meta, annotations={**(meta.get("annotations") or {}), **APPWRAPPER_ANNOTATIONS})
        return {"apiVersion": self.api_version, "kind": self.api_kind,
                "metadata": meta, "spec": {"components": [{"template": copy.deepcopy(inner),
                                                           "podSets": pod_sets}]}}

    def pod_sets(self, job: dict) -> list[PodSet]:
        # Kueue names them "<appwrapper>-<index>" over all components' podSets (its AppWrapper
        # integration, v0.17.0): the plan's Workload then carries the names the real one will
        sets = [(ps.get("replicas", 1), path_get(comp, ps["path"]))
                for comp in job["spec"]["components"] for ps in comp.get("podSets", [])]
        name = job["metadata"]["name"]
        return [pod_set(f"{name}-{i}", n, tmpl) for i, (n, tmpl) in enumerate(sets)]

    def gang_size(self, job: dict) -> int:
        return 0

    def state(self, job: dict) -> KindState:
        st, spec, conds = job.get("status") or {}, job.get("spec") or {}, conditions(job)
        if not isinstance(st, dict):
            st = {}
        ph = st.get("phase", "")
        if ph == "Succeeded":
            return KindState("succeeded", ph)
        if ph == "Failed":
            return KindState("failed", ph, true_condition(conds, "Unhealthy") and conds["Unhealthy"].get("message") or "")
        if ph in ("Suspended", "Suspending", "") and spec.get("suspend", True) is not False:
            return KindState("suspended", ph or "Suspended")
        if ph in ("Resuming", "Resetting"):
            return KindState("starting", ph, restarts=int(st.get("retries") or 0))
        if ph == "Running":
            all_ready = true_condition(conds, "PodsReady")
            gang = annotated_gang(job)
            return KindState("running", ph, ready=(self.gang_size(job) if gang is None else gang) if all_ready else None)
        return KindState(None)


KIND = AppWrapper()
