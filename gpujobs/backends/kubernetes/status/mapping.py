"""Real Kubernetes objects -> :class:`~gpujobs.status.JobStatus` (pure functions, no I/O).

Inputs: the job object (any kind of kinds/: its own status is the kind's ``state``),
its Kueue Workload (found by owner reference / ``kueue.x-k8s.io/job-uid``), its Volcano
PodGroup, its pods, and the queue position from Kueue's visibility API. Semantics follow
upstream (snapshots in docs/kubernetes-kinds.md): Workload conditions in kueuectl's order
(kueue@ff69552 apis/kueue/v1beta2/workload_types.go, pkg/workload/workload.go#L97-108), PodGroup
phases (volcano@ed72c7c staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/types.go), each
operator's own conditions.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Iterable

from ....status import TIME_LIMIT, JobEvent, JobStatus, time_limit_message
from ..kinds import KindState, for_object, gang_size_of, kind_state  # noqa: F401 (re-exported)
from .hints import integration_hint, stuck_container, unschedulable
from .objects import (JOB_UID_LABEL, conditions, own_deadline_s, owner_uids, parse_time, pod_ready,  # noqa: F401
                      true_condition)
from ..naming import ANN_GANG, ANN_GPUS, ANN_RETURN_ALL, LABEL_ROLE, PRIORITY_LABEL, QUEUE_LABEL, USER_LABEL  # noqa: F401


PENDING_REASONS = {
    "Pending": "waiting for quota",
    "Inadmissible": "cannot be admitted as configured",
    "Waiting": "waiting for quota",
    "PendingEvaluation": "waiting for Kueue to evaluate it",
    "WaitingForQuota": "waiting for quota",
    "ExceedsMaxQuota": "asks for more than the queue can ever give",
    "NoMatchingFlavor": "no ResourceFlavor matches its requests",
    "TopologyPlacementFailed": "no topology placement fits",
    "WaitingForPreemptedWorkloads": "waiting for preempted workloads to stop",
    "WaitingForPodsReady": "waiting for another workload's pods to become ready",
    "Misconfigured": "its LocalQueue or ClusterQueue is missing or inactive",
    "Suspended": "its queue is stopped",
    "AdmissionGated": "admission is gated",
    "OnHold": "on hold",
}
EVICTION_REASONS = {
    "Preempted": "preempted", "PodsReadyTimeout": "its pods were not all ready within Kueue's PodsReady timeout",
    "AdmissionCheck": "an admission check failed", "ClusterQueueStopped": "its ClusterQueue was stopped",
    "LocalQueueStopped": "its LocalQueue was stopped", "Deactivated": "deactivated",
    "NodeFailures": "a node failed", "InactiveWorkload": "deactivated",
}


# ------------------------------------------------------------------ Workload
@dataclass(frozen=True)
class WorkloadState:
    """A Kueue Workload reduced to what the user needs (kueuectl's order of checks)."""
    state: str  # pending | quota_reserved | admitted | evicted | requeued | finished | deactivated
    reason: str = ""
    message: str = ""
    cluster_queue: str = ""
    requeue_count: int = 0
    requeue_at: float | None = None
    admitted_at: float | None = None
    finished_at: float | None = None
    finished_ok: bool | None = None
    pods_ready: bool | None = None
    evictions: int = 0  # evictions after which the job ran again (deactivations not counted)
    cause: str = ""  # why Kueue deactivated it, e.g. RequeuingLimitExceeded
    timeouts: int = 0  # PodsReadyTimeout evictions (schedulingStats)


def workload_state(wl: dict | None) -> WorkloadState | None:
    if not wl:
        return None
    conds = conditions(wl)
    status = wl.get("status")
    st: dict = status if isinstance(status, dict) else {}
    rq = st.get("requeueState") or {}
    cq = (st.get("admission") or {}).get("clusterQueue", "")
    stats = [e for e in (st.get("schedulingStats") or {}).get("evictions") or [] if isinstance(e, dict)]
    deact = [e for e in stats if str(e.get("reason", "")).startswith(("Deactivated", "InactiveWorkload"))]
    evictions = sum(int(e.get("count", 0)) for e in stats if e not in deact)
    adm_now = true_condition(conds, "Admitted")  # kept True by a finished Workload
    common = dict(cluster_queue=cq, requeue_count=int(rq.get("count") or 0),
                  admitted_at=parse_time((adm_now or {}).get("lastTransitionTime")),
                  requeue_at=parse_time(rq.get("requeueAt")), evictions=evictions,
                  timeouts=sum(int(e.get("count", 0)) for e in stats if e.get("reason") == "PodsReadyTimeout"))
    pr = conds.get("PodsReady")
    pods_ready = None if pr is None else str(pr.get("status")) == "True"
    fin = true_condition(conds, "Finished")
    if fin:
        ok = fin.get("reason") in ("Succeeded", "")
        return WorkloadState("finished", fin.get("reason", ""), fin.get("message", ""), finished_ok=ok,
                             finished_at=parse_time(fin.get("lastTransitionTime")),
                             pods_ready=pods_ready, **common)
    ev = true_condition(conds, "Evicted")
    qr, adm = true_condition(conds, "QuotaReserved"), true_condition(conds, "Admitted")
    if (wl.get("spec") or {}).get("active") is False:
        reason = ev.get("reason", "Deactivated") if ev else "Deactivated"
        # the cause: DeactivationTarget (transient), old reasons "DeactivatedDueToX" /
        # "InactiveWorkloadX", or v0.19's schedulingStats underlyingCause
        old = reason.partition("DueTo")[2] or (reason[16:] if reason.startswith("InactiveWorkload") else "")
        cause = (conds.get("DeactivationTarget") or {}).get("reason") or old or \
            next((e["underlyingCause"] for e in deact if e.get("underlyingCause")), "")
        return WorkloadState("deactivated", reason, (ev or {}).get("message", "the Workload is inactive"),
                             cause=cause, **common)
    if ev and (qr or adm):
        # admission withdrawn; the job is being stopped
        return WorkloadState("evicted", ev.get("reason", ""), ev.get("message", ""), **common)
    if ev:
        requeued = conds.get("Requeued")
        if requeued is None or str(requeued.get("status")) == "True":
            return WorkloadState("requeued", ev.get("reason", ""), ev.get("message", ""), **common)
        return WorkloadState("evicted", ev.get("reason", ""), requeued.get("message") or ev.get("message", ""),
                             **common)
    if adm:
        return WorkloadState("admitted", "Admitted", adm.get("message", ""), pods_ready=pods_ready, **common)
    if qr:
        checks = ", ".join(f"{c.get('name')}: {c.get('state')}" for c in st.get("admissionChecks") or [])
        return WorkloadState("quota_reserved", "QuotaReserved",
                             f"quota reserved in {cq or 'its ClusterQueue'}; waiting for admission checks"
                             + (f" ({checks})" if checks else ""), **common)
    qc = conds.get("QuotaReserved") or {}
    return WorkloadState("pending", qc.get("reason", "PendingEvaluation" if not qc else ""),
                         qc.get("message", ""), **common)


def pending_message(reason: str, message: str) -> str:
    """A human sentence for a pending Workload (old and new Kueue reasons alike)."""
    head = PENDING_REASONS.get(reason, reason[:1].lower() + reason[1:] if reason else "waiting for Kueue")
    return f"{head}: {message}" if message else head


# ------------------------------------------------------------------ gang
def gang_from_podgroup(pg: dict | None) -> tuple[int, int] | None:
    """(ready, size) from a Volcano PodGroup: running (+succeeded) vs spec.minMember."""
    if not pg:
        return None
    size = int((pg.get("spec") or {}).get("minMember") or 0)
    st = pg.get("status") or {}
    ready = int(st.get("running") or 0) + int(st.get("succeeded") or 0)
    return min(ready, size) if size else ready, size


# ------------------------------------------------------------------ putting it together
def eviction_events(wl: dict | None) -> list[JobEvent]:
    """``preempted`` / ``requeued`` events of a Workload, kept after it runs again: Kueue counts
    evictions by reason in ``status.schedulingStats.evictions`` and leaves ``Requeued`` (its time:
    when the job went back to the queue) and ``Evicted`` (True while it is being stopped; False,
    "Previously: …", once readmitted) among the conditions (kueue v0.14+
    pkg/workload/workload.go SetEvictedCondition / SetRequeuedCondition, UpdateSchedulingStats)."""
    if not wl:
        return []
    conds = conditions(wl)
    raw = wl.get("status")
    st: dict = raw if isinstance(raw, dict) else {}
    stats = [e for e in (st.get("schedulingStats") or {}).get("evictions") or [] if isinstance(e, dict)]
    ev, rq = conds.get("Evicted") or {}, conds.get("Requeued") or {}
    ev_at, rq_at = parse_time(ev.get("lastTransitionTime")), parse_time(rq.get("lastTransitionTime"))
    evicted_now = str(ev.get("status")) == "True"
    out = []
    for e in stats:
        reason, n = str(e.get("reason", "")), int(e.get("count", 0))
        if n <= 0 or reason.startswith(("Deactivated", "InactiveWorkload")):
            continue
        kind = "preempted" if reason == "Preempted" else "evicted"
        why = EVICTION_REASONS.get(reason, reason)
        when = (ev_at if evicted_now and ev.get("reason") == reason else rq_at or ev_at)
        if when is not None:
            out.append(JobEvent(when, kind, why + (f" ({n} times)" if n > 1 else "")))
    if out and str(rq.get("status")) == "True" and rq_at is not None:
        out.append(JobEvent(rq_at, "requeued", "back in the queue; it runs again from the start "
                                                 "(a checkpoint on a volume resumes it)"))
    return out


def pods_started(pods: Iterable[dict]) -> float | None:
    """The earliest ``status.startTime`` of the job's pods (kinds whose status has no start)."""
    times = [t for p in pods if (t := parse_time((p.get("status") or {}).get("startTime")))]
    return min(times) if times else None


def failed_pod_exit(pods: Iterable[dict]) -> tuple[int | None, str]:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term and int(term.get("exitCode", 0)) != 0:
                return int(term["exitCode"]), f"pod {pod['metadata']['name']}: {term.get('reason', 'Error')}"
    return None, ""


def job_status(job_id: str, job: dict, *, workload: dict | None = None, podgroup: dict | None = None,
               pods: Iterable[dict] = (), position: int | None = None, position_available: bool = True,
               deleted: bool = False, now: float | None = None) -> JobStatus:
    """Everything known about one job, as a JobStatus."""
    md = job.get("metadata") or {}
    labels, ann = md.get("labels") or {}, md.get("annotations") or {}
    pods = list(pods)
    kind = for_object(job)
    ks = kind.state(job) if kind is not None else KindState(None)
    integration = kind.kueue_integration if kind is not None else None
    ws = workload_state(workload)
    size = gang_size_of(job)
    pg = gang_from_podgroup(podgroup)
    if pg and pg[1]:
        size = size or pg[1]
    ready = pg[0] if pg else (ks.ready if ks.ready is not None else sum(pod_ready(p) for p in pods))
    ready = min(ready, size) if size else ready
    exit_code, pod_msg = failed_pod_exit(pods)
    base = dict(job_id=job_id, name=md.get("name", ""), backend="kubernetes",
                queue=labels.get(QUEUE_LABEL, "") or (podgroup or {}).get("spec", {}).get("queue", ""),
                priority=labels.get(PRIORITY_LABEL), gpus=int(ann.get(ANN_GPUS) or 0),
                user=labels.get(USER_LABEL, ""),
                gang_size=size, gang_ready=ready, submitted_at=parse_time(md.get("creationTimestamp")),
                started_at=ks.started_at or (ws.admitted_at if ws else None) or pods_started(pods),
                finished_at=ks.finished_at or (ws.finished_at if ws else None),
                restarts=max(ks.restarts, ws.evictions if ws else 0), exit_code=exit_code,
                extra={"kind": job.get("kind"), "uid": md.get("uid"), "return_all": ann.get(ANN_RETURN_ALL) in
                       ("1", "true", "True"), "workload": ((workload or {}).get("metadata") or {}).get("name")})
    events = []
    if base["submitted_at"]:
        events.append(JobEvent(base["submitted_at"], "submitted", ""))

    def out(phase: str, message: str = "", reason: str = "", **kw: Any) -> JobStatus:
        d = dict(base, **kw)
        if d["started_at"]:
            events.append(JobEvent(d["started_at"], "admitted", ""))
        events.extend(eviction_events(workload))
        if d["finished_at"] and phase in ("succeeded", "failed", "cancelled"):
            events.append(JobEvent(d["finished_at"], "finished", phase))
        order = {"submitted": 0, "admitted": 1, "preempted": 2, "evicted": 2, "requeued": 3, "finished": 4}
        events.sort(key=lambda e: (e.time, order.get(e.kind, 2)))
        return JobStatus(phase=phase, message=message, reason=reason, events=tuple(events), **d)

    if deleted or md.get("deletionTimestamp"):
        return out("cancelled", "the job was deleted", "Deleted")
    if ks.phase == "succeeded":
        return out("succeeded", ks.message, ks.reason, gang_ready=ready)
    if ks.phase == "failed":
        if ks.reason == "DeadlineExceeded":  # its activeDeadlineSeconds: max_runtime_s, as the local agent says it
            ran = (ks.finished_at - base["started_at"]) if ks.finished_at and base["started_at"] else None
            return out("failed", time_limit_message(ran, own_deadline_s(job)), TIME_LIMIT)
        return out("failed", ks.message or pod_msg, ks.reason)
    if ws is not None:
        if ws.state == "finished":
            return out("succeeded" if ws.finished_ok else "failed", ws.message, ws.reason,
                       finished_at=base["finished_at"])
        if ws.state == "deactivated":
            if ws.cause == "RequeuingLimitExceeded":
                return out("failed", f"Kueue deactivated the workload: its pods were not all ready within the "
                           f"PodsReady timeout, {ws.timeouts + 1} times (requeuing limit reached); the job "
                           "stays suspended until the Workload is reactivated", ws.reason)
            return out("failed", f"Kueue deactivated the workload: {ws.message}".rstrip(": "), ws.reason)
        if ws.state == "evicted":
            why = EVICTION_REASONS.get(ws.reason, ws.reason)
            phase = "preempted" if ws.reason == "Preempted" else "queued"
            msg = ws.message or why
            back = {}
            if ws.reason == "PodsReadyTimeout" and ws.requeue_at:
                msg = f"evicted: {why}; back in the queue at " \
                      f"{_dt.datetime.fromtimestamp(ws.requeue_at):%H:%M:%S} (requeue {ws.requeue_count})"
                if phase == "queued":  # Kueue queues it again only at requeueAt: a true lower bound
                    back = {"not_before": ws.requeue_at}
            return out(phase, msg, ws.reason, queue_position=None, position_available=position_available, **back)
        if ws.state in ("pending", "requeued"):
            msg = pending_message(ws.reason, ws.message) if ws.state == "pending" else \
                "requeued after being preempted" if ws.reason == "Preempted" else \
                f"requeued: {EVICTION_REASONS.get(ws.reason, ws.reason)}" + \
                (f" (requeue {ws.requeue_count}, backoff finished)" if ws.reason == "PodsReadyTimeout" else "")
            return out("queued", msg, ws.reason, queue_position=position,
                       position_available=position_available, restarts=max(base["restarts"], 1)
                       if ws.state == "requeued" else base["restarts"])
        if ws.state == "quota_reserved":
            return out("queued", ws.message, ws.reason, position_available=position_available)
        # admitted
        if ks.phase == "suspended":
            return out("admitted", f"admitted to {ws.cluster_queue}; starting the job", "Admitted")
    if ks.phase == "suspended":
        if not labels.get(QUEUE_LABEL):
            return out("queued", "suspended", ks.reason, position_available=position_available)
        hint = integration_hint(job, now, integration)
        return out("queued", hint or "waiting for Kueue to create its Workload", "NoWorkload" if hint else ks.reason,
                   position_available=position_available)
    if podgroup and not ws:
        pg_phase = (podgroup.get("status") or {}).get("phase", "Pending")
        if pg_phase == "Pending" and not ready:
            unsched = true_condition(conditions(podgroup), "Unschedulable")
            return out("queued", "Volcano: " + ((unsched or {}).get("message") or "waiting in queue "
                                                 f"{base['queue'] or 'default'}"),
                       "PodGroupPending", position_available=False)
        if pg_phase == "Inqueue" and not ready:
            return out("admitted", "Volcano admitted the gang; pods are being placed", "Inqueue")
    gang_hint = kind.gang_hint(job, podgroup, pods, now) if kind is not None else ""
    if size and ready >= size and ks.phase in (None, "running", "starting"):
        return out("running", "; ".join(filter(None, [ks.message, gang_hint])), ks.reason or "Running")
    if ks.phase == "running" and not size:
        return out("running", "; ".join(filter(None, [ks.message, gang_hint])), ks.reason)
    if ready or pods or ks.phase in ("starting", "running"):
        workers_hint = kind.workers_hint(job, pods) if kind is not None else ""
        msg = workers_hint or ks.message or f"{ready}/{size} pods ready"
        return out("starting", "; ".join(filter(None, [msg, unschedulable(pods), stuck_container(pods), gang_hint])),
                   "WaitingForWorkers" if workers_hint else ks.reason or "Starting")
    if ws is not None or (not labels.get(QUEUE_LABEL) and not podgroup):
        return out("admitted", f"admitted to {ws.cluster_queue}" if ws and ws.cluster_queue else "",
                   "Admitted")
    return out("queued", integration_hint(job, now, integration) or "waiting for Kueue to create its Workload", "NoWorkload",
               position_available=position_available)


def positions_from_summary(summary: dict) -> dict[str, int]:
    """Visibility ``PendingWorkloadsSummary`` -> {workload name: 1-based LocalQueue position}."""
    return {it["metadata"]["name"]: int(it.get("positionInLocalQueue", 0)) + 1
            for it in summary.get("items") or []}
