"""What the simulated controllers must look at again, worked out from the store's events.

The controllers do not rescan (and copy) the whole store on a timer: every store event marks
what it can affect. A job kind's event marks that job; a Pod's or Workload's (or a wrapped
job's) marks the jobs named in its ownerReferences; a Kueue queue object's asks for the
admission engine to be rebuilt and every job to be looked at once; a Pod's, ConfigMap's or
Secret's asks the kubelet to look at its pods. Time only matters while pods wait to start
(the kubelet's start delay, volumes, slots): then the kubelet is polled, briefly fast; and for
the few deadlines Kueue keeps (a PodsReady timeout, the end of a requeue backoff): each is one
timer, and the thread sleeps until the nearest one.
"""
from __future__ import annotations

import time
from typing import Iterable

from .store import Event

__all__ = ["Changes", "JobRef"]

JobRef = tuple[str, str, str, str]
"""(apiVersion, kind, namespace, name) of a job object."""

QUEUE_KINDS = {("kueue.x-k8s.io", k) for k in ("ClusterQueue", "LocalQueue", "WorkloadPriorityClass",
                                                 "ResourceFlavor", "Cohort")} | {("", "LimitRange"),
                                                                                ("node.k8s.io", "RuntimeClass")}
OWNED_KINDS = {("", "Pod"), ("kueue.x-k8s.io", "Workload")}
KUBELET_KINDS = {("", "Pod"), ("", "ConfigMap"), ("", "Secret"), ("", "PersistentVolumeClaim")}


class Changes:
    """Dirty marks from store events (call :meth:`note` from one thread, the controllers')."""

    FAST_POLL_S, SLOW_POLL_S, FAST_FOR_S = 0.05, 0.5, 1.0

    def __init__(self, job_kinds: Iterable[tuple[str, str]]):
        self.job_kinds = set(job_kinds)
        self.queues = True  # rebuild the admission engine
        self.all_jobs = True  # look at every job (start, queue configuration changed)
        self.kubelet = True  # the kubelet should look at its pods
        self._jobs: dict[tuple[str, str, str, str], str] = {}  # (group, kind, ns, name) -> apiVersion
        self._pending_pods: set[str] = set()  # uids of Pending pods
        self._pod_changed = 0.0
        self._kubelet_ticked = 0.0
        self._timers: dict[tuple[str, str], float] = {}  # (what, key) -> wall-clock time due

    def note(self, ev: Event) -> None:
        kind = (ev.res.group, ev.res.kind)
        md = ev.obj.get("metadata") or {}
        ns = md.get("namespace") or ""
        if kind in QUEUE_KINDS:
            self.queues = self.all_jobs = True
        if kind == ("kueue.x-k8s.io", "Workload") and (ev.obj.get("status") or {}).get("reclaimablePods"):
            self.queues = True  # its pods that are done give their quota back (kueue.py _engine_workload)
        if kind in self.job_kinds:
            self._mark(ev.obj.get("apiVersion", ""), ev.res.kind, ns, md.get("name", ""))
        if kind in OWNED_KINDS or kind in self.job_kinds:  # pods, workloads, AppWrapper components
            for o in md.get("ownerReferences") or ():
                self._mark(o.get("apiVersion", ""), o.get("kind", ""), ns, o.get("name", ""))
        labels = md.get("labels") or {}
        if kind == ("", "Pod") and labels.get("ray.io/originated-from-crd") == "RayJob":
            # a KubeRay submitter Job's pod: KubeRay owns the Job (whose status follows the pod)
            self._mark("ray.io/v1", "RayJob", ns, labels.get("ray.io/originated-from-cr-name", ""))
        if kind == ("", "Pod") and labels.get("training.kubeflow.org/operator-name") == "mpi-operator":
            # an MPIJob's launcher pod is owned by its batch Job, which the MPI Operator watches
            self._mark("kubeflow.org/v2beta1", "MPIJob", ns, labels.get("training.kubeflow.org/job-name", ""))
        if kind in KUBELET_KINDS:
            self.kubelet = True
        if kind == ("", "Pod"):
            self._pod_changed = time.monotonic()
            phase = (ev.obj.get("status") or {}).get("phase", "Pending")
            if ev.type != "DELETED" and phase == "Pending" and not md.get("deletionTimestamp"):
                self._pending_pods.add(md.get("uid", ""))
            else:
                self._pending_pods.discard(md.get("uid", ""))

    def _mark(self, api_version: str, kind: str, ns: str, name: str) -> None:
        group = api_version.rpartition("/")[0]
        if (group, kind) in self.job_kinds and name:
            self._jobs[(group, kind, ns, name)] = api_version

    def mark_job(self, ref: JobRef) -> None:
        """Look at this job again (a reconcile of it failed)."""
        self._mark(*ref)

    def take_jobs(self) -> list[JobRef]:
        """The marked jobs, unmarked."""
        out = [(av, kind, ns, name) for (_, kind, ns, name), av in self._jobs.items()]
        self._jobs.clear()
        return out

    @property
    def jobs_marked(self) -> bool:
        return bool(self._jobs) or self.all_jobs

    def kubelet_due(self) -> bool:
        """Whether the kubelet should tick now: a pod/volume changed, or pods wait to start."""
        if self.kubelet:
            return True
        return bool(self._pending_pods) and time.monotonic() - self._kubelet_ticked >= self._poll_s()

    def kubelet_ticked(self) -> None:
        self.kubelet = False
        self._kubelet_ticked = time.monotonic()

    def _poll_s(self) -> float:
        recent = time.monotonic() - self._pod_changed < self.FAST_FOR_S
        return self.FAST_POLL_S if recent else self.SLOW_POLL_S

    # ------------------------------------------------------------ timers
    def at(self, what: str, key: str, when: float) -> None:
        """Wake the controllers at wall-clock ``when`` to handle ``(what, key)`` (replaces an
        earlier timer for the same pair)."""
        self._timers[(what, key)] = when

    def cancel(self, key: str, what: str | None = None) -> None:
        """Drop ``key``'s timer ``what`` (all of its timers when None)."""
        for k in [k for k in self._timers if k[1] == key and what in (None, k[0])]:
            del self._timers[k]

    def take_due(self) -> list[tuple[str, str]]:
        """The (what, key) pairs whose time has come, earliest first, removed."""
        now = time.time()
        due = sorted((t, k) for k, t in self._timers.items() if t <= now)
        for _, k in due:
            del self._timers[k]
        return [k for _, k in due]

    @property
    def timers(self) -> dict[tuple[str, str], float]:
        return dict(self._timers)

    def wait_s(self) -> float | None:
        """How long the controllers may sleep with no event (None: until one comes)."""
        if self.jobs_marked or self.queues or self.kubelet:
            return 0.0
        wait = None
        if self._pending_pods:
            wait = max(0.0, self._kubelet_ticked + self._poll_s() - time.monotonic())
        if self._timers:
            t = max(0.0, min(self._timers.values()) - time.time())
            wait = t if wait is None else min(wait, t)
        return wait
