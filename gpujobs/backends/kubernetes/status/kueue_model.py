"""The cluster's Kueue objects as the admission engine's model (:mod:`gpujobs.admission.model`)
and a forecast :class:`~gpujobs.admission.forecast.Snapshot`: ClusterQueues, Cohorts,
ResourceFlavors, LocalQueues and Workloads (requests, priority, order, admission, eviction,
execution limits), and the forecasts of every pending Workload. Pure functions of
:class:`.kueue_read.KueueObjects`; the cache that calls them is :mod:`.forecasting`."""
from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping

from ....admission.forecast import Forecast, History, Job, Snapshot, forecast
from ....admission.forecast.calibration import FirstForecasts
from ....admission.gates import REQUEUE_BATCH_S
from ....admission.model import ClusterQueue, Cohort, PodSet, ResourceFlavor, Workload
from ....errors import GpuJobsError
from ....quantity import parse_quantity
from . import mapping as status_map, objects
from ..naming import LABEL_JOB, MAX_EXEC_LABEL, QUEUE_LABEL, USER_LABEL
from .kueue_read import KueueObjects

GPU = "nvidia.com/gpu"  # shown as "GPUs" (the engine's "gpu")
DEFAULT_GRACE_S = 30.0  # a pod's terminationGracePeriodSeconds when unset (Kubernetes' default)
OTHERS = "(other namespaces)"  # id prefix of the stand-in for quota held by unreadable workloads
NOT_ALL = ("other namespaces' Workloads are not readable: the quota they hold counts with an "
           "unknown end")
# Kueue's Preempted/Evicted message names the preemptor: "... (UID: <uid>, JobUID: <uid>) due to ..."
_PREEMPTOR = re.compile(r"\(UID: ([^,)]+)")


def _res(name: str) -> str:
    return "gpu" if name == GPU else name


@functools.lru_cache(maxsize=4096)
def _parsed(q: str) -> Decimal:
    return parse_quantity(q, "quantity")


def _num(q: Any) -> float:
    return float(_parsed(str(q)))



# ------------------------------------------------------------------ translation
def _quota_maps(resources_of: list[dict]) -> tuple[dict, dict, dict]:
    """({flavor: {resource: nominal}}, borrowingLimit, lendingLimit) of one resource group's
    flavors (or a Cohort's)."""
    nominal: dict[str, dict[str, float]] = {}
    blim: dict[str, dict[str, float]] = {}
    llim: dict[str, dict[str, float]] = {}
    for fl in resources_of:
        for r in fl.get("resources") or []:
            name = _res(r["name"])
            nominal.setdefault(fl["name"], {})[name] = _num(r.get("nominalQuota", 0))
            for key, out in (("borrowingLimit", blim), ("lendingLimit", llim)):
                if r.get(key) is not None:
                    out.setdefault(fl["name"], {})[name] = _num(r[key])
    return nominal, blim, llim


def _fungibility(value: str | None, default: str) -> str:
    # v1beta1 spelled them Borrow / Preempt (= stop at the first flavor that needs it)
    return {"Borrow": "MayStopSearch", "Preempt": "MayStopSearch"}.get(value or default, value or default)


def cluster_queue(cq: dict, local_queues: list[str]) -> ClusterQueue:
    """A Kueue ClusterQueue object as the engine's :class:`ClusterQueue` (defaults as Kueue's
    API: withinClusterQueue / reclaimWithinCohort Never, BestEffortFIFO)."""
    spec = cq.get("spec") or {}
    groups: list[dict] = []
    blim: dict = {}
    llim: dict = {}
    for rg in spec.get("resourceGroups") or []:
        nominal, b, lend = _quota_maps(rg.get("flavors") or [])
        groups.append(nominal)
        for src, dst in ((b, blim), (lend, llim)):
            for f, res in src.items():
                dst.setdefault(f, {}).update(res)
    pre = spec.get("preemption") or {}
    bwc = pre.get("borrowWithinCohort") or {}
    ff = spec.get("flavorFungibility") or {}
    weight = (spec.get("fairSharing") or {}).get("weight")
    return ClusterQueue(
        cq["metadata"]["name"], None, resource_groups=groups or [{}],
        cohort=spec.get("cohortName") or spec.get("cohort") or None,
        borrowing_limit=blim or None, lending_limit=llim or None,
        strategy=spec.get("queueingStrategy") or "BestEffortFIFO",
        within_queue=pre.get("withinClusterQueue") or "Never",
        reclaim_within_cohort=pre.get("reclaimWithinCohort") or "Never",
        borrow_within_cohort=bwc.get("policy") or "Never",
        max_priority_threshold=bwc.get("maxPriorityThreshold"),
        when_can_borrow=_fungibility(ff.get("whenCanBorrow"), "MayStopSearch"),
        when_can_preempt=_fungibility(ff.get("whenCanPreempt"), "TryNextFlavor"),
        preference=ff.get("preference"),
        fair_weight=_num(weight) if weight is not None else 1.0,
        local_queues=tuple(local_queues))


def cohort(co: dict) -> Cohort:
    spec = co.get("spec") or {}
    own: dict = {}
    blim: dict = {}
    llim: dict = {}
    for rg in spec.get("resourceGroups") or []:
        n, b, lend = _quota_maps(rg.get("flavors") or [])
        for src, dst in ((n, own), (b, blim), (lend, llim)):
            for f, res in src.items():
                dst.setdefault(f, {}).update(res)
    return Cohort(co["metadata"]["name"], own, parent=spec.get("parentName") or spec.get("parent") or None,
                  borrowing_limit=blim or None, lending_limit=llim or None)


def flavor(rf: dict) -> ResourceFlavor:
    spec = rf.get("spec") or {}
    return ResourceFlavor(rf["metadata"]["name"], dict(spec.get("nodeLabels") or {}),
                          tuple(spec.get("nodeTaints") or ()), tuple(spec.get("tolerations") or ()))


Defaults = tuple[Mapping[str, Any], Mapping[str, Any]]
"""A namespace's container defaults from its LimitRanges: (default limits, default requests)."""


def container_defaults(limit_ranges: list[dict], namespace: str) -> Defaults:
    """What Kueue fills into a pod's containers in ``namespace`` before counting its requests
    (kueue pkg/workload/resources.go handlePodLimitRange, v0.17): the ``Container`` items of the
    namespace's LimitRanges, the first to name a resource giving its default (limitrange.Summarize)."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for lr in limit_ranges:
        if (lr.get("metadata") or {}).get("namespace") != namespace:
            continue
        for item in (lr.get("spec") or {}).get("limits") or []:
            if item.get("type") == "Container":
                limits = {**(item.get("default") or {}), **limits}
                requests = {**(item.get("defaultRequest") or {}), **requests}
    return limits, requests


def runtime_overheads(runtime_classes: list[dict]) -> dict[str, Mapping[str, Any]]:
    """RuntimeClass name -> its ``overhead.podFixed``: Kueue fills it into a pod that names the
    class and has no ``spec.overhead`` (kueue v0.17 pkg/workload/resources.go handlePodOverhead)."""
    return {rc["metadata"]["name"]: (rc.get("overhead") or {}).get("podFixed") or {} for rc in runtime_classes}


def pod_requests(template: dict, defaults: Defaults | None = None,
                 overheads: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, float]:
    """One pod's effective requests as Kueue computes them (component-helpers' ``PodRequests``,
    which Kueue v0.17 calls; KEP-753, kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/
    #resource-sharing-within-containers): the app containers and the sidecars (init containers with
    ``restartPolicy: Always``) add up; each regular init container runs beside the sidecars started
    before it and the pod needs at least that; pod-level ``spec.resources.requests`` replace the
    containers' cpu, memory and hugepages; ``spec.overhead`` adds. A container's limit stands for
    its missing request (Kueue's ``UseLimitsAsMissingRequestsInPod``), after the namespace's
    LimitRange ``defaults`` filled what the container leaves out (:func:`container_defaults`); a
    pod naming a RuntimeClass and no overhead gets the class's (``overheads``, :func:`runtime_overheads`)."""
    spec = template.get("spec") or {}
    default_limits, default_requests = defaults or ({}, {})

    def one(c: dict) -> dict[str, Decimal]:
        res = c.get("resources") or {}
        merged = {**default_limits, **(res.get("limits") or {}), **default_requests, **(res.get("requests") or {})}
        return {k: _parsed(str(v)) for k, v in merged.items()}

    def add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
        for k, v in more.items():
            into[k] = into.get(k, Decimal(0)) + v
        return into
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        add(total, one(c))
    sidecars: dict[str, Decimal] = {}
    init: dict[str, Decimal] = {}  # the most an init container needs, with the sidecars before it
    for c in spec.get("initContainers") or []:
        asks = one(c)
        if c.get("restartPolicy") == "Always":
            add(total, asks)
            use = dict(add(sidecars, asks))
        else:
            use = add(asks, sidecars)
        for k, v in use.items():
            init[k] = max(init.get(k, Decimal(0)), v)
    for k, v in init.items():
        total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in ((spec.get("resources") or {}).get("requests") or {}).items():
        if k in ("cpu", "memory") or k.startswith("hugepages-"):
            total[k] = _parsed(str(v))
    overhead = spec.get("overhead") or (overheads or {}).get(spec.get("runtimeClassName") or "") or {}
    add(total, {k: _parsed(str(v)) for k, v in overhead.items()})
    return {_res(k): float(v) for k, v in total.items()}


def podsets(wl_spec_podsets: list[dict], covered: set[str],
            usage: Mapping[str, Mapping[str, Any]] | None = None, defaults: Defaults | None = None, *,
            admitted: Mapping[str, int] | None = None, reclaimable: Mapping[str, int] | None = None,
            overheads: Mapping[str, Mapping[str, Any]] | None = None) -> list[PodSet]:
    """Engine pod sets from a Workload's ``spec.podSets`` (only the resources its ClusterQueue
    covers count). ``usage``: the admission's ``resourceUsage`` per pod set (exact, after
    LimitRange defaults) for ``admitted`` pods (the admission's count; fewer than the pod set's
    under partial admission), preferred to the template's requests (with the namespace's
    LimitRange ``defaults`` and RuntimeClass ``overheads``) when given. ``reclaimable`` (``status.reclaimablePods``): pods that
    need their quota no more (a Job's finished ones); Kueue counts the pod set without them
    (kueue v0.17 pkg/workload podSetsCountsAfterReclaim, ReclaimablePods on by default)."""
    out = []
    for ps in wl_spec_podsets:
        name = ps.get("name", "")
        count = int(ps.get("count", 1) or 0)
        after = max(0, count - int((reclaimable or {}).get(name) or 0))
        tmpl = ps.get("template") or {}
        used = (usage or {}).get(name)
        if used and count:
            held = int((admitted or {}).get(name) or count)
            reqs = {_res(k): _num(v) / held for k, v in used.items()}
            count = min(held, after)
        else:
            reqs = pod_requests(tmpl, defaults, overheads)
            count = after
        spec = tmpl.get("spec") or {}
        out.append(PodSet(ps.get("name", "main"), count, {r: a for r, a in reqs.items() if r in covered and a},
                          node_selector=dict(spec.get("nodeSelector") or {}),
                          tolerations=tuple(spec.get("tolerations") or ())))
    return out


def workload_id(wl: dict) -> str:
    """``namespace/<owner name>`` (a gpujobs job's own id) for a Workload with a controller owner,
    else ``namespace/<workload name>``."""
    md = wl["metadata"]
    owners = md.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    return f"{md.get('namespace', '')}/{(owner or md)['name']}"


def _job_limit(job: dict | None) -> float | None:
    """A gpujobs job's declared limit: its activeDeadlineSeconds, else Kueue's max-exec-time label
    (set a margin after the deadline where the operator enforces one: render.job.kueue_max_exec_s)."""
    if not job:
        return None
    own = objects.own_deadline_s(job)
    if own:
        return float(own)
    label = ((job.get("metadata") or {}).get("labels") or {}).get(MAX_EXEC_LABEL)
    try:
        return float(label) if label is not None and float(label) > 0 else None
    except (TypeError, ValueError):
        return None


@dataclass
class Translation:
    """A :class:`Snapshot` of the cluster and what the forecast cannot take from it."""
    snapshot: Snapshot
    ids: dict[str, str]  # forecast id -> Workload "namespace/name"
    never: dict[str, str]  # pending id -> why it can never fit
    unknown_queue: set[str]
    backing_off: dict[str, float]  # pending id -> when it is back in the queue
    cq_of: dict[str, str]  # id -> ClusterQueue
    hidden_ahead: dict[str, list[dict]]  # cq -> pending visibility items of unreadable namespaces
    scope: str = "cluster"


def translate(c: KueueObjects, now: float | None = None,
              progress_end: Callable[[str], float | None] | None = None) -> Translation:
    """The Kueue objects of ``c`` as a forecast :class:`Snapshot` (the engine's model)."""
    now = time.time() if now is None else now
    lqs_of: dict[str, list[str]] = {}
    for lq_obj in c.local_queues:
        lq_md = lq_obj["metadata"]
        target = (lq_obj.get("spec") or {}).get("clusterQueue")
        if target:
            lqs_of.setdefault(target, []).append(f"{lq_md.get('namespace', '')}/{lq_md['name']}")
    queues = []
    for cq in c.cluster_queues:
        try:
            queues.append(cluster_queue(cq, lqs_of.get(cq["metadata"]["name"], [])))
        except (GpuJobsError, KeyError, TypeError, ValueError):
            continue  # a queue the engine cannot model (a newer Kueue field value): its jobs get no forecast
    covered = {q.name: {r for g in (q.resource_groups or []) for res in g.values() for r in res}
               for q in queues}
    lq_cq = {name: q.name for q in queues for name in q.local_queues}
    names = {f["metadata"]["name"] for f in c.flavors or []}
    used = {f for q in queues for g in (q.resource_groups or []) for f in g}
    flavors = [flavor(f) for f in c.flavors] if c.flavors and used <= names else None
    snap = Snapshot(queues, [cohort(co) for co in c.cohorts], dict(c.priorities), 0, [], [], now=now,
                    history=history(c.own_jobs.values()), flavors=flavors, kueue_version=c.kueue_version,
                    requeue_delay_s=REQUEUE_BATCH_S)
    scratch = snap.engine()
    tr = Translation(snap, {}, {}, set(), {}, {}, {}, c.scope)
    by_uid: dict[str, str] = {}
    taken: set[str] = set()
    rows = []
    for wl in c.workloads:
        md = wl["metadata"]
        wid = workload_id(wl)
        if wid in taken:  # two Workloads owned by same-named objects: keep them apart
            wid = f"{md.get('namespace', '')}/{md['name']}"
        taken.add(wid)
        tr.ids[wid] = f"{md.get('namespace', '')}/{md['name']}"
        if md.get("uid"):
            by_uid[md["uid"]] = wid
        rows.append((wid, wl))
    own_held: dict[str, dict[tuple[str, str], float]] = {}
    defaults: dict[str, Defaults] = {}  # per namespace
    overheads = runtime_overheads(c.runtime_classes)
    running, pending = [], []
    for wid, wl in rows:
        md = wl["metadata"]
        spec: dict = wl.get("spec") or {}
        status: dict = wl["status"] if isinstance(wl.get("status"), dict) else {}
        conds = status_map.conditions(wl)

        def cond(t: str, conds: dict = conds) -> dict:
            return conds.get(t) or {}
        if str(cond("Finished").get("status")) == "True" or spec.get("active") is False:
            continue
        lq = f"{md.get('namespace', '')}/{spec.get('queueName', '')}"
        reserved = str(cond("QuotaReserved").get("status")) == "True"
        adm: dict = status.get("admission") or {}
        cqn = str(adm.get("clusterQueue") if reserved else lq_cq.get(lq))
        if cqn not in covered:
            tr.unknown_queue.add(wid)
            continue
        tr.cq_of[wid] = cqn
        owner = next(iter(status_map.owner_uids(wl) & set(c.own_jobs)), None)
        job_obj = c.own_jobs.get(owner) if owner else None
        label = wid.split("/", 1)[1] if md.get("namespace") == c.namespace else wid
        asg = {a.get("name", ""): a for a in adm.get("podSetAssignments") or []}
        usage = {n: a.get("resourceUsage") for n, a in asg.items() if a.get("resourceUsage")} if reserved else None
        adm_counts = {n: int(a["count"]) for n, a in asg.items() if a.get("count")}
        reclaim = {r.get("name", ""): int(r.get("count") or 0) for r in status.get("reclaimablePods") or []}
        prio: int | str = int(spec.get("priority") or 0)
        cls = (spec.get("priorityClassRef") or {}).get("name") or spec.get("priorityClassName")
        if cls and c.priorities.get(cls) == prio:
            prio = cls  # named in reasons as the class ("high"), same value
        ns = md.get("namespace", "")
        if ns not in defaults:
            defaults[ns] = container_defaults(c.limit_ranges, ns)
        w = Workload(wid, lq if lq in lq_cq else cqn,
                     podsets(spec.get("podSets") or [], covered[cqn], usage, defaults[ns], admitted=adm_counts,
                             reclaimable=reclaim, overheads=overheads),
                     priority=prio, created=_order_time(wl, cond("Evicted")))
        limits = [x for x in (_exec_limit(wl), _job_limit(job_obj)) if x is not None]
        grace = _grace(spec.get("podSets") or [])
        kind = _kind(job_obj)
        j = Job(w, name=label, max_runtime_s=min(limits) if limits else None, grace_period_s=grace,
                user=kind.get("user", ""), kind=kind.get("kind", ""))
        if reserved:
            assigned = {n: {_res(r): f for r, f in (a.get("flavors") or {}).items()} for n, a in asg.items()}
            j.flavor = assigned
            j.started = status_map.parse_time(cond("Admitted").get("lastTransitionTime")
                                              or cond("QuotaReserved").get("lastTransitionTime")) or now
            if job_obj is not None and progress_end is not None:
                j.expected_end = progress_end(wid)
            ev = cond("Evicted")
            if str(ev.get("status")) == "True":
                j.stops_at = (status_map.parse_time(ev.get("lastTransitionTime")) or now) + grace
                m = _PREEMPTOR.search(cond("Preempted").get("message") or ev.get("message") or "")
                j.preempted_by = by_uid.get(m.group(1)) if m else None
            if md.get("namespace") == c.namespace:
                held = own_held.setdefault(cqn, {})
                for ps in w.podsets:
                    for r, a in ps.total().items():
                        fl = (assigned.get(ps.name) or {}).get(r, "")
                        held[(fl, r)] = held.get((fl, r), 0.0) + a
            running.append(j)
            continue
        back = status_map.parse_time((status.get("requeueState") or {}).get("requeueAt"))
        rq = cond("Requeued")
        if (back and back > now) or (str(rq.get("status")) == "False" and rq.get("reason") == "PodsReadyTimeout"):
            tr.backing_off[wid] = back or now
            continue
        try:
            ok, why = scratch.can_ever_fit(w)
        except GpuJobsError as exc:
            ok, why = False, str(exc)
        if not ok:
            tr.never[wid] = why
            continue
        pending.append(j)
    if c.scope == "namespace":
        running += _others(c, own_held, covered, now)
        tr.hidden_ahead = {cq: [i for i in items if (i.get("metadata") or {}).get("namespace") != c.namespace]
                           for cq, items in c.pending_elsewhere.items()}
    pending.sort(key=lambda j: (j.workload.created, j.id))
    snap.running, snap.pending = running, pending
    return tr


def sharing_quota_with(c: KueueObjects, lq: str) -> KueueObjects:
    """``c`` with only the Workloads whose ClusterQueue shares quota with LocalQueue ``lq``'s (the
    same cohort tree, or the same queue): the others cannot change when a job there starts, so a
    plan need not translate them (the simulation would leave them out anyway)."""
    parent: dict[str, str] = {co["metadata"]["name"]: str((co.get("spec") or {}).get("parentName") or "")
                              for co in c.cohorts}

    def root(cq: dict) -> str:
        spec = cq.get("spec") or {}
        name = str(spec.get("cohortName") or spec.get("cohort") or "")
        if not name:
            return "cq:" + cq["metadata"]["name"]
        seen: set[str] = set()
        while parent.get(name) and name not in seen:
            seen.add(name)
            name = parent[name]
        return name
    group = {cq["metadata"]["name"]: root(cq) for cq in c.cluster_queues}
    lq_cq = {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": (o.get("spec") or {}).get("clusterQueue")
             for o in c.local_queues}
    want = group.get(lq_cq.get(lq) or "")
    if want is None:
        return c

    def keep(wl: dict) -> bool:
        st: dict = wl["status"] if isinstance(wl.get("status"), dict) else {}
        cq = (st.get("admission") or {}).get("clusterQueue") or lq_cq.get(
            f"{wl['metadata'].get('namespace', '')}/{(wl.get('spec') or {}).get('queueName', '')}")
        return group.get(cq or "") == want
    from dataclasses import replace
    return replace(c, workloads=[w for w in c.workloads if keep(w)])


def _others(c: KueueObjects, own_held: dict, covered: dict, now: float) -> list[Job]:
    """Stand-ins for the quota other namespaces hold (ClusterQueue.status.flavorsReservation less
    what this namespace's admitted Workloads hold), with an unknown end."""
    out = []
    for cq in c.cluster_queues:
        name = cq["metadata"]["name"]
        st = cq.get("status") or {}
        held = own_held.get(name, {})
        for fl in st.get("flavorsReservation") or st.get("flavorsUsage") or []:
            reqs = {}
            for r in fl.get("resources") or []:
                res = _res(r["name"])
                left = _num(r.get("total", 0)) - held.get((fl["name"], res), 0.0)
                if res in covered.get(name, ()) and left > 1e-9:
                    reqs[res] = left
            if reqs:
                w = Workload(f"{OTHERS} {name} {fl['name']}", name, [PodSet("main", 1, reqs)], created=now)
                out.append(Job(w, name=f"workloads of other namespaces in {name}", started=now,
                               flavor={"main": {r: fl["name"] for r in reqs}}))
    return out


def _order_time(wl: dict, ev: dict) -> float:
    """When Kueue queued it: an eviction for PodsReadyTimeout or an admission check re-queues it by
    the eviction time (requeuingStrategy.timestamp: Eviction, the default;
    kueue@ff69552 apis/config/v1beta2/configuration_types.go waitForPodsReady),
    otherwise by creation. ``ev``: its Evicted condition."""
    if ev.get("reason") in ("PodsReadyTimeout", "AdmissionCheck") and ev.get("lastTransitionTime"):
        t = status_map.parse_time(ev["lastTransitionTime"])
        if t is not None:
            return t
    return status_map.parse_time(wl["metadata"].get("creationTimestamp")) or 0.0


def _exec_limit(wl: dict) -> float | None:
    """spec.maximumExecutionTimeSeconds less the time already spent admitted in earlier cycles."""
    mx = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
    if not mx:
        return None
    past = ((wl.get("status") or {}) if isinstance(wl.get("status"), dict) else {}).get(
        "accumulatedPastExecutionTimeSeconds") or 0
    return max(1.0, float(mx) - float(past))


def _kind(job: dict | None) -> dict[str, str]:
    """A gpujobs job's user and name (its labels): what its similar runs share in History."""
    labels = ((job or {}).get("metadata") or {}).get("labels") or {}
    return {"user": labels.get(USER_LABEL, ""), "kind": labels.get(LABEL_JOB, "")} if labels.get(LABEL_JOB) else {}


def _run(job: dict) -> tuple[float, float] | None:
    """(start, end) of a finished job's run: ``status.startTime`` (set when Kueue unsuspends it)
    to ``completionTime`` / ``endTime``, else its Complete/Succeeded/Failed condition's time."""
    st: dict = job["status"] if isinstance(job.get("status"), dict) else {}
    start = status_map.parse_time(st.get("startTime"))
    end = status_map.parse_time(st.get("completionTime") or st.get("endTime"))
    if end is None:
        for c in st.get("conditions") or []:
            if c.get("type") in ("Complete", "Succeeded", "Failed") and str(c.get("status")) == "True":
                end = status_map.parse_time(c.get("lastTransitionTime"))
                break
    return (start, end) if start is not None and end is not None and end >= start else None


def history(jobs: Any) -> History:
    """Runtimes of gpujobs' own finished jobs (their start and end times), filed by user, name
    label and LocalQueue, with their declared limits (see :class:`History`)."""
    h = History()
    done = []
    for job in jobs:
        kind, run = _kind(job), _run(job)
        if kind and run:
            md = job.get("metadata") or {}
            lq = f"{md.get('namespace', '')}/{(md.get('labels') or {}).get(QUEUE_LABEL, '')}"
            done.append((run[1], kind, lq, run[1] - run[0], _job_limit(job)))
    for _end, kind, lq, rt, limit in sorted(done, key=lambda d: d[0]):  # in the order they ended
        h.add(kind["user"], kind["kind"], lq, rt, limit, DEFAULT_GRACE_S)
    return h


def _grace(pss: list[dict]) -> float:
    g = [((ps.get("template") or {}).get("spec") or {}).get("terminationGracePeriodSeconds") for ps in pss]
    vals = [float(x) for x in g if x is not None]
    return max(vals) if vals else DEFAULT_GRACE_S


# ------------------------------------------------------------------ answers
def clean_forecast(tr: Translation, fc: Forecast, hidden: int = 0) -> Forecast:
    """What the cluster's view adds: stand-ins out of blocked_by; in the namespace scope, the
    ``hidden`` pending workloads of other namespaces ahead make the start a "not before"."""
    fc.blocked_by = tuple(b for b in fc.blocked_by if not b.startswith(OTHERS))
    if tr.scope == "namespace":
        if hidden and fc.expected_start is not None:  # their sizes and ends are unknown: no number
            without, fc.expected_start, fc.expected_start_range = fc.expected_start, None, None
            fc.basis = (f"unknown: {hidden} pending workload{'s' if hidden > 1 else ''} of other "
                        f"namespaces ahead (sizes not readable); without them {_clock(without)}, "
                        + fc.basis)
        if hidden:
            fc.reason += f"; {hidden} more pending in other namespaces' LocalQueues ahead"
        fc.basis += ("; " if fc.basis else "") + NOT_ALL
    return fc


def count_hidden(tr: Translation, wid: str, cq_positions: Mapping[str, int] | None) -> int:
    cq = tr.cq_of.get(wid, "")
    items = tr.hidden_ahead.get(cq)
    if not items:
        return 0
    mine = (cq_positions or {}).get(tr.ids.get(wid, ""))
    if mine is None:
        return 0
    return sum(1 for it in items if int(it.get("positionInClusterQueue", 0)) < mine)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def forecasts(c: KueueObjects, now: float | None = None,
              progress_end: Callable[[str], float | None] | None = None,
              firsts: FirstForecasts | None = None) -> dict[str, Forecast]:
    """A :class:`Forecast` for every pending workload the cluster shows (by :func:`workload_id`),
    plus one for each that can never fit (no start, the engine's reason). ``firsts``: the
    pending workloads' first forecasts, scored against their admission as it shows (their
    errors calibrate the ranges)."""
    if c.scope == "none":
        return {}
    tr = translate(c, now, progress_end)
    if firsts is not None:  # finished ones too: admitted and done between two refreshes
        firsts.score(admitted_at(c), (j.id for j in tr.snapshot.pending))
        tr.snapshot.start_errors = firsts.errors
    out = forecast(tr.snapshot)
    if firsts is not None:
        firsts.note(tr.snapshot, out)
    positions = cq_positions(c)
    for wid, fc in out.items():
        clean_forecast(tr, fc, count_hidden(tr, wid, positions))
    for wid, why in tr.never.items():
        out[wid] = Forecast(wid, None, "never: it can never fit its ClusterQueue", why)
    return out


def admitted_at(c: KueueObjects) -> dict[str, float]:
    """Workload id -> when Kueue admitted it, for every Workload the cluster shows admitted,
    finished ones included (Kueue's finish adds the Finished condition and leaves Admitted as
    it was: kueue pkg/workload/finish)."""
    out = {}
    for wl in c.workloads:
        conds = status_map.conditions(wl)
        for kind in ("Admitted", "QuotaReserved"):
            cond = conds.get(kind) or {}
            if str(cond.get("status")) == "True":
                at = status_map.parse_time(cond.get("lastTransitionTime"))
                if at is not None:
                    out[workload_id(wl)] = at
                break
    return out


def cq_positions(c: KueueObjects) -> dict[str, int]:
    """Workload "namespace/name" -> position in its ClusterQueue (visibility API, 0-based)."""
    out = {}
    for items in c.pending_elsewhere.values():
        for it in items:
            md = it.get("metadata") or {}
            out[f"{md.get('namespace', '')}/{md.get('name', '')}"] = int(it.get("positionInClusterQueue", 0))
    return out

