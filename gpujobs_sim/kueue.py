"""The simulated Kueue: Workloads for queued jobs, admission by the shared engine, preemption,
waitForPodsReady, and the visibility API's positions.

Behaviour follows Kueue at kueue@ff69552 (docs/kubernetes-kinds.md): Kueue creates a Workload
(kueue.x-k8s.io/v1beta2, owner reference to the job, ``kueue.x-k8s.io/job-uid`` label)
for every job with a ``queue-name`` label, keeps the job suspended (the kind's own
suspend field) until the shared admission engine (:mod:`gpujobs.admission`) admits it,
then sets QuotaReserved/Admitted, unsuspends; preemption sets Evicted(Preempted) and
Preempted, suspends the job, and once its pods are gone clears the reservation and sets
Requeued; readmission turns Evicted/Preempted False ("Previously: …") and leaves Requeued
as it was (Kueue's SetQuotaReservation); PodsReady and Finished follow the pods. With
``pods_ready_timeout_s`` Kueue's waitForPodsReady is simulated: an admitted workload whose
pods are not all ready in time is evicted (PodsReadyTimeout), backs off (requeueState),
re-enters the queue at requeueAt (Requeued BackoffFinished) and is deactivated past
``backoff_limit``. A BestEffortFIFO queue's inadmissible workloads are back in its heap
``requeue_batch_s`` after quota is released (Kueue's requeueBatchPeriod); a StrictFIFO head is
tried every pass. Positions are served through the visibility API.

:class:`Kueue` is the Kueue part of :class:`~gpujobs_sim.controllers.SimControllers`; it runs in
the controllers' reconcile pass and keeps its state there.
"""
from __future__ import annotations

import hashlib
import math
import time
from decimal import Decimal
from typing import Any, Callable

from gpujobs.admission import ClusterQueue, Cohort, Engine, PodSet, Workload
from gpujobs.errors import GpuJobsError

from . import rules
from .changes import Changes
from .conditions import _cond, _condition, _is_true, get_suspend, set_suspend
from .rules import parse_time, quantity
from .store import ApiError

QUEUE_LABEL, PRIO_LABEL, JOB_UID = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class",
                                    "kueue.x-k8s.io/job-uid")
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
WL_API = "kueue.x-k8s.io/v1beta2"
# Kueue's integration (framework) names, as integrations.frameworks lists them
# (kueue@ff69552 apis/config/v1beta2/configuration_types.go Integrations.Frameworks)
FRAMEWORKS = {("kubeflow.org", "MPIJob"): "kubeflow.org/mpijob", ("kubeflow.org", "PyTorchJob"): "kubeflow.org/pytorchjob",
              ("trainer.kubeflow.org", "TrainJob"): "trainer.kubeflow.org/trainjob", ("ray.io", "RayJob"): "ray.io/rayjob",
              ("workload.codeflare.dev", "AppWrapper"): "workload.codeflare.dev/appwrapper",
              ("batch", "Job"): "batch/job"}
# s a BestEffortFIFO queue's inadmissible workloads wait, after quota is released, before they
# are back in its heap (kueue@v0.17.0 pkg/cache/queue/inadmissible_workloads.go requeueBatchPeriod)
REQUEUE_BATCH_PERIOD_S = 1.0
KUEUE_KINDS = frozenset(FRAMEWORKS)  # the job kinds Kueue manages (a Volcano Job is not one)


class Kueue:
    """Kueue's controllers over the store (the state is set up by SimControllers.__init__)."""

    store: Any
    changes: Changes
    errors: list[BaseException]
    disabled_integrations: set[str]
    pods_ready_timeout_s: float | None
    backoff_base_s: float
    backoff_max_s: float
    backoff_limit: int | None
    requeue_delay: float
    requeue_batch_s: float
    new_pending_reasons: bool
    _engine: Engine | None
    _evicting: dict[str, float]
    _covered: dict[str, set]
    _pods_of: Callable[[dict], list[dict]]  # the job's pods (SimControllers)

    def _on_workload_deleted(self, wl: dict) -> None:
        self.changes.cancel(_wkey(wl))
        if self._engine is not None:
            self._engine.remove(_wkey(wl))

    # ------------------------------------------------------------------ queues, admission
    def _rebuild_engine(self) -> None:
        cqs = self.store.list(WL_API, "ClusterQueue")
        lqs = self.store.list(WL_API, "LocalQueue")
        prios = {p["metadata"]["name"]: int(p.get("value", 0)) for p in self.store.list(WL_API,
                                                                                        "WorkloadPriorityClass")}
        queues = []
        self._covered: dict[str, set] = {}
        for cq in cqs:
            spec = cq.get("spec") or {}
            groups, blim, llim = _resource_groups(spec)
            pre = spec.get("preemption") or {}
            bwc = pre.get("borrowWithinCohort") or {}
            ff = spec.get("flavorFungibility") or {}
            self._covered[cq["metadata"]["name"]] = {r for g in groups for q in g.values() for r in q}
            queues.append(ClusterQueue(
                cq["metadata"]["name"], None, resource_groups=groups,
                cohort=spec.get("cohortName") or spec.get("cohort"),
                borrowing_limit=blim or None, lending_limit=llim or None,
                strategy=spec.get("queueingStrategy", "BestEffortFIFO"),
                within_queue=pre.get("withinClusterQueue", "Never"),
                reclaim_within_cohort=pre.get("reclaimWithinCohort", "Never"),
                borrow_within_cohort=bwc.get("policy", "Never"),
                max_priority_threshold=bwc.get("maxPriorityThreshold"),
                when_can_borrow=ff.get("whenCanBorrow", "MayStopSearch"),
                when_can_preempt=ff.get("whenCanPreempt", "TryNextFlavor"),
                preference=ff.get("preference"),
                local_queues=[f"{lq['metadata']['namespace']}/{lq['metadata']['name']}" for lq in lqs
                              if (lq.get("spec") or {}).get("clusterQueue") == cq["metadata"]["name"]]))
        cohorts = []  # Kueue Cohort objects: a parent and quota of their own (hierarchical cohorts)
        for co in self.store.list(WL_API, "Cohort"):
            spec = co.get("spec") or {}
            groups, blim, llim = _resource_groups(spec)
            own: dict[str, dict[str, float]] = {}
            for group in groups:  # a Cohort's quota is not split into groups
                for flavor, res in group.items():
                    own.setdefault(flavor, {}).update(res)
            cohorts.append(Cohort(co["metadata"]["name"], own, parent=spec.get("parentName") or None,
                                  borrowing_limit=blim or None, lending_limit=llim or None))
        self._engine = Engine(queues, cohorts, priorities=prios, default_priority=0,
                              requeue_delay_s=self.requeue_batch_s)
        for wl in self.store.list(WL_API, "Workload"):
            w = self._engine_workload(wl)
            if w is None or _is_true(wl, "Finished") or (wl.get("spec") or {}).get("active") is False:
                continue
            if _backing_off(wl):  # back in the queue at requeueAt
                self.changes.at("requeue", _wkey(wl), _requeue_at(wl))
                continue
            try:
                if _is_true(wl, "QuotaReserved"):
                    self._engine.restore_admitted(w, {  # the flavors Kueue wrote at admission
                        a["name"]: a.get("flavors") or {} for a in
                        ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []})
                    self._max_exec_timer(wl)
                    if self._waits_for_pods(wl) and self.pods_ready_timeout_s is not None:
                        admitted = _cond_time(wl, "Admitted") or time.time()
                        self.changes.at("ready", _wkey(wl), admitted + self.pods_ready_timeout_s)
                else:
                    self._engine.add(w)
            except GpuJobsError:
                pass

    def _pod_requests(self, wl: dict, podset: dict) -> dict[str, Decimal]:
        """One pod's requests as Kueue counts them: the template with its RuntimeClass's overhead
        and its namespace's LimitRange defaults (rules.with_runtime_class_overhead,
        rules.with_limit_range_defaults)."""
        ranges = self.store.list("v1", "LimitRange", wl["metadata"]["namespace"])
        tmpl = rules.with_runtime_class_overhead(podset.get("template") or {},
                                                 self.store.list("node.k8s.io/v1", "RuntimeClass"))
        return rules.pod_requests(rules.with_limit_range_defaults(tmpl, ranges))

    def _engine_workload(self, wl: dict, created: float | None = None) -> Workload | None:
        spec = wl.get("spec") or {}
        key = f"{wl['metadata']['namespace']}/{spec.get('queueName', '')}"
        if self._engine is None or key not in self._engine.queue_names:
            return None
        covered = self._covered.get(self._engine.cluster_queue_of(key), set())
        # pods a job integration marked done (status.reclaimablePods) need no quota: kueue v0.17
        # pkg/workload podSetsCountsAfterReclaim (the ReclaimablePods gate, on by default)
        done = {r.get("name"): int(r.get("count") or 0) for r in (wl.get("status") or {}).get("reclaimablePods") or []}
        podsets = [PodSet(ps["name"], max(0, int(ps.get("count", 1)) - done.get(ps["name"], 0)),
                          {r: float(a) for r, a in self._pod_requests(wl, ps).items() if r in covered})
                   for ps in spec.get("podSets") or []]
        created = _ts(wl) if created is None else created
        return Workload(_wkey(wl), key, podsets, priority=int(spec.get("priority") or 0), created=created)

    def _kueue_job(self, job: dict) -> None:
        md = job["metadata"]
        ns = md["namespace"]
        wls = [w for w in self.store.list(WL_API, "Workload", ns, f"{JOB_UID}={md['uid']}")]
        if md.get("deletionTimestamp"):
            return
        if not wls:
            if _is_finished(job):
                return
            if not get_suspend(job):  # the webhook suspends managed jobs
                self.store.mutate(job["apiVersion"], job["kind"], md["name"], ns, lambda o: set_suspend(o, True))
            self._create_workload(job)
            return
        wl = wls[0]
        if _is_finished(job) and not _is_true(wl, "Finished"):
            ok = _kind_succeeded(job)

            def fin(o: dict) -> None:
                _cond(o, "Finished", "True", "Succeeded" if ok else "Failed",
                      "Job finished successfully" if ok else "Job failed")
            self.store.mutate(WL_API, "Workload", wl["metadata"]["name"], ns, fin)
            self.changes.cancel(_wkey(wl))
            if self._engine is not None:
                self._engine.finish(_wkey(wl))
            return
        if _is_true(wl, "Admitted") and not _is_true(wl, "PodsReady"):
            pods = self._pods_of(job)
            expected = sum(int(p.get("count", 1)) for p in wl["spec"]["podSets"] if p["name"] != "submitter")
            if pods and rules.pods_ready(job, pods, expected):
                self.store.mutate(WL_API, "Workload", wl["metadata"]["name"], ns,
                                  lambda o: _cond(o, "PodsReady", "True", "Started", "All pods reached readiness"))
                self.changes.cancel(_wkey(wl), "ready")

    def _create_workload(self, job: dict) -> None:
        md = job["metadata"]
        labels = md.get("labels") or {}
        prio_name = labels.get(PRIO_LABEL)
        prio = None
        if prio_name:
            wpc = self.store.get(WL_API, "WorkloadPriorityClass", prio_name)
            if wpc is None:
                self.store.create({"apiVersion": "v1", "kind": "Event", "metadata": {
                    "generateName": md["name"] + ".", "namespace": md["namespace"]},
                    "type": "Warning", "reason": "WorkloadPriorityClassNotFound",
                    "message": f'workloadPriorityClass "{prio_name}" not found',
                    "involvedObject": {"kind": job["kind"], "name": md["name"], "uid": md["uid"]}})
                return
            prio = int(wpc.get("value", 0))
        wl = self.store.create(workload_for(job, prio, lambda api, kind, name: self.store.get(api, kind, name)))
        w = self._engine_workload(wl)
        reason, msg = "Misconfigured", f"LocalQueue {labels[QUEUE_LABEL]} doesn't exist"
        if w is not None:
            try:
                self._engine.add(w)  # type: ignore[union-attr]
                reason, msg = ("WaitingForQuota" if self.new_pending_reasons else "Pending"), \
                    "couldn't assign flavors to pod sets: insufficient unused quota"
            except GpuJobsError as exc:
                reason, msg = ("ExceedsMaxQuota" if self.new_pending_reasons else "Inadmissible"), str(exc)
        self.store.mutate(WL_API, "Workload", wl["metadata"]["name"], md["namespace"],
                          lambda o: _cond(o, "QuotaReserved", "False", reason, msg))

    def _schedule(self) -> None:
        if self._engine is None:
            return
        d = self._engine.schedule()
        eng = self._engine
        if (due := eng.requeue_due()) is not None and any(eng.pending_counts(q)[1] for q in eng.queue_names):
            self.changes.at("requeue-batch", "", due)  # a pass when the inadmissible ones are back
        for adm in d.admitted:
            ns, name = adm.id.split("/", 1)

            def admit(o: dict, adm: Any = adm) -> None:
                st = o.setdefault("status", {})
                st["admission"] = {"clusterQueue": adm.cluster_queue, "podSetAssignments": [
                    {"name": ps["name"], "count": ps.get("count", 1),
                     "flavors": dict(adm.flavors.get(ps["name"]) or {}),
                     "resourceUsage": {r: _quantity(a * int(ps.get("count", 1)))
                                       for r, a in self._pod_requests(o, ps).items()
                                       if r in (adm.flavors.get(ps["name"]) or {})}}
                    for ps in o["spec"]["podSets"]]}
                _cond(o, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {adm.cluster_queue}")
                _cond(o, "Admitted", "True", "Admitted", "The workload is admitted")
                _cond(o, "PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded")
                # Kueue's SetQuotaReservation: an earlier Evicted/Preempted turns False with
                # reason QuotaReserved and "Previously: <message>"; Requeued is left as it was
                for c in st["conditions"]:
                    if c["type"] in ("Evicted", "Preempted") and c.get("status") == "True":
                        _cond(o, c["type"], "False", "QuotaReserved", "Previously: " + c.get("message", ""))
            wl = self.store.mutate(WL_API, "Workload", name, ns, admit)
            if wl is not None:
                self._set_job_suspend(wl, False)
                self._max_exec_timer(wl)
                if self.pods_ready_timeout_s is not None:
                    self.changes.at("ready", adm.id, time.time() + self.pods_ready_timeout_s)
        for victim, by in d.preempted:
            ns, name = victim.split("/", 1)
            by_ns, by_name = by.split("/", 1)  # the preemptor may be of another namespace
            by_wl = self.store.get(WL_API, "Workload", by_name, by_ns) or {"metadata": {}}
            reason = d.reasons.get(victim, "InClusterQueue")
            msg = (f"Preempted to accommodate a workload (UID: {by_wl['metadata'].get('uid', '')}, JobUID: "
                   f"{(by_wl['metadata'].get('labels') or {}).get(JOB_UID, '')}) due to "
                   f"{_PREEMPTION_WHY.get(reason, 'prioritization in the ClusterQueue')}")

            def evict(o: dict, msg: str = msg, reason: str = reason) -> None:
                _evict(o, "Preempted", msg)
                _cond(o, "Preempted", "True", reason, msg)
            wl = self.store.mutate(WL_API, "Workload", name, ns, evict)
            if wl is not None:
                self._set_job_suspend(wl, True)
                self._evicting[victim] = time.time()
                self.changes.cancel(victim, "ready")

    def _finish_evictions(self) -> None:
        """Once an evicted job's pods are gone: clear the reservation; a preempted one is requeued
        (Requeued=True), a timed-out one backs off until requeueAt (Requeued=False)."""
        for wid, since in list(self._evicting.items()):
            ns, name = wid.split("/", 1)
            wl = self.store.get(WL_API, "Workload", name, ns)
            if wl is None:
                self._evicting.pop(wid)
                continue
            owner = (wl["metadata"].get("ownerReferences") or [{}])[0]
            pods = self.store.list("v1", "Pod", ns, f"sim.gpujobs.dev/owner-uid={owner.get('uid')}")
            if pods or time.time() - since < self.requeue_delay:
                continue
            self._evicting.pop(wid)
            ev = _condition(wl, "Evicted")
            reason = ev.get("reason", "Preempted")
            preempted = reason == "Preempted"

            def requeue(o: dict) -> None:
                o["status"].pop("admission", None)
                _cond(o, "QuotaReserved", "False", "Pending",
                      "The workload was evicted and requeued" if preempted else ev.get("message", ""))
                _cond(o, "Admitted", "False", "NoReservation", "The workload has no reservation")
                # Kueue requeues at once after a preemption; a PodsReadyTimeout backs off first
                _cond(o, "Requeued", "True" if preempted else "False", reason,
                      "Preempted; requeued" if preempted else ev.get("message", ""))
                _cond(o, "PodsReady", "False", "WaitForStart", "")
            wl = self.store.mutate(WL_API, "Workload", name, ns, requeue)
            if self._engine is not None:
                if preempted:
                    self._engine.requeue(wid)
                else:
                    self._engine.remove(wid)  # quota freed; back in the queue after the backoff
            if wl is not None and _backing_off(wl):
                self.changes.at("requeue", wid, _requeue_at(wl))

    # ------------------------------------------------------------ waitForPodsReady
    def _waits_for_pods(self, wl: dict) -> bool:
        """Admitted, its pods not all ready, not evicted or inactive: the timeout counts."""
        return (self.pods_ready_timeout_s is not None and _is_true(wl, "Admitted")
                and not any(_is_true(wl, t) for t in ("PodsReady", "Evicted", "Finished"))
                and (wl.get("spec") or {}).get("active") is not False)

    def _fire_timers(self) -> None:
        """Kueue's timed steps whose time has come: PodsReady timeouts, ends of backoff, the
        requeue batch period's end (the pass's schedule() does that one)."""
        for what, wid in self.changes.take_due():
            if what == "requeue-batch":  # this pass's schedule() puts them back
                continue
            if what == "deadline":  # an operator's own activeDeadlineSeconds (deadlines.py): look again
                api, kind, jns, jname = wid.split("|")
                self.changes.mark_job((api, kind, jns, jname))
                continue
            ns, name = wid.split("/", 1)
            try:
                wl = self.store.get(WL_API, "Workload", name, ns)
                if wl is not None:
                    {"ready": self._pods_ready_timeout, "maxexec": self._max_exec_exceeded}.get(
                        what, self._backoff_finished)(wl)
            except (ApiError, GpuJobsError, KeyError, ValueError) as exc:
                self.errors.append(exc)
                self.changes.at(what, wid, time.time() + 0.05)

    # ------------------------------------------------------------ maximum execution time
    def _max_exec_timer(self, wl: dict) -> None:
        """kueue@v0.19.2 pkg/controller/core/workload_controller.go reconcileMaxExecutionTime: the
        time left is spec.maximumExecutionTimeSeconds minus status.accumulatedPastExecutionTimeSeconds,
        counted from the Admitted condition's lastTransitionTime (admission, not the job's start)."""
        limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
        if limit is None or not _is_true(wl, "Admitted"):
            return
        past = int((wl.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
        admitted = _cond_time(wl, "Admitted") or time.time()
        self.changes.at("maxexec", _wkey(wl), admitted + int(limit) - past)

    def _max_exec_exceeded(self, wl: dict) -> None:
        """Time is up: DeactivationTarget (reason MaximumExecutionTimeExceeded), then the Workload
        is deactivated (spec.active false) and evicted (reason Deactivated, underlying cause
        MaximumExecutionTimeExceeded) and its job suspended (workload_controller.go; pkg/workload
        SetDeactivationTarget); each operator then deletes the job's pods as it does on suspend."""
        if not _is_true(wl, "Admitted") or _is_true(wl, "Finished") or (wl.get("spec") or {}).get("active") is False:
            return

        def deactivate(o: dict) -> None:
            _cond(o, "DeactivationTarget", "True", "MaximumExecutionTimeExceeded", "exceeding the maximum execution time")
            o["spec"]["active"] = False
            o["status"].pop("accumulatedPastExecutionTimeSeconds", None)
            _evict(o, "Deactivated", "The workload is deactivated due to exceeding the maximum execution time",
                   cause="MaximumExecutionTimeExceeded")
        new = self.store.mutate(WL_API, "Workload", wl["metadata"]["name"], wl["metadata"]["namespace"], deactivate)
        if new is not None:
            self._set_job_suspend(new, True)
            self._evicting[_wkey(wl)] = time.time()

    def _pods_ready_timeout(self, wl: dict) -> None:
        """Evict with PodsReadyTimeout and back off (requeueState), or deactivate once the
        requeue count would pass ``backoff_limit`` (Kueue's reconcileNotReadyTimeout)."""
        if not self._waits_for_pods(wl):
            return
        md = wl["metadata"]
        wid = _wkey(wl)
        count = int(((wl.get("status") or {}).get("requeueState") or {}).get("count") or 0) + 1
        if self.backoff_limit is not None and count > self.backoff_limit:
            def evict(o: dict) -> None:
                o["spec"]["active"] = False
                o["status"].pop("requeueState", None)
                _evict(o, "Deactivated", "The workload is deactivated due to exceeding the maximum number "
                       "of re-queuing retries", cause="RequeuingLimitExceeded")
        else:
            backoff = min(self.backoff_base_s * 2 ** (count - 1), self.backoff_max_s)
            at = _iso(math.ceil(time.time() + backoff))  # metav1.Time has whole seconds

            def evict(o: dict) -> None:
                o["status"]["requeueState"] = {"count": count, "requeueAt": at}
                _evict(o, "PodsReadyTimeout", f"Exceeded the PodsReady timeout {wid}", cause="WaitForStart")
        new = self.store.mutate(WL_API, "Workload", md["name"], md["namespace"], evict)
        if new is not None:
            self._set_job_suspend(new, True)
            self._evicting[wid] = time.time()

    def _backoff_finished(self, wl: dict) -> None:
        """requeueAt reached: Requeued=True (BackoffFinished), back in the queue, ordered by
        its eviction time (requeuingStrategy.timestamp: Eviction)."""
        if not _backing_off(wl) or (wl.get("spec") or {}).get("active") is False or _is_true(wl, "Finished"):
            return
        if _requeue_at(wl) > time.time():  # moved meanwhile
            self.changes.at("requeue", _wkey(wl), _requeue_at(wl))
            return

        def done(o: dict) -> None:
            o["status"].setdefault("requeueState", {}).pop("requeueAt", None)
            _cond(o, "Requeued", "True", "BackoffFinished", "The workload backoff was finished")
        md = wl["metadata"]
        new = self.store.mutate(WL_API, "Workload", md["name"], md["namespace"], done)
        w = new and self._engine_workload(new, created=_cond_time(new, "Evicted"))
        if w is not None and w.id not in self._engine:  # type: ignore[operator]
            self._engine.add(w)  # type: ignore[union-attr]

    def _set_job_suspend(self, wl: dict, value: bool) -> None:
        owner = (wl["metadata"].get("ownerReferences") or [None])[0]
        if owner:
            self.store.mutate(owner["apiVersion"], owner["kind"], owner["name"], wl["metadata"]["namespace"],
                              lambda o: set_suspend(o, value))

    def visibility(self, scope: str, namespace: str | None, name: str) -> list[dict] | None:
        """Pending workloads of a LocalQueue / ClusterQueue, positions 0-based (Kueue's API)."""
        eng = self._engine
        if eng is None:
            return None
        key = f"{namespace}/{name}" if scope == "localqueue" else name
        if key not in eng.queue_names:
            return None
        cq = eng.cluster_queue_of(key)
        cq_pos = eng.positions(cq)
        lq_pos = eng.positions(key) if scope == "localqueue" else None
        items = []
        for wid, _pos in sorted((lq_pos or cq_pos).items(), key=lambda kv: kv[1]):
            wns, wname = wid.split("/", 1)
            wl = self.store.get(WL_API, "Workload", wname, wns)
            if wl is None:
                continue
            lq_name = (wl.get("spec") or {}).get("queueName", "")
            items.append({"metadata": {"name": wname, "namespace": wns,
                                       "creationTimestamp": wl["metadata"]["creationTimestamp"],
                                       "ownerReferences": wl["metadata"].get("ownerReferences", [])},
                          "priority": (wl.get("spec") or {}).get("priority", 0), "localQueueName": lq_name,
                          "positionInClusterQueue": cq_pos.get(wid, 1) - 1,
                          "positionInLocalQueue": (eng.positions(f"{wns}/{lq_name}").get(wid, 1) - 1)})
        return items


def workload_name(kind: str, api_version: str, name: str, uid: str) -> str:
    """``<kind>-<name>-<hash>``: the first 5 hex digits of sha1("Kind\\nGroup\\nname\\nuid"), the prefix
    truncated to 253 - 6 characters (kueue v0.17.0 pkg/controller/jobframework/workload_names.go,
    GenerateWorkloadNameWithExtra, getHash; ShortWorkloadNames off)."""
    group = api_version.rpartition("/")[0]
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()[:5]
    return f"{(kind.lower() + '-' + name)[:253 - 6]}-{digest}"


def workload_for(job: dict, priority: int | None = None, lookup: Any = None) -> dict:
    """The Workload Kueue's job integration creates for ``job`` (kueue.x-k8s.io/v1beta2: name from
    :func:`workload_name`, owner reference to the job, ``kueue.x-k8s.io/job-uid`` label, podSets
    from :func:`gpujobs_sim.rules.pod_sets`; with a priority-class label, priorityClassRef and the
    class's value as ``priority``; a max-exec-time label as ``maximumExecutionTimeSeconds``
    (kueue@ff69552 pkg/controller/constants/constants.go, site/data/labels_and_annotations.yaml))."""
    md = job["metadata"]
    labels = md.get("labels") or {}
    uid = md.get("uid") or "00000000-0000-0000-0000-000000000000"
    spec: dict[str, Any] = {"queueName": labels.get(QUEUE_LABEL, ""), "active": True, "podSets": [
        {"name": ps.name, "count": ps.count, "template": ps.template} for ps in rules.pod_sets(job, lookup)]}
    if labels.get(PRIO_LABEL) and priority is not None:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                    "name": labels[PRIO_LABEL]}
    spec["priority"] = priority or 0
    if str(labels.get(MAX_EXEC_LABEL, "")).isdigit():
        # the label's value goes to the Workload's spec.maximumExecutionTimeSeconds (kueue@ff69552
        # site/data/labels_and_annotations.yaml, kueue.x-k8s.io/max-exec-time-seconds)
        spec["maximumExecutionTimeSeconds"] = int(labels[MAX_EXEC_LABEL])
    return {"apiVersion": WL_API, "kind": "Workload", "metadata": {
        "name": workload_name(job["kind"], job["apiVersion"], md["name"], uid),
        "namespace": md.get("namespace", "default"),
        "labels": {JOB_UID: uid},
        "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"], "name": md["name"],
                             "uid": uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec}


def _resource_groups(spec: dict) -> tuple[list[dict[str, dict[str, float]]], dict, dict]:
    """A ClusterQueue's or Cohort's spec.resourceGroups: ([{flavor: {resource: nominal}} per group],
    {flavor: {resource: borrowingLimit}}, {flavor: {resource: lendingLimit}})."""
    groups: list[dict[str, dict[str, float]]] = []
    blim: dict[str, dict[str, float]] = {}
    llim: dict[str, dict[str, float]] = {}
    for rg in spec.get("resourceGroups") or []:
        group: dict[str, dict[str, float]] = {}
        for fl in rg.get("flavors") or []:
            for r in fl.get("resources") or []:
                group.setdefault(fl["name"], {})[r["name"]] = float(quantity(r["nominalQuota"]))
                for key, lim in (("borrowingLimit", blim), ("lendingLimit", llim)):
                    if r.get(key) is not None:
                        lim.setdefault(fl["name"], {})[r["name"]] = float(quantity(r[key]))
        groups.append(group)
    return groups, blim, llim


def _wkey(wl: dict) -> str:
    return f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"


def _evict(o: dict, reason: str, message: str, cause: str = "") -> None:
    """Evicted=True and the eviction counted in schedulingStats (by reason and cause)."""
    _cond(o, "Evicted", "True", reason, message)
    stats = o["status"].setdefault("schedulingStats", {}).setdefault("evictions", [])
    for e in stats:
        if e.get("reason") == reason and e.get("underlyingCause", "") == cause:
            e["count"] = int(e.get("count", 0)) + 1
            break
    else:
        stats.append({"reason": reason, "underlyingCause": cause, "count": 1})


def _backing_off(wl: dict) -> bool:
    """Evicted for PodsReadyTimeout, quota released, waiting for requeueAt (Requeued=False)."""
    c = _condition(wl, "Requeued")
    return c.get("status") == "False" and c.get("reason") == "PodsReadyTimeout" and not _is_true(wl, "QuotaReserved")


def _requeue_at(wl: dict) -> float:
    return parse_time(((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")) or 0.0


def _cond_time(wl: dict, type_: str) -> float | None:
    return parse_time(_condition(wl, type_).get("lastTransitionTime"))


def _iso(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ts(obj: dict) -> float:
    return parse_time(obj["metadata"].get("creationTimestamp")) or 0.0


# Kueue preemption.HumanReadablePreemptionReasons
_PREEMPTION_WHY = {"InClusterQueue": "prioritization in the ClusterQueue",
                   "InCohortReclamation": "reclamation within the cohort",
                   "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing"}


def _quantity(v: Decimal) -> str:
    """A quantity as the API writes one: whole units, else millis."""
    return str(int(v)) if v == int(v) else f"{int(v * 1000)}m"


def _is_finished(job: dict) -> bool:
    return rules.outcome(job).finished


def _kind_succeeded(job: dict) -> bool:
    return rules.outcome(job).succeeded
