"""Why a job that should be moving is not, in words: pods the scheduler cannot place, containers
stuck in a state that never resolves, a kind Kueue does not manage (a kind's own hints, such as
MPI workers that never get ready, are in its module: kinds/). Each hint is '' when it does not apply; the status
mapping (:mod:`.mapping`) adds them to the message of a starting or queued job."""
from __future__ import annotations

from typing import Iterable

from ..naming import LABEL_ROLE
from .objects import conditions, parse_time


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


def pod_role(pod: dict) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE, "")


def pod_failure(pod: dict) -> str:
    """'exited 3: <the last line of its termination message>' for a failed pod ('' otherwise)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term and int(term.get("exitCode", 0)) != 0:
            lines = [ln for ln in str(term.get("message") or "").splitlines() if ln.strip()]
            return f"exited {term['exitCode']}" + (f": {lines[-1].strip()}" if lines else "")
    return "failed" if (pod.get("status") or {}).get("phase") == "Failed" else ""


NO_WORKLOAD_HINT_S = 30.0
"""How long a queued job may have no Workload before status says Kueue may not manage its kind
(Kueue makes the Workload within a reconcile, well under a second, when the integration is on)."""


def integration_hint(job: dict, now: float | None = None, fw: str | None = None) -> str:
    """'' while a queued job is young; after NO_WORKLOAD_HINT_S without a Workload, what to check
    (``fw``: Kueue's integration name of the job's kind, kueue v0.19 apis/config/v1beta2/
    configuration_types.go Integrations.Frameworks; '' when Kueue does not manage it)."""
    import time as _time
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
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
