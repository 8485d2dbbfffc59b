"""Why a job that should be moving is not, in words: pods the scheduler cannot place, containers
stuck in a state that never resolves, MPI workers that never get ready, a missing Volcano
PodGroup, a kind Kueue does not manage. Each hint is '' when it does not apply; the status
mapping (:mod:`.mapping`) adds them to the message of a starting or queued job."""
from __future__ import annotations

from typing import Iterable

from ..naming import LABEL_ROLE
from .objects import conditions, parse_time, pod_ready

def unschedulable(pods: Iterable[dict]) -> str:
    """'pod X unschedulable: <scheduler message>' for the first pod the scheduler cannot place."""
    for pod in pods:
        c = conditions(pod).get("PodScheduled") or {}
        if str(c.get("status")) == "False" and c.get("reason") == "Unschedulable":
            return f"pod {pod['metadata']['name']} unschedulable: {c.get('message', '')}".rstrip(": ")
    return ""


STUCK_REASONS = {
    "ErrImagePull": "its image cannot be pulled; check .image(...) and the registry credentials",
    "ImagePullBackOff": "its image cannot be pulled; check .image(...) and the registry credentials",
    "InvalidImageName": "its image name is not valid; check .image(...)",
    "CreateContainerConfigError": "a Secret or ConfigMap it needs is missing (e.g. one named in "
                                  ".secret_env(...))",
    "CreateContainerError": "its container cannot be created",
    "CrashLoopBackOff": "its container keeps crashing; see job.logs()",
}
"""Container waiting reasons that never resolve by themselves: the gang would wait forever."""


def stuck_container(pods: Iterable[dict]) -> str:
    """'pod X: ImagePullBackOff: <what to do> (<kubelet message>)' for the first pod whose
    container is stuck, so a job that can never start says why instead of 'starting 1/2'."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            hint = STUCK_REASONS.get(waiting.get("reason", ""))
            if hint:
                detail = f" ({waiting['message']})" if waiting.get("message") else ""
                return f"pod {pod['metadata']['name']}: {waiting['reason']}: {hint}{detail}"
    return ""


def _role(pod: dict) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE, "")


def _pod_failure(pod: dict) -> str:
    """'exited 3: <the last line of its termination message>' for a failed pod ('' otherwise)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term and int(term.get("exitCode", 0)) != 0:
            lines = [ln for ln in str(term.get("message") or "").splitlines() if ln.strip()]
            return f"exited {term['exitCode']}" + (f": {lines[-1].strip()}" if lines else "")
    return "failed" if (pod.get("status") or {}).get("phase") == "Failed" else ""


def mpi_workers_hint(job: dict, pods: list[dict]) -> str:
    """Why an MPIJob with ``launcherCreationPolicy: WaitForWorkersReady`` has no launcher yet: the
    MPI Operator creates it only once every worker pod is Ready (mpi-operator@v0.8.0
    pkg/controller/mpi_job_controller.go countReadyWorkerPods), i.e. once each worker's sshd accepts
    connections (gpujobs' readiness probe); a failed worker is never recreated (getOrCreateWorker)
    and does not fail the MPIJob (updateMPIJobStatus), so the job would wait until Kueue's
    waitForPodsReady timeout evicts it (30 min by default, then requeued)."""
    if job.get("kind") != "MPIJob" or (job.get("spec") or {}).get("launcherCreationPolicy") != "WaitForWorkersReady":
        return ""
    if any(_role(p) == "launcher" for p in pods):
        return ""
    reps = (job.get("spec") or {}).get("mpiReplicaSpecs") or {}
    n = int((reps.get("Worker") or {}).get("replicas", 0))
    workers = [p for p in pods if _role(p) == "worker"]
    if not n or not workers:
        return ""
    ready = sum(pod_ready(p) for p in workers)
    msg = f"waiting for {n} MPI workers to be ready (sshd): {ready}/{n} ready; the MPI Operator starts the launcher " \
          "when all are"
    failed = [p for p in workers if (p.get("status") or {}).get("phase") == "Failed"]
    if failed:
        p = failed[0]
        msg += (f"; worker {p['metadata']['name']} {_pod_failure(p)}: the MPI Operator does not recreate it, so "
                "this job cannot start. Cancel it and submit with an image that runs sshd (docs/kubernetes-kinds.md, "
                "MPIJob)")
    return msg


MPI_GANG_HINT_S = 30.0


def mpi_gang_hint(job: dict, podgroup: dict | None, pods: list[dict], now: float | None = None) -> str:
    """An MPIJob rendered for Volcano gang scheduling (runPolicy.schedulingPolicy) that has pods
    but no PodGroup after MPI_GANG_HINT_S: the MPI Operator makes the PodGroup only when it runs
    with ``--gang-scheduling=volcano`` (mpi-operator@v0.8.0 cmd/mpi-operator/app/options/options.go;
    its release manifest deploy/v2beta1/mpi-operator.yaml passes no such flag)."""
    if job.get("kind") != "MPIJob" or podgroup or not pods or \
            not ((job.get("spec") or {}).get("runPolicy") or {}).get("schedulingPolicy"):
        return ""
    import time as _time
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    if created is None or (now if now is not None else _time.time()) - created < MPI_GANG_HINT_S:
        return ""
    return ("no Volcano PodGroup for this MPIJob: the MPI Operator may run without --gang-scheduling=volcano "
            "(its release manifest sets none), so its pods are not gang-scheduled; add the flag to the "
            "mpi-operator Deployment's args, or submit without volcano='gang'")


NO_WORKLOAD_HINT_S = 30.0
"""How long a queued job may have no Workload before status says Kueue may not manage its kind
(Kueue makes the Workload within a reconcile, well under a second, when the integration is on)."""
KUEUE_FRAMEWORKS = {"MPIJob": "kubeflow.org/mpijob", "PyTorchJob": "kubeflow.org/pytorchjob",
                    "TrainJob": "trainer.kubeflow.org/trainjob", "RayJob": "ray.io/rayjob",
                    "AppWrapper": "workload.codeflare.dev/appwrapper"}
"""Kueue's integration names (kueue v0.19 apis/config/v1beta2/configuration_types.go
Integrations.Frameworks); kubeflow.org/pytorchjob is not in its default configuration
(config/components/manager/controller_manager_config.yaml)."""


def integration_hint(job: dict, now: float | None = None) -> str:
    """'' while a queued job is young; after NO_WORKLOAD_HINT_S without a Workload, what to check."""
    import time as _time
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    fw = KUEUE_FRAMEWORKS.get(job.get("kind", ""))
    if not fw or created is None:
        return ""
    age = (now if now is not None else _time.time()) - created
    if age < NO_WORKLOAD_HINT_S:
        return ""
    return (f"no Kueue Workload {int(NO_WORKLOAD_HINT_S)} s after submit: Kueue's integration for {fw} may be off (Kueue "
            f"manages only the kinds in its Configuration's integrations.frameworks). Ask the cluster admin "
            f"to add \"{fw}\" to integrations.frameworks in the kueue-manager-config ConfigMap (namespace "
            f"kueue-system) and restart the kueue-controller-manager Deployment; or check that the LocalQueue "
            f"exists and Kueue is running (kubectl -n kueue-system get pods)")
