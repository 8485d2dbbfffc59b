"""MPIJob (MPI Operator v2, kubeflow.org/v2beta1): one launcher running mpirun, ``nodes`` workers
running sshd, slots = ranks/node.

``launcherCreationPolicy: WaitForWorkersReady``: the launcher is created once every worker is
Ready, i.e. its sshd accepts connections (readiness probe); until then status says so
(``workers_hint``). volcano='gang' needs the MPI Operator run with ``--gang-scheduling=volcano``
(mpi-operator@v0.8.0 cmd/mpi-operator/app/options/options.go; its release manifest passes none),
else no PodGroup is made (``gang_hint``).
"""
from __future__ import annotations

import sys
from typing import Any

from ....errors import SpecError
from ....spec import JobSpec
from ..render import images
from ..render.kubeflow import SSH_PORT, gpus_per_pod, run_policy
from ..render.podspec import (DEFAULT_TORCH_IMAGE, RenderCtx, bootstrap_command, container, pod_template,
                              sshd_command, sshd_readiness)
from ..status.hints import pod_failure, pod_role
from ..status.objects import parse_time, pod_ready
from .base import KindBase, KindState, PodSet, pod_set, replicas_sum
from .kubeflow_v1 import operator_state


def check_mpi_image(spec: JobSpec) -> None:
    """MPI over ssh needs sshd, ssh, Open MPI's mpirun, mpi4py and python3 in the image: refused
    before submit where the image is known to lack them (images.KNOWN); unknown images are checked
    by the launcher and workers at run time."""
    if not spec.image:
        raise SpecError("image", f"MPI jobs need an image with sshd (openssh-server), an ssh client, Open MPI's "
                        f"mpirun (4 or 5), mpi4py and Python {'%d.%d' % sys.version_info[:2]}; the default image "
                        f"({DEFAULT_TORCH_IMAGE}) has none of the first four", images.mpi_image_fix())
    known = images.mpi_missing(spec.image)
    if known and known[0]:
        raise SpecError("image", f"{spec.image!r} has no {', '.join(known[0])} (from {known[1]}); MPI jobs need "
                        "sshd, an ssh client, Open MPI's mpirun, mpi4py and python3", images.mpi_image_fix())


MPI_GANG_HINT_S = 30.0


class MPIJob(KindBase):
    name = "MPIJob"
    api_kind = "MPIJob"
    group = "kubeflow.org"
    version = "v2beta1"
    plural = "mpijobs"
    frameworks = ("mpi",)
    default_for = ("mpi",)
    kueue_integration = "kubeflow.org/mpijob"

    def check(self, spec: JobSpec) -> None:
        check_mpi_image(spec)
        if spec.nodes < 1:
            raise SpecError("nodes", "an MPIJob needs at least one worker", "pass ranks >= 1")

    def gang_pods(self, spec: JobSpec) -> int:
        return spec.nodes + 1

    def render(self, ctx: RenderCtx, meta: dict, opts: Any) -> dict:
        spec = ctx.spec
        sched = "volcano" if spec.volcano == "gang" else None
        lc, lvols = container(ctx, "launcher", bootstrap_command("mpi-launcher"), procs=1, gpus=0,
                              cpus=1, shm=False, mode="root")
        wc, wvols = container(ctx, "worker", sshd_command(), procs=spec.procs_per_node,
                              gpus=gpus_per_pod(ctx), mode="sshd", ports=[SSH_PORT])
        wc["readinessProbe"] = sshd_readiness()
        return {"apiVersion": self.api_version, "kind": self.api_kind, "metadata": meta,
                "spec": {"slotsPerWorker": spec.procs_per_node,
                         "mpiImplementation": "OpenMPI",
                         "launcherCreationPolicy": "WaitForWorkersReady",
                         "sshAuthMountPath": "/root/.ssh",
                         "runPolicy": run_policy(ctx, spec.nodes + 1),
                         "mpiReplicaSpecs": {
                             "Launcher": {"replicas": 1, "restartPolicy": "Never",
                                          "template": pod_template(ctx, "launcher", lc, lvols,
                                                                   mode="root", scheduler_name=sched,
                                                                   topology=False)},
                             "Worker": {"replicas": spec.nodes, "restartPolicy": "Never",
                                        "template": pod_template(ctx, "worker", wc, wvols, mode="sshd",
                                                                 scheduler_name=sched)}}}}

    def pod_sets(self, job: dict) -> list[PodSet]:
        return [pod_set(k.lower(), v.get("replicas", 1), v["template"])
                for k, v in job["spec"]["mpiReplicaSpecs"].items()]

    def gang_size(self, job: dict) -> int:
        return replicas_sum((job.get("spec") or {}).get("mpiReplicaSpecs"))

    def state(self, job: dict) -> KindState:
        return operator_state(job, self.gang_size(job))

    def workers_hint(self, job: dict, pods: list[dict]) -> str:
        """Why an MPIJob with ``launcherCreationPolicy: WaitForWorkersReady`` has no launcher yet: the
        MPI Operator creates it only once every worker pod is Ready (mpi-operator@v0.8.0
        pkg/controller/mpi_job_controller.go countReadyWorkerPods), i.e. once each worker's sshd accepts
        connections (gpujobs' readiness probe); a failed worker is never recreated (getOrCreateWorker)
        and does not fail the MPIJob (updateMPIJobStatus), so the job would wait until Kueue's
        waitForPodsReady timeout evicts it (30 min by default, then requeued)."""
        if (job.get("spec") or {}).get("launcherCreationPolicy") != "WaitForWorkersReady":
            return ""
        if any(pod_role(p) == "launcher" for p in pods):
            return ""
        reps = (job.get("spec") or {}).get("mpiReplicaSpecs") or {}
        n = int((reps.get("Worker") or {}).get("replicas", 0))
        workers = [p for p in pods if pod_role(p) == "worker"]
        if not n or not workers:
            return ""
        ready = sum(pod_ready(p) for p in workers)
        msg = f"waiting for {n} MPI workers to be ready (sshd): {ready}/{n} ready; the MPI Operator starts the " \
              "launcher when all are"
        failed = [p for p in workers if (p.get("status") or {}).get("phase") == "Failed"]
        if failed:
            p = failed[0]
            msg += (f"; worker {p['metadata']['name']} {pod_failure(p)}: the MPI Operator does not recreate it, "
                    "so this job cannot start. Cancel it and submit with an image that runs sshd "
                    "(docs/kubernetes-kinds.md, MPIJob)")
        return msg

    def gang_hint(self, job: dict, podgroup: dict | None, pods: list[dict], now: float | None) -> str:
        """An MPIJob rendered for Volcano gang scheduling (runPolicy.schedulingPolicy) that has pods
        but no PodGroup after MPI_GANG_HINT_S: the MPI Operator makes the PodGroup only when it runs
        with ``--gang-scheduling=volcano`` (mpi-operator@v0.8.0 cmd/mpi-operator/app/options/options.go;
        its release manifest deploy/v2beta1/mpi-operator.yaml passes no such flag)."""
        if podgroup or not pods or not ((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy"):
            return ""
        import time as _time
        created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
        if created is None or (now if now is not None else _time.time()) - created < MPI_GANG_HINT_S:
            return ""
        return ("no Volcano PodGroup for this MPIJob: the MPI Operator may run without --gang-scheduling=volcano "
                "(its release manifest sets none), so its pods are not gang-scheduled; add the flag to the "
                "mpi-operator Deployment's args, or submit without volcano='gang'")


KIND = MPIJob()
