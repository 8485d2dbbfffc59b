"""The status hub: event-driven JobStatus for every gpujobs job of one namespace.

A :class:`StatusHub` runs one :class:`~.informer.Informer` per resource (the job kinds, Kueue
Workloads, Volcano PodGroups and gpujobs' pods) sharing one lock, maps each change to the job it
concerns (owner uid, job label), recomputes those jobs' JobStatus (coalesced: one recompute per
job per flush, with :mod:`.mapping`) and calls subscribers; queue positions come from Kueue's
visibility API, fetched once per LocalQueue per flush (v1beta2, else v1beta1; 404 -> "position
unavailable"). Requests do not grow with the number of jobs.

When a watch has failed for ``stale_after_s`` (the server gone, credentials refused after they
expired, a Role taken away), every job's status says so in its ``message``, with the time its
cache stopped being current and the fix, and ``extra["stale_since"]``, until the watch works again.
A refusal (401, or 403 in this namespace) that lasts ``refused_after_s`` ends waits (:meth:`refused`):
it needs a new login or Role first, where an unreachable or failing server may come back by itself.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Iterator

from kubernetes.client.exceptions import ApiException

from ....status import JobStatus
from . import mapping
from ..kinds import KINDS
from ..naming import LABEL_JOB as JOB_LABEL
from ..access import failure, forbidden
from .informer import Indexer, Informer, wait_synced
from .trainer_status import with_trainer_status

WL = ("kueue.x-k8s.io", "v1beta2", "workloads")
PG = ("scheduling.volcano.sh", "v1beta1", "podgroups")
PODS = ("", "v1", "pods")


def owner_keys(obj: dict) -> Iterable[str]:
    """Index keys: the uids of the objects that own ``obj`` (Workloads, PodGroups)."""
    return mapping.owner_uids(obj)


def job_label_keys(obj: dict) -> Iterable[str]:
    """Index keys: the gpujobs job the object is labelled with (pods)."""
    job = (obj["metadata"].get("labels") or {}).get(JOB_LABEL)
    return (job,) if job else ()


#: what the hub looks its related objects up by: Workloads and PodGroups by owner uid, pods by job
INDEXERS: dict[tuple, dict[str, Indexer]] = {WL: {"owner": owner_keys}, PG: {"owner": owner_keys},
                                             PODS: {"job": job_label_keys}}


class StatusHub:
    """Event-driven JobStatus for every gpujobs job of one namespace."""

    def __init__(self, api_client: Any, namespace: str, flush_interval: float = 0.05,
                 position_interval: float = 0.5, stale_after_s: float = 10.0, refused_after_s: float = 60.0):
        self.api, self.namespace = api_client, namespace
        self.flush_interval, self.position_interval = flush_interval, position_interval
        # a watch failing this long: statuses say they are not current (more than informer.HELD_S,
        # or a dropped watch resumed at once would be called stale)
        self.stale_after_s = stale_after_s
        self.refused_after_s = refused_after_s  # refused this long: waits end (refused())
        self._stale: tuple[float, str] | None = None  # (since, what and the fix) while one is
        self._lock = threading.RLock()
        self._informers: dict[tuple, Informer] = {}
        self._jobs: dict[str, dict] = {}  # name -> job object (any kind)
        self._uid_to_job: dict[str, str] = {}
        self._deleted: dict[str, JobStatus] = {}
        self._status: dict[str, JobStatus] = {}
        self._subs: dict[str, list[Callable[[JobStatus], Any]]] = {}
        self._dirty: set[str] = set()
        self._dirty_queues: set[str] = set()
        self._positions: dict[str, dict[str, int]] = {}  # local queue -> {workload: pos}
        self._visibility_version: str | None = "v1beta2"
        self._visibility_retry_at = 0.0
        self._last_positions = 0.0
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flusher, daemon=True, name="status-hub")
        self._started = False
        self.errors: list[BaseException] = []
        self.workload_changes = 0  # counts Kueue object events (forecasts recompute after a change)
        # observers(job id, job, Workload, pods): called from the flusher for each recomputed job
        # (the log keeper: log_keeper.LogKeeper.observe); never under the hub's lock
        self.observers: list[Callable[[str, dict, dict | None, list[dict]], Any]] = []

    # ------------------------------------------------------------ setup
    def start(self) -> "StatusHub":
        with self._lock:
            if self._started:
                return self
            self._started = True
        self._informer(WL, self._on_workload)
        self._informer(PG, self._on_podgroup)
        self._informer(PODS, self._on_pod, label_selector=JOB_LABEL)
        self._thread.start()
        return self

    def _informer(self, res: tuple, cb: Callable, label_selector: str | None = None) -> Informer:
        with self._lock:
            inf = self._informers.get(res)
            if inf is None:
                group, version, plural = res
                inf = Informer(self.api, group, version, plural, self.namespace, cb, label_selector=label_selector,
                               lock=self._lock, indexers=INDEXERS.get(res)).start()
                self._informers[res] = inf
            return inf

    def cluster_informer(self, res: tuple) -> Informer:
        """A cluster-wide informer of ``res`` (group, version, plural): every namespace's objects,
        or a cluster-scoped kind's; its changes count in ``workload_changes``. Stopped with the hub."""
        with self._lock:
            key = ("*", *res)
            inf = self._informers.get(key)
            if inf is None:
                group, version, plural = res
                inf = Informer(self.api, group, version, plural, None, self._on_cluster_object,
                               lock=self._lock).start()
                self._informers[key] = inf
            return inf

    def _on_cluster_object(self, type_: str, obj: dict) -> None:
        self.workload_changes += 1  # (called with the hub's lock held)

    def track_kind(self, kind: str) -> Informer:
        """Make sure the job kind ``kind`` (gpujobs' name, a key of kinds.KINDS) is watched."""
        info = KINDS[kind]
        return self._informer((info.group, info.version, info.plural), self._on_job,
                              label_selector=JOB_LABEL)

    def wait_synced(self, timeout: float = 10.0) -> None:
        """Wait until every watch has listed once (see :func:`.informer.wait_synced`). A list of
        this namespace refused (403) is an error naming the Role's fix: gpujobs' Role grants each
        of them (an empty queue would be a lie); cluster-wide reads are optional."""
        infs = list(self._informers.values())
        wait_synced(infs, timeout)
        refused = next((i for i in infs if i.forbidden and i.namespace is not None), None)
        if refused is not None:
            raise forbidden(refused.resource[2], self.namespace)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        infs = list(self._informers.values())
        for inf in infs:  # all told first, then waited for together (0.2 s in all, not each)
            inf.stop(wait_s=0)
        deadline = time.monotonic() + 0.2
        for inf in infs:
            inf.join(max(0.0, deadline - time.monotonic()))
        self._thread.join(2)

    # ------------------------------------------------------------ events
    def _job_of(self, obj: dict) -> str | None:
        for uid in mapping.owner_uids(obj):
            if uid in self._uid_to_job:
                return self._uid_to_job[uid]
        return (obj["metadata"].get("labels") or {}).get(JOB_LABEL)

    def _mark(self, name: str | None) -> None:
        if name:
            self._dirty.add(name)
            self._wake.set()

    def _on_job(self, type_: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            if type_ == "DELETED":
                self._jobs.pop(name, None)
                st = self._status.get(name)
                self._deleted[name] = mapping.job_status(f"{self.namespace}/{name}", obj, deleted=True) \
                    if st is None or not st.terminal else st
            else:
                self._deleted.pop(name, None)
                self._jobs[name] = obj
                self._uid_to_job[obj["metadata"]["uid"]] = name
            self._mark(name)

    def _on_workload(self, type_: str, obj: dict) -> None:
        with self._lock:
            self.workload_changes += 1
            self._mark(self._job_of(obj))
            q = (obj.get("spec") or {}).get("queueName")
            if q:
                self._dirty_queues.add(q)

    def _on_podgroup(self, type_: str, obj: dict) -> None:
        with self._lock:
            self._mark(self._job_of(obj))

    def _on_pod(self, type_: str, obj: dict) -> None:
        with self._lock:
            self._mark((obj["metadata"].get("labels") or {}).get(JOB_LABEL))

    # ------------------------------------------------------------ computing
    def _related(self, name: str, job: dict) -> tuple[dict | None, dict | None, list[dict]]:
        """The job's Workload and PodGroup (by owner uid) and pods (by job label), from the indexes."""
        uid = job["metadata"]["uid"]
        owned = [next(iter(inf.indexed("owner", uid)), None) if inf is not None else None
                 for inf in (self._informers.get(WL), self._informers.get(PG))]
        return owned[0], owned[1], self._informers[PODS].indexed("job", name)

    def compute(self, name: str) -> JobStatus | None:
        with self._lock:
            job = self._jobs.get(name)
            if job is None:
                return self._deleted.get(name)
            wl, pg, pods = self._related(name, job)
            queue = (job["metadata"].get("labels") or {}).get(mapping.QUEUE_LABEL, "")
            positions = self._positions.get(queue)
            wl_name = (wl or {}).get("metadata", {}).get("name")
            pos = positions.get(wl_name) if positions is not None and wl_name else None
            st = mapping.job_status(f"{self.namespace}/{name}", job, workload=wl, podgroup=pg, pods=pods,
                                       position=pos, position_available=self._visibility_version is not None)
            st = with_trainer_status(st, job)  # [progress] the kind's own report (Trainer v2: status.trainerStatus)
            if self._stale is not None and not st.terminal:
                st = st.not_current(*self._stale)
            return st

    def stale(self) -> tuple[float, str] | None:
        """(since when, what it means and its fix) when one of this namespace's watches has failed
        for ``stale_after_s`` or longer, else None. Cluster-wide reads are optional (forecasts)."""
        now = time.time()
        for inf, since, error in self._failing():
            if now - since >= self.stale_after_s:
                return since, str(self._meaning(inf, error))
        return None

    def refused(self, seen_after: float = 0.0) -> Exception | None:
        """The error to end a wait with once every retry of one of this namespace's watches has been
        refused (HTTP 401, or 403) for ``refused_after_s`` or longer, the last of them at or after
        ``seen_after`` (epoch s: a refusal from before a new login or Role is not news); None
        otherwise, and while the server cannot be reached or fails (it may come back by itself)."""
        now = time.time()
        for inf, _, error in self._failing():
            since = inf.refused_since
            if since is not None and now - since >= self.refused_after_s and (inf.failed_at or 0.0) >= seen_after:
                return self._meaning(inf, error)
        return None

    def _failing(self) -> Iterator[tuple[Informer, float, BaseException]]:
        """(informer, failing since, its last error) of each of this namespace's watches that is
        failing. Cluster-wide reads are optional (forecasts): left out."""
        for inf in list(self._informers.values()):
            failing = inf.failing
            if inf.namespace is not None and failing is not None:
                yield inf, failing[0], failing[1]

    def _meaning(self, inf: Informer, error: BaseException) -> Exception:
        """What ``inf``'s failing read means to the user, with its fix (:func:`..access.failure`)."""
        host = getattr(getattr(self.api, "configuration", None), "host", "?")
        return failure(error, host, inf.resource[2], inf.namespace)

    def _fetch_positions(self, queues: set[str]) -> None:
        if self._visibility_version is None and time.monotonic() < self._visibility_retry_at:
            return
        for q in queues:
            got = None
            for version in ([self._visibility_version] if self._visibility_version else []) + \
                    [v for v in ("v1beta2", "v1beta1") if v != self._visibility_version]:
                path = (f"/apis/visibility.kueue.x-k8s.io/{version}/namespaces/{self.namespace}/localqueues/"
                        f"{q}/pendingworkloads")
                try:
                    got = self.api.call_api(path, "GET", response_type="object", auth_settings=["BearerToken"],
                                            _return_http_data_only=True, _request_timeout=10)
                    self._visibility_version = version
                    break
                except ApiException as exc:
                    if exc.status not in (404, 503):
                        break
                except Exception:
                    break
            with self._lock:
                if got is not None:
                    self._positions[q] = mapping.positions_from_summary(got)
                if got is None:
                    self._positions.pop(q, None)
                for name, job in self._jobs.items():
                    if (job["metadata"].get("labels") or {}).get(mapping.QUEUE_LABEL) == q:
                        self._dirty.add(name)
            if got is None:
                # a 404 on every version: the API is not served -> "position unavailable"
                self._visibility_version = None
                self._visibility_retry_at = time.monotonic() + 30.0

    def _flusher(self) -> None:
        while not self._stop.is_set():
            try:
                self._flush_once()
            except Exception as exc:  # keep serving; remembered for diagnosis
                self.errors.append(exc)
                del self.errors[:-10]

    def _flush_once(self) -> None:
        self._wake.wait(1.0)
        self._wake.clear()
        if self._stop.is_set():
            return
        time.sleep(self.flush_interval)  # coalesce bursts
        stale = self.stale()
        if stale != self._stale:  # every job's status says it (or no longer)
            with self._lock:
                self._stale = stale
                self._dirty |= set(self._jobs)
        now = time.monotonic()
        with self._lock:
            queues = set(self._dirty_queues) if now - self._last_positions >= self.position_interval else set()
            if queues:
                self._dirty_queues -= queues
                self._last_positions = now
        if queues:
            self._fetch_positions(queues)
        elif self._dirty_queues:
            self._wake.set()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            # a queued job Kueue made no Workload for: nothing changes, but after a while its
            # status says the Kueue integration may be off (hints.integration_hint)
            dirty |= {n for n, s in self._status.items() if s.phase == "queued"
                      and not s.message.startswith("no Kueue Workload") and not (s.extra or {}).get("workload")
                      and not (s.extra or {}).get("stale_since")}
        for name in dirty:
            st = self.compute(name)
            if st is None:
                continue
            self._tell_observers(name)
            with self._lock:
                old = self._status.get(name)
                st = settled(old, st)
                changed = old is None or _key(old) != _key(st)
                self._status[name] = st
                subs = list(self._subs.get(name, ())) if changed else []
                if changed:
                    self._changed.notify_all()
            for cb in subs:
                try:
                    cb(st)
                except Exception:
                    pass

    def _tell_observers(self, name: str) -> None:
        if not self.observers:
            return
        with self._lock:
            job = self._jobs.get(name)
            if job is None:
                return
            wl, _, pods = self._related(name, job)
        for ob in self.observers:
            try:
                ob(f"{self.namespace}/{name}", job, wl, pods)
            except Exception as exc:  # noqa: BLE001 - an observer never stops the statuses
                self.errors.append(exc)

    # ------------------------------------------------------------ API
    def ensure_positions(self, queue: str) -> bool:
        """Ask the visibility API for ``queue``'s positions now, unless the watch already has them
        (or knows the API is not served): a short-lived caller (the CLI) exits before the flusher's
        first fetch. True when it asked (compute again to see the positions, or that the API
        refused: forbidden or not served, "position unavailable", not "queued in q")."""
        with self._lock:
            if queue in self._positions:
                return False
        if self._visibility_version is None and time.monotonic() < self._visibility_retry_at:
            return False
        self._fetch_positions({queue})
        return True

    def workloads(self) -> list[dict] | None:
        """The namespace's Workloads as watched (None before the watch has listed them)."""
        inf = self._informers.get(WL)
        if inf is None or not inf.synced.is_set() or inf.missing:
            return None
        return inf.items()

    def own_jobs(self) -> dict[str, dict]:
        """{uid: job object} of the gpujobs jobs watched here."""
        with self._lock:
            return {o["metadata"]["uid"]: o for o in self._jobs.values() if o["metadata"].get("uid")}

    def status(self, name: str) -> JobStatus | None:
        with self._lock:
            st = self._status.get(name)
        return st if st is not None else self.compute(name)

    def known(self, name: str) -> bool:
        with self._lock:
            return name in self._jobs or name in self._deleted

    def all(self) -> list[JobStatus]:
        with self._lock:
            names = list(self._jobs) + [n for n in self._deleted if n not in self._jobs]
        return [s for s in (self.status(n) for n in names) if s is not None]

    def subscribe(self, name: str, cb: Callable[[JobStatus], Any]) -> Callable[[], None]:
        with self._lock:
            self._subs.setdefault(name, []).append(cb)
            self._mark(name)

        def undo() -> None:
            with self._lock:
                if cb in self._subs.get(name, []):
                    self._subs[name].remove(cb)
        return undo

    def wait(self, name: str, timeout: float | None, predicate: Callable[[JobStatus], bool]) -> JobStatus | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                st = self._status.get(name) or self.compute(name)
                if st is not None and predicate(st):
                    return st
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return st
                self._changed.wait(0.5 if left is None else min(left, 0.5))


def settled(old: JobStatus | None, new: JobStatus) -> JobStatus:
    """``new``, unless the same job object (uid) had ended already: an ended job stays ended
    (a late or partial view of its objects, e.g. a pod's status arriving after the job's Failed
    condition, must not flip a waiter's lines failed -> running -> failed). A Workload Kueue
    deactivated can be reactivated by an admin: that end is not final."""
    if old is not None and old.phase in ("succeeded", "failed") and not new.terminal and \
            not old.reason.startswith(("Deactivated", "InactiveWorkload")) and \
            (old.extra or {}).get("uid") == (new.extra or {}).get("uid"):
        return old
    return new


def _key(st: JobStatus) -> tuple:
    return (st.phase, st.queue_position, st.position_available, st.gang_ready, st.gang_size, st.message,
            st.reason, st.restarts, st.exit_code)
