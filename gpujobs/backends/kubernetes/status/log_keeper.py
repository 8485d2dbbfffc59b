"""Logs kept before the cluster deletes them: the one place where a watching gpujobs process
archives the output of a job's pods that are about to go.

Kueue's preemption and its maximum execution time suspend the job, and the operators then delete
its pods (their logs, tracebacks and partial output with them); an operator's own deadline deletes
them too (the Kubeflow kinds: docs/kubernetes-kinds.md). Each of these is visible
before the pods are gone, and :class:`LogKeeper` starts following the pods' logs then:

- a pod being deleted (``deletionTimestamp``: the API server keeps a running pod for its grace
  period, and its log stays readable until the container has stopped);
- the job's Workload evicted, preempted or deactivated (Evicted/Preempted/DeactivationTarget True,
  ``spec.active`` false) while its pods still exist;
- a deadline near (:data:`LEAD_S` ahead, or a tenth of the limit when more): Kueue's
  ``maximumExecutionTimeSeconds`` counted from admission, and the job's own
  ``activeDeadlineSeconds`` (counted here from admission too, which is never later than the
  operator's own start).

A followed stream ends when the container stops; if the pod was deleted meanwhile, its lines (as
``gpujobs logs`` shows them, rank-prefixed) go to ``save`` (live._keep_deleted_logs: the archive's
earlier runs while the job goes on, its final logs once it has ended), so ``logs()`` still shows
them once the pods are gone. A pod that simply ended is left to the final
archive (live.keep_ended). The status reads' last log tails (pod_metrics) are the other reader of
a gone pod: :meth:`LogKeeper.keep_unless_kept` keeps each pod's lines once, the keeper's whole
log when it kept one, else that tail (a pod gone before its stream opened keeps nothing here). Costs: nothing for jobs that are not about to lose pods; one streaming
read per pod from the moment one of the above is seen.
"""
from __future__ import annotations

import heapq
import threading
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from ....errors import BackendUnavailable, KubernetesError
from ..retry import transient_errors
from .logs import _prefixed, _visible, pod_rank_order, user_pods
from .objects import own_deadline_s, parse_time
from .results import job_pods, main_container

LEAD_S = 10.0
"""How long before a known deadline the keeper starts following the job's pods, at least."""
MAX_KEPT_BYTES = 256 * 1024
"""What one followed pod keeps of its log, at most (the newest lines; the archive keeps as much)."""

_STOPPING = ("Evicted", "Preempted", "DeactivationTarget")


def _true(obj: dict | None, type_: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and str(c.get("status")) == "True":
            return c
    return None


def deadlines(job: dict, wl: dict | None) -> list[float]:
    """The known times (epoch seconds) at which the job's pods will be deleted at the latest:
    Kueue's maximum execution time and the job's own deadline, both from its admission."""
    adm = _true(wl, "Admitted")
    admitted = parse_time((adm or {}).get("lastTransitionTime"))
    if admitted is None:
        return []
    out = []
    limit = ((wl or {}).get("spec") or {}).get("maximumExecutionTimeSeconds")
    if limit:
        past = int(((wl or {}).get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
        out.append(admitted + int(limit) - past)
    own = own_deadline_s(job)
    if own:
        out.append(admitted + own)
    return out


def about_to_go(wl: dict | None) -> bool:
    """Whether Kueue is stopping the job: evicted, preempted or deactivated (its pods go next)."""
    return any(_true(wl, t) for t in _STOPPING) or ((wl or {}).get("spec") or {}).get("active") is False


# The API answered no (gone, not allowed) or could not be reached (refused, dropped, timed out):
# the keeper keeps nothing more and its thread ends.
UNREADABLE = (ApiException, KubernetesError, BackendUnavailable, *transient_errors())


class LogKeeper:
    """Follows the logs of pods about to be deleted and saves what they said (see module doc)."""

    def __init__(self, api_client: Any, save: Callable[[str, str], None]):
        self.api, self.save = api_client, save
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._following: set[str] = set()  # pod uids followed (or done)
        self._ended: set[str] = set()  # pod uids whose follow has ended
        self._fallback: dict[str, Callable[[], None]] = {}  # pod uid -> keep another reader's lines
        self.kept: set[str] = set()  # pod uids whose logs were saved
        self._armed: set[str] = set()  # "job id@deadline" already due
        self._due: list[tuple[float, str]] = []  # heap of (when to start following, job id)
        self._thread: threading.Thread | None = None
        self._stopped = False

    # ------------------------------------------------------------ triggers
    def observe(self, job_id: str, job: dict, wl: dict | None, pods: list[dict]) -> None:
        """A watched job changed (the status hub calls this): follow the pods about to go. A job
        being deleted (a cancel) is not: its archive was written before the delete."""
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        live = [p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Pending")
                or (p.get("metadata") or {}).get("deletionTimestamp")]
        if not live:
            return
        if about_to_go(wl):
            self.follow(job_id, pods, live)
            return
        going = [p for p in live if p["metadata"].get("deletionTimestamp")]
        if going:
            self.follow(job_id, pods, going)
        self._arm(job_id, job, wl)

    def _arm(self, job_id: str, job: dict, wl: dict | None) -> None:
        """Start following the job's pods LEAD_S (or a tenth of the limit) before its earliest
        known deadline: one thread waits for all jobs' deadlines."""
        times = deadlines(job, wl)
        if not times:
            return
        at = min(times)
        admitted = parse_time((_true(wl, "Admitted") or {}).get("lastTransitionTime")) or at
        when = at - max(LEAD_S, (at - admitted) / 10)
        key = f"{job_id}@{at}"
        with self._wake:
            if key in self._armed or self._stopped:
                return
            self._armed.add(key)
            heapq.heappush(self._due, (when, job_id))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="log-keeper")
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._due or self._due[0][0] > time.time()):
                    self._wake.wait(None if not self._due else max(0.0, self._due[0][0] - time.time()))
                if self._stopped:
                    return
                _, job_id = heapq.heappop(self._due)
            self._deadline_near(job_id)

    def _deadline_near(self, job_id: str) -> None:
        ns, _, name = job_id.partition("/")
        try:
            pods = job_pods(self.api, ns, name)
        except UNREADABLE:
            return
        self.follow(job_id, pods, [p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Pending")])

    def keep_unless_kept(self, uid: str, keep: Callable[[], None]) -> None:
        """A gone pod's lines as another reader last read them (pod_metrics' tail): ``keep()``
        runs unless this keeper keeps the pod's whole log, so each pod's lines are kept once: at
        once when the pod was not followed or its follow kept nothing (it was gone before the
        stream opened, or the stream dropped), else when its follow ends having kept nothing."""
        with self._lock:
            if uid in self.kept:
                return
            if uid in self._following and uid not in self._ended:
                self._fallback[uid] = keep
                return
            self._following.add(uid)  # the pod is gone: never followed from now on
            self._ended.add(uid)
        keep()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    # ------------------------------------------------------------ following
    def follow(self, job_id: str, all_pods: list[dict], which: list[dict]) -> None:
        """Follow each of ``which`` (the job's user pods among them) once, in a thread."""
        ranks = {p["metadata"].get("uid"): r for r, p in enumerate(pod_rank_order(user_pods(all_pods)))}
        for p in which:
            uid = p["metadata"].get("uid", "")
            if uid not in ranks:
                continue  # a Ray job's head and workers: their logs are Ray's own
            with self._lock:
                if uid in self._following:
                    continue
                self._following.add(uid)
            threading.Thread(target=self._follow_one, args=(job_id, p, ranks[uid]), daemon=True,
                             name=f"keep-logs-{p['metadata']['name']}").start()

    def _follow_one(self, job_id: str, pod: dict, rank: int) -> None:
        uid = pod["metadata"].get("uid") or ""
        kept = False
        try:
            kept = self._keep_log(job_id, pod, rank)
        finally:
            with self._lock:
                self._ended.add(uid)
                fallback = self._fallback.pop(uid, None)
            if fallback is not None and not kept:
                fallback()

    def _keep_log(self, job_id: str, pod: dict, rank: int) -> bool:
        """Follow the pod's log to its end; save it when the pod is gone or going. True if saved."""
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"].get("uid")
        container = main_container(pod)
        query = [("follow", "true")] + ([("container", container)] if container else [])
        lines: list[str] = []
        size = 0
        for _ in range(30):  # a pod not started yet answers 400: try again until it runs or goes
            try:
                resp = self.api.call_api(f"/api/v1/namespaces/{ns}/pods/{name}/log", "GET", query_params=query,
                                         auth_settings=["BearerToken"], _return_http_data_only=True,
                                         _preload_content=False)
            except ApiException as exc:
                if exc.status == 400:
                    time.sleep(0.5)
                    continue
                return False  # gone already (404) or not allowed: nothing to keep
            except UNREADABLE:
                return False  # the API server is unreachable (urllib3's MaxRetryError): nothing kept
            buf = b""
            try:
                for chunk in resp.stream(4096):
                    buf += chunk
                    *done, buf = buf.split(b"\n")
                    for raw in done:
                        text = _visible(raw.decode("utf-8", "replace"))
                        if text is not None:
                            line = _prefixed(text, rank)[1]
                            lines.append(line)
                            size += len(line)
                    while size > MAX_KEPT_BYTES and lines:
                        size -= len(lines.pop(0))
            except Exception:  # noqa: BLE001 - the stream dropped (urllib3's ProtocolError too): keep what came
                pass
            if buf:
                text = _visible(buf.decode("utf-8", "replace"))
                if text is not None:
                    lines.append(_prefixed(text, rank)[1])
            break
        if not lines or not self._deleted(job_id, uid):
            return False
        with self._lock:
            self.kept.add(uid or "")
        self.save(job_id, "".join(lines))
        return True

    def _deleted(self, job_id: str, uid: str | None) -> bool:
        """Whether the pod is gone or going (so its log will be): read by listing the job's pods
        (gpujobs' Role grants list, not get, on pods: docs/rbac.yaml)."""
        ns, _, name = job_id.partition("/")
        for _ in range(20):
            try:
                cur = next((p for p in job_pods(self.api, ns, name) if p["metadata"].get("uid") == uid), None)
            except UNREADABLE:
                return False
            if cur is None or cur["metadata"].get("deletionTimestamp"):
                return True
            if (cur.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                time.sleep(0.1)  # the stream ended before the kubelet wrote the phase
                continue
            return False
        return False

