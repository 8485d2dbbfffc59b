"""Reasons, expected starts and plans on Kubernetes, from the cluster's own objects.

The cluster's Kueue objects are read (read-only, see docs/rbac.yaml), translated into the
admission engine's model (:mod:`gpujobs.admission.model`) and a forecast
:class:`~gpujobs.admission.forecast.Snapshot`, and handed to
:mod:`gpujobs.admission.forecast`: the same forward simulation the local backend uses.

What is read (kept by cluster-wide watches on the status hub: a refresh makes no request):

- ClusterQueues, Cohorts, ResourceFlavors, WorkloadPriorityClasses (cluster-scoped);
- LocalQueues and Workloads of every namespace (cluster-wide), else this namespace's;
- for gpujobs' own jobs: the job object (declared limit: the ``kueue.x-k8s.io/max-exec-time-seconds``
  label, ``activeDeadlineSeconds``) and the progress already read from its pods' logs.

Every other workload counts with what the cluster says about it: its Workload's podSets
(requests, count), priority, creation time, admission (flavors), eviction conditions and
``spec.maximumExecutionTimeSeconds`` (less ``status.accumulatedPastExecutionTimeSeconds``).

Scopes (``KueueObjects.scope``), by what this user may read:

- ``cluster``: everything above: the full simulation;
- ``namespace``: ClusterQueues readable, Workloads only in this namespace: quota that other
  namespaces hold (``ClusterQueue.status.flavorsReservation`` less what this namespace holds)
  counts as held by jobs whose end is unknown, so starts that depend on it are "not before";
  pending workloads of other namespaces ahead in the ClusterQueue (the visibility API's
  ``clusterqueues/pendingworkloads``, when readable) make the start a "not before" too;
- ``none``: ClusterQueues not readable: no simulation; a queued job's reason is Kueue's own
  pending reason in words, its position the visibility API's, ``expected_start`` None.

See docs/forecast.md ("Kubernetes").
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ....admission.forecast import Forecast, Job, StartErrors, plan
from ....admission.forecast.calibration import FirstForecasts
from ....admission.model import Workload
from ....errors import BackendUnavailable, Fix, SpecError
from ....status import JobStatus, Plan
from . import mapping as status_map
from ..cluster import Cluster
from .kueue_model import NOT_ALL, clean_forecast, container_defaults, forecasts, podsets, \
    runtime_overheads, sharing_quota_with, translate
from .kueue_read import FORBIDDEN, KINDS_READ, KueueObjects, group_version, http_lister, read_cluster
from .informer import wait_synced

__all__ = ["KubeForecasts", "for_backend", "NO_READ", "NOT_ALL", "forecasts", "read_cluster"]

REFRESH_S = 5.0  # recompute at least this often while asked (time-left texts move)
MIN_INTERVAL_S = 1.0  # at most once a second after Workload changes
NO_READ = ("no forecast: this user may not read ClusterQueues (cluster-scoped); the reason is "
           "Kueue's own and the position the visibility API's (grant the gpujobs-forecast-reader "
           "ClusterRole of docs/rbac.yaml for forecasts)")


# ------------------------------------------------------------------ the backend's cache
class KubeForecasts:
    """Forecasts for one namespace of one backend, refreshed at most every ``MIN_INTERVAL_S`` after
    a Workload changed (the status hub counts changes) and every ``REFRESH_S`` while asked."""

    def __init__(self, backend: Cluster, namespace: str, hub: Callable[[], Any]):
        self.backend, self.namespace = backend, namespace
        self._hub = hub  # the namespace's status hub (live.hub_for: passed in, no import circle)
        self._lock = threading.Lock()
        self._cache: dict[str, Forecast] = {}
        self._scope = "cluster"
        self._at = -1e9
        self._gen: int | None = None
        self._misses: set[str] = set()
        self.errors: list[BaseException] = []
        self.start_errors = StartErrors()  # first forecasts against admissions: the ranges
        self.firsts = FirstForecasts(self.start_errors)

    def _informers(self) -> dict[str, Any]:
        hub = self._hub()
        return {p: hub.cluster_informer((*group_version(p), p)) for p in KINDS_READ}

    def ready(self) -> bool:
        """Whether the cluster-wide watches have listed once (starts them when not yet)."""
        return all(inf.synced.is_set() for inf in self._informers().values())

    def cluster(self, timeout: float = 30.0) -> KueueObjects:
        """The cluster's Kueue objects from cluster-wide watches (the status hub keeps them: after
        the first list, a read costs no request); namespaced fallbacks are list calls."""
        hub = self._hub()
        infs = self._informers()
        wait_synced(infs.values(), timeout)
        http = http_lister(self.backend.api_client, self.backend.http_timeout)

        def lst(plural: str, namespace: str | None = None) -> list[dict] | str:
            if namespace is not None:
                return http(plural, namespace)
            inf = infs[plural]
            if inf.forbidden:
                return FORBIDDEN
            return [] if inf.missing else inf.items()
        c = read_cluster(self.backend.api_client, self.namespace, self.backend.http_timeout,
                         workloads=hub.workloads(), own_jobs=hub.own_jobs(), lister=lst)
        c.kueue_version = self.backend.admission_version()[0]
        return c

    def _progress_end(self, wid: str) -> float | None:
        from . import pod_metrics
        prog = pod_metrics.for_backend(self.backend).known_progress(wid)
        end = getattr(prog, "expected_end", None)
        return float(end) if end is not None else None

    def refresh(self, want: str | None = None, block: bool = True) -> dict[str, Forecast]:
        """The forecasts, recomputed first when due. ``block=False`` (the status watch's thread):
        never wait for the cluster-wide watches' first list; the cached answer meanwhile."""
        if not block and not self.ready():
            return self._cache
        with self._lock:
            hub = self._hub()
            gen = hub.workload_changes
            age = time.monotonic() - self._at
            new = want is not None and want not in self._cache and want not in self._misses
            if not (new or age > REFRESH_S or (gen != self._gen and age >= MIN_INTERVAL_S)):
                return self._cache
            try:
                c = self.cluster()
                self._scope = c.scope
                self._cache = forecasts(c, progress_end=self._progress_end, firsts=self.firsts)
            except Exception as exc:  # noqa: BLE001 - a forecast never breaks a status reply
                self._cache = {}
                self.errors = [*self.errors[-9:], exc]  # kept for diagnosis
            self._at, self._gen, self._misses = time.monotonic(), gen, set()
            if want is not None and want not in self._cache:
                self._misses.add(want)
            return self._cache

    def with_forecast(self, st: JobStatus, refresh: bool = True, block: bool = True) -> JobStatus:
        """``st`` (a queued job) with reason, blocked_by, expected_start and its basis. Kueue's own
        reason code stays in ``extra['kueue_reason']``. Jobs not waiting in a queue (no Workload
        yet, backing off after a PodsReady timeout, quota reserved) keep their status as it is."""
        if st.phase != "queued" or st.reason not in _WAITING:
            return st
        fc = (self.refresh(st.job_id, block) if refresh else self._cache).get(st.job_id)
        extra = dict(st.extra or {}, kueue_reason=st.reason)
        if fc is None:
            # nothing better: Kueue's pending reason in words (the status message already is)
            basis = NO_READ if self._scope == "none" else st.expected_start_basis
            return st.with_(reason=st.message or status_map.pending_message(st.reason, ""),
                            expected_start_basis=basis, extra=extra)
        if fc.not_before is not None:
            extra["not_before"] = fc.not_before  # kept where it was before the field existed
        return st.with_(reason=fc.reason, blocked_by=fc.blocked_by, expected_start=fc.expected_start,
                        expected_start_basis=fc.basis, not_before=fc.not_before,
                        expected_start_range=fc.expected_start_range, extra=extra)

    def plan(self, rendered: Any, queue: str, priority: str | None, max_runtime_s: float | None,
             grace_period_s: float, name: str) -> Plan:
        """The what-if for the rendered job: the same simulation with it added; nothing is created."""
        from ..render.podsets import pod_sets
        c = self.cluster()
        if c.scope == "none":
            raise BackendUnavailable(
                "cannot plan: this user may not read ClusterQueues (cluster-scoped), so the queue's quota "
                "is unknown; fix: ask the cluster admin to bind the read-only gpujobs-forecast-reader "
                "ClusterRole of docs/rbac.yaml, or submit and read job.status().reason")
        lq = f"{self.namespace}/{queue}"
        tr = translate(sharing_quota_with(c, lq), progress_end=self._progress_end)
        tr.snapshot.start_errors = self.start_errors
        cqn = next((q.name for q in tr.snapshot.queues if lq in q.local_queues), None)
        if cqn is None:
            known = sorted(q.split("/", 1)[1] for s in tr.snapshot.queues for q in s.local_queues
                           if q.startswith(f"{self.namespace}/"))
            raise SpecError("queue", f"no LocalQueue {queue!r} in namespace {self.namespace!r}; LocalQueues "
                            f"there: {', '.join(known) or 'none'}", Fix.set("queue", "NAME", "use one of them: {}"))
        covered = {r for g in next(q for q in tr.snapshot.queues if q.name == cqn).resource_groups or []
                   for res in g.values() for r in res}
        tmpl_sets = [{"name": ps.name, "count": ps.count, "template": ps.template} for ps in pod_sets(rendered.job)]
        prio: int | str | None = 0 if priority is None else priority
        if isinstance(prio, str) and prio not in c.priorities:
            raise SpecError("priority", f"no WorkloadPriorityClass {prio!r} (known: "
                            f"{', '.join(sorted(c.priorities)) or 'none'})",
                            "use one of them (kubectl get workloadpriorityclasses)")
        sets = podsets(tmpl_sets, covered, defaults=container_defaults(c.limit_ranges, self.namespace),
                       overheads=runtime_overheads(c.runtime_classes))  # as Kueue will count them
        w = Workload(f"{self.namespace}/(plan {name})", lq, sets,
                     priority=c.priorities.get(prio, 0) if isinstance(prio, str) else prio,
                     created=tr.snapshot.now)
        job = Job(w, name=f"(plan {name})", max_runtime_s=max_runtime_s, grace_period_s=grace_period_s)
        fc = plan(tr.snapshot, job)
        hidden = sum(1 for it in tr.hidden_ahead.get(cqn, ())
                     if int(it.get("priority") or 0) >= _prio_value(w.priority))
        fc = clean_forecast(tr, fc, hidden)
        position = fc.position
        return Plan(admit_now=fc.admit_now, position=position, preempts=fc.preempts,
                    expected_start=fc.expected_start, reason=fc.reason, basis=fc.basis,
                    blocked_by=fc.blocked_by, not_before=fc.not_before, queue=queue,
                    expected_start_range=fc.expected_start_range)


def _prio_value(p: int | str | None) -> int:
    return p if isinstance(p, int) else 0


#: Kueue reason codes of a job waiting in a queue (a pending or requeued Workload)
_WAITING = set(status_map.PENDING_REASONS) | {"Preempted", "BackoffFinished", "NodeFailures",
                                               "ClusterQueueStopped", "LocalQueueStopped"}


def for_backend(backend: Cluster, namespace: str, hub: Callable[[], Any]) -> KubeForecasts:
    """The backend's forecasts for ``namespace`` (made once, kept in its ClusterState), reading
    the namespace's status hub through ``hub`` (:func:`.live.forecasts_for` passes it)."""
    state = backend.state
    with state.lock:
        f = state.forecasts.get(namespace)
        if f is None:
            f = state.forecasts[namespace] = KubeForecasts(backend, namespace, hub)
        return f
