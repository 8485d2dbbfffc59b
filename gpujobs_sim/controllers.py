"""Simulated controllers: Kueue (kueue.py), Volcano, the job operators (MPI, Training, Trainer,
KubeRay, Volcano Job, AppWrapper, batch/v1 Job: operators.py and the modules it calls) and the kubelet,
reconciling the fake apiserver's store in one thread driven by its events.

Operators create pods (Pending -> Running -> Succeeded) and write each kind's status; Volcano
creates PodGroups (Pending/Inqueue/Running, running vs minMember).
"""
from __future__ import annotations

import collections
import queue
import threading
from typing import Any

from gpujobs.admission import Engine
from gpujobs.errors import GpuJobsError

from .changes import Changes, JobRef
from .kubelet import ANN_IDLE, ANN_PORT, ANN_RANK, ANN_ROLE, ANN_WORLD, Kubelet
from .kueue import FRAMEWORKS, KUEUE_KINDS, QUEUE_LABEL, REQUEUE_BATCH_PERIOD_S, Kueue
from .operators import operate
from .store import ApiError, Event

JOB_KINDS = {("kubeflow.org", "MPIJob"), ("kubeflow.org", "PyTorchJob"), ("trainer.kubeflow.org", "TrainJob"),
             ("ray.io", "RayJob"), ("batch.volcano.sh", "Job"), ("workload.codeflare.dev", "AppWrapper"),
             ("batch", "Job")}  # a user's batch/v1 Job (batch_job.py; the operators' own Jobs are theirs)


def _group(obj: dict) -> str:
    return obj.get("apiVersion", "").rpartition("/")[0]


class SimControllers(Kueue):
    """All simulated controllers in one reconcile thread, driven by store events: a pass looks
    only at what the events since the last one marked (:class:`~gpujobs_sim.changes.Changes`),
    and the thread sleeps while nothing changes (no timer rescans or copies the store)."""

    def __init__(self, server: Any, *, pod_slots: int | None = None, run_seconds: float = 0.3,
                 requeue_delay: float = 0.05, requeue_batch_s: float = REQUEUE_BATCH_PERIOD_S,
                 new_pending_reasons: bool = True,
                 pods_ready_timeout_s: float | None = None, backoff_base_s: float = 60.0,
                 backoff_max_s: float = 3600.0, backoff_limit: int | None = None,
                 disabled_integrations: tuple[str, ...] = ()):
        self.server, self.store = server, server.store
        # Kueue frameworks left out of integrations.frameworks: Kueue neither suspends those jobs
        # nor makes their Workloads (e.g. "kubeflow.org/pytorchjob", off in Kueue's default
        # configuration, kueue@ff69552 config/components/manager/controller_manager_config.yaml)
        self.disabled_integrations = set(disabled_integrations)
        # Kueue's waitForPodsReady (timeout; requeuingStrategy backoff*); None: off
        self.pods_ready_timeout_s = pods_ready_timeout_s
        self.backoff_base_s, self.backoff_max_s, self.backoff_limit = backoff_base_s, backoff_max_s, backoff_limit
        self.kubelet = Kubelet(server, slots=pod_slots, default_seconds=run_seconds)
        self.mpi_gang_scheduling = ""  # the MPI Operator's --gang-scheduling flag (mpi_operator.py)
        self.requeue_delay = requeue_delay
        # Kueue's requeueBatchPeriod: a BestEffortFIFO queue's inadmissible workloads go back to
        # its heap this long after quota is released (0: at once), as gpujobs' forecasts assume
        self.requeue_batch_s = requeue_batch_s
        self.new_pending_reasons = new_pending_reasons
        self._events: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None
        self.changes = Changes(JOB_KINDS)
        self.stats: collections.Counter = collections.Counter()  # passes, jobs, kubelet_ticks
        self._failed: list[JobRef] = []  # retried on the next pass
        self._evicting: dict[str, float] = {}
        self._ports = 29600
        self.errors: list[BaseException] = []
        server.visibility = self.visibility

    # ------------------------------------------------------------------ thread
    def start(self) -> "SimControllers":
        self._unsub = self.store.subscribe(self._events.put)
        self._thread = threading.Thread(target=self._loop, name="sim-controllers", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        self._stop.set()
        self._events.put(None)  # wake the thread
        if self._thread is not None:
            self._thread.join(5)
        self._unsub()
        return self.kubelet.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ev = self._events.get(timeout=self._wait_s())
            except queue.Empty:
                ev = None
            try:
                while True:
                    if ev is not None:
                        self._on_event(ev)
                    ev = self._events.get_nowait()
            except queue.Empty:
                pass
            except (ApiError, GpuJobsError, KeyError, ValueError) as exc:
                self.errors.append(exc)
            if self._stop.is_set():
                break
            try:
                self.reconcile()
            except (ApiError, GpuJobsError, KeyError, ValueError) as exc:
                self.errors.append(exc)
                self._stop.wait(0.05)  # no busy loop on a failure that repeats

    def _wait_s(self) -> float | None:
        """Seconds to sleep waiting for an event: None while nothing is due by time."""
        wait = self.changes.wait_s()
        if self._failed or self._evicting:
            wait = min(0.05 if wait is None else wait, 0.05)
        return wait

    def _on_event(self, ev: Event) -> None:
        res = ev.res
        self.changes.note(ev)
        if res.kind == "Pod" and not res.group and ev.type == "DELETED":
            md = ev.obj["metadata"]
            self.kubelet.on_pod_deleted(md["namespace"], md["name"])
        elif res.kind == "Pod" and not res.group and ev.obj["metadata"].get("deletionTimestamp"):
            self.kubelet.on_pod_terminating(ev.obj)  # a graceful DELETE (store.graceful)
        if res.kind == "Workload" and ev.type == "DELETED":
            self._on_workload_deleted(ev.obj)

    # ------------------------------------------------------------------ reconcile
    def reconcile(self) -> None:
        """One pass over the jobs the store's events marked since the last pass (copying only
        those), the admission engine's decisions, evictions, and the kubelet when due."""
        ch = self.changes
        self.stats["passes"] += 1
        if ch.queues:
            ch.queues = False
            self._rebuild_engine()
        if ch.all_jobs:
            ch.all_jobs = False
            for res in self.store.resources():
                if (res.group, res.kind) in JOB_KINDS:
                    for o in self.store.list_res(res)[0]:
                        ch.mark_job((o["apiVersion"], o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]))
        for ref in self._failed:
            ch.mark_job(ref)
        self._failed = []
        refs = ch.take_jobs()
        for ref in refs:
            self._for_job(ref, self._kueue_job, kueue=True)
        for ref in refs:
            # the Trainer (the Job controller) sees a new TrainJob (batch/v1 Job) suspended
            # (Suspended=True) before Kueue's scheduler admits it
            if ref[1] == "TrainJob" or (ref[1] == "Job" and ref[0].startswith("batch/")):
                self._for_job(ref, self._operate_suspended)
        self._fire_timers()
        self._schedule()
        self._finish_evictions()
        for ref in refs:
            self._for_job(ref, self._operate)
        self.stats["jobs"] += len(refs)
        if ch.kubelet_due():
            ch.kubelet_ticked()
            self.stats["kubelet_ticks"] += 1
            self.kubelet.tick()

    def _for_job(self, ref: JobRef, fn: Any, kueue: bool = False) -> None:
        """``fn(job)`` on the job's current state (skipped once it is gone); a failure is
        recorded in ``errors`` and the job looked at again on the next pass."""
        try:
            job = self.store.get(ref[0], ref[1], ref[3], ref[2])
            if job is None or kueue and not ((_group(job), job["kind"]) in KUEUE_KINDS and
                                             (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)):
                return
            if kueue and FRAMEWORKS.get((_group(job), job["kind"])) in self.disabled_integrations:
                return
            fn(job)
        except (ApiError, GpuJobsError, KeyError, ValueError) as exc:
            if isinstance(exc, ApiError) and exc.code == 404:
                return  # the job (or its kind) went away meanwhile
            self.errors.append(exc)
            if ref not in self._failed:
                self._failed.append(ref)


    # ------------------------------------------------------------------ operators
    def _pods_of(self, job: dict) -> list[dict]:
        return self.store.list("v1", "Pod", job["metadata"]["namespace"],
                               f"sim.gpujobs.dev/owner-uid={job['metadata']['uid']}")

    def _operate(self, job: dict) -> None:
        operate(self, job)

    def _operate_suspended(self, job: dict) -> None:
        from .conditions import get_suspend
        if get_suspend(job):
            operate(self, job)

    def next_port(self) -> int:
        """A free local port for a job's rendezvous (pods share this machine; so may other test runs)."""
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


__all__ = ["SimControllers", "ANN_IDLE", "ANN_PORT", "ANN_RANK", "ANN_ROLE",
           "ANN_WORLD"]
