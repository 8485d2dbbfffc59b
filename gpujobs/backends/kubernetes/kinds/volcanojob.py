"""A bare Volcano Job (batch.volcano.sh/v1alpha1 Job; ``volcano="job"``), queued by Volcano alone.

minAvailable = every pod (the whole gang). ddp/fsdp: pytorch plugin (+svc, env); tasks master (1)
and worker (nodes-1); each pod runs procs_per_node ranks (the bootstrap turns the plugin's pod
RANK/WORLD_SIZE into process ranks). mpi: mpi + ssh + svc plugins; a master task runs mpirun (no
GPU), ``nodes`` worker pods run sshd.
"""
from __future__ import annotations

from typing import Any

from ....errors import SpecError
from ....spec import JobSpec
from ..render.bootstrap_script import MPI_SSH_PORT
from ..render.kubeflow import PYTORCH_PORT
from ..render.podspec import RenderCtx, bootstrap_command, container, pod_template, sshd_command
from ..status.objects import parse_time
from .base import KindBase, KindState, PodSet, pod_set
from .mpijob import check_mpi_image


def _task(name: str, replicas: int, template: dict, complete_job: bool = False) -> dict:
    t: dict[str, Any] = {"name": name, "replicas": replicas, "minAvailable": replicas,
                         "template": template}
    if complete_job:
        t["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    return t


def volcano_job(ctx: RenderCtx, meta: dict, api_version: str, api_kind: str) -> dict:
    """The Volcano Job object for ``ctx`` (also the component the ``appwrapper`` kind wraps)."""
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
    # covers the wrapped case.
    return {"apiVersion": api_version, "kind": api_kind, "metadata": meta, "spec": body}


class VolcanoJob(KindBase):
    name = "VolcanoJob"
    group = "batch.volcano.sh"
    version = "v1alpha1"
    plural = "jobs"
    api_kind = "Job"
    frameworks = ("ddp", "fsdp", "mpi")
    volcano_mode = "job"
    mode_mismatch = ("volcano='job' makes a bare Volcano Job, not a {kind}",
                     "drop kind= or use volcano='gang' for Volcano placement of a {kind}")
    own_deadline = False
    # Volcano's pytorch plugin: RANK = pod index (master 0, worker i+1), WORLD_SIZE = pods.
    rank_env = (["RANK"], ["MASTER_ADDR"], ["MASTER_PORT"])
    phases = frozenset({"succeeded", "failed", "running", "starting", None})

    def check(self, spec: JobSpec) -> None:
        if spec.topology_required or spec.topology_preferred:
            raise SpecError("topology", "a bare Volcano Job is not admitted by Kueue, so Kueue's "
                            "topology-aware placement does not apply",
                            "use volcano='appwrapper' (Kueue queues it) or drop .topology(...)")
        if spec.framework == "mpi":
            check_mpi_image(spec)

    def gang_pods(self, spec: JobSpec) -> int:
        return spec.nodes + 1 if spec.framework == "mpi" else spec.nodes

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
        return volcano_job(ctx, meta, self.api_version, self.api_kind)

    def pod_sets(self, job: dict) -> list[PodSet]:
        return [pod_set(t["name"], t.get("replicas", 1), t["template"]) for t in job["spec"]["tasks"]]

    def gang_size(self, job: dict) -> int:
        spec = job.get("spec") or {}
        return int(spec.get("minAvailable") or sum(int(t.get("replicas", 1)) for t in spec.get("tasks") or []))

    def state(self, job: dict) -> KindState:
        st = job.get("status") or {}
        if not isinstance(st, dict):
            st = {}
        state = st.get("state") or {}
        ph = state.get("phase", "")
        msg = state.get("message", "")
        ready = int(st.get("running") or 0) + int(st.get("succeeded") or 0)
        retries = int(st.get("retryCount") or 0)
        changed = parse_time(state.get("lastTransitionTime"))
        if ph == "Completed":
            return KindState("succeeded", ph, msg, finished_at=changed, restarts=retries)
        if ph in ("Failed", "Aborted", "Terminated"):
            return KindState("failed", ph, msg or f"Volcano Job {ph.lower()}", finished_at=changed,
                             restarts=retries)
        if ph in ("Aborting", "Terminating", "Completing"):
            return KindState("running", ph, msg, ready=ready, restarts=retries)
        if ph == "Running":
            return KindState("running", ph, msg, ready=ready, started_at=changed, restarts=retries)
        if ph in ("Pending", "Restarting"):
            return KindState("starting" if ready or ph == "Restarting" else None, ph, msg, ready=ready,
                             restarts=retries)
        return KindState(None)


KIND = VolcanoJob()
