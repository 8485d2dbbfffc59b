"""All ranks' logs with ``[rank N]`` prefixes; ``follow`` streams every pod at once.

N is the global rank: the pod bootstrap writes ``[rank R] `` before each line of a rank it
forwards (several ranks in a pod; MPI ranks, whose output all lands in the launcher's log), and
those lines are kept as they are. Other lines (a one-rank pod's own output) get the pod's node
rank: pods sorted with the submitter/launcher/master/head first, then by the index their
operator wrote in a label or annotation (see pod_rank_order; never the pod name). Memory is bounded: followed lines pass through a
bounded queue (producers block when the reader is slow). Result lines
(``GPUJOBS-RESULT``, large base64) and metrics lines (``GPUJOBS-METRICS``, written by
the pod bootstrap) are not shown; metrics lines go to ``metrics_sink`` instead
(pod_metrics.PodMetrics.feed), so following the logs also keeps job metrics current; so do
``ctx.progress`` lines (``GPUJOBS-PROGRESS``).
"""
from __future__ import annotations

import queue
import re
import threading
import time
from typing import Any, Callable, Iterator

from kubernetes.client.exceptions import ApiException

from ....rank.wire import (EARLIER_MARKER, METRICS_MARKER, PHASE_MARKER, PROGRESS_MARKER, RESULT_MARKER,
                           STACKS_MARKER)
from ..naming import LABEL_ROLE
from .results import job_pods, main_container, read_pod_log, restarted

_FIRST = ("submitter", "launcher", "master", "head")
# Where each operator writes a pod's index (never the pod name: JobSet's and the batch Job
# controller's pod names end in a random suffix):
# - Training Operator v1 and MPI Operator: label training.kubeflow.org/replica-index
#   (to@4445c12 pkg/apis/kubeflow.org/v1/common_types.go ReplicaIndexLabel; mpi@caa3c47
#   pkg/controller/mpi_job_controller.go replica-index label)
# - JobSet (Trainer v2): the Indexed Job's batch.kubernetes.io/job-completion-index (kubernetes.io
#   docs, Job "Completion mode"), with jobset.sigs.k8s.io/job-index for the replicated job's copy
# - Volcano: annotation volcano.sh/task-index (volcano@ed72c7c pkg/controllers/job/job_controller_util.go)
_INDEX_KEYS = ("training.kubeflow.org/replica-index", "jobset.sigs.k8s.io/job-index",
               "batch.kubernetes.io/job-completion-index", "volcano.sh/task-index")
_RANK_ENV = ("PET_NODE_RANK", "RANK", "JOB_COMPLETION_INDEX")
_DONE = object()


def _pod_index(p: dict) -> tuple[int, ...]:
    md = p.get("metadata") or {}
    keys = {**(md.get("annotations") or {}), **(md.get("labels") or {})}
    out = [int(keys[k]) for k in _INDEX_KEYS if str(keys.get(k, "")).isdigit()]
    if out:
        return tuple(out)
    for c in ((p.get("spec") or {}).get("containers") or [])[:1]:
        for e in c.get("env") or []:
            if e.get("name") in _RANK_ENV and str(e.get("value", "")).isdigit():
                return (int(e["value"]),)
    return (0,)


def pod_rank_order(pods: list[dict]) -> list[dict]:
    """Pods in node-rank order: the submitter/launcher/master/head first (gpujobs' role label),
    then by the index the operator wrote in labels/annotations (or the literal rank env), the
    name breaking ties only."""
    def key(p: dict) -> tuple:
        md = p["metadata"]
        role = (md.get("labels") or {}).get(LABEL_ROLE, "")
        return (role not in _FIRST, _FIRST.index(role) if role in _FIRST else 0, _pod_index(p), md["name"])
    return sorted(pods, key=key)


def user_pods(pods: list[dict]) -> list[dict]:
    """The pods whose logs hold the job's output: for a Ray job only its submitter (the driver's
    output, which Ray also forwards the workers' prints to); head and worker logs are Ray's own."""
    roles = [((p.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE) for p in pods]
    if "submitter" in roles or "head" in roles:  # a Ray job (its head's role is "head")
        return [p for p, r in zip(pods, roles) if r == "submitter"]
    return pods


_RANK_PREFIX = re.compile(r"^\[rank (\d+)\] ")


def _prefixed(line: str, pod_rank: int) -> tuple[int, str]:
    """(global rank, ``[rank N] text\n``) of a visible pod log line."""
    m = _RANK_PREFIX.match(line)
    if m:
        return int(m.group(1)), line + "\n"
    return pod_rank, f"[rank {pod_rank}] {line}\n"


EARLIER_HEADER = "--- gpujobs: an earlier run of this job (preempted or evicted; its pods are gone) ---\n"
RAN_AGAIN = "--- gpujobs: the job ran again ---\n"


def _earlier(line: str) -> tuple[int, str] | None:
    """(rank, ``[rank N] text\n``) of an earlier run's line the rank printed at its start
    (gpujobs.rank.runner.runlogs: kept on the checkpoint claim), else None."""
    forwarded = _RANK_PREFIX.match(line)  # an MPI rank's line in the launcher's log
    start = forwarded.end() if forwarded else 0
    if not line.startswith(EARLIER_MARKER + " ", start):
        return None
    text = line[start + len(EARLIER_MARKER) + 1:]
    m = _RANK_PREFIX.match(text)
    return (int(m.group(1)), text + "\n") if m else None


def _visible(line: str, metrics_sink: Callable[[str], Any] | None = None) -> str | None:
    """The text users see of a pod log line: None for result/metrics lines (and an earlier run's,
    which :func:`logs` shows apart)."""
    if line.lstrip().startswith((RESULT_MARKER + " ", STACKS_MARKER + " ")) or _earlier(line) is not None:
        return None
    i = line.find(METRICS_MARKER + " ")
    if i < 0:
        i = line.find(PROGRESS_MARKER + " ")  # ctx.progress reports: status, not output
    if i < 0:
        i = line.find(PHASE_MARKER + " ")  # the rank's start-up phase: status, not output
    if i >= 0:
        if metrics_sink is not None:
            metrics_sink(line)
        before = line[:i].rstrip()  # a rank's unterminated output the marker followed
        return before or None
    return line


def logs(api_client: Any, namespace: str, name: str, rank: int | None = None, follow: bool = False,
         is_done: Callable[[], bool] | None = None, max_buffered_lines: int = 1000,
         metrics_sink: Callable[[str], Any] | None = None) -> Iterator[str]:
    """Lines ``[rank N] text\\n`` of the job's pods (only ``rank`` when given)."""
    def show(line: str) -> str | None:
        return _visible(line, metrics_sink)

    if not follow:
        earlier: list[str] = []
        current: list[str] = []
        for r, pod in enumerate(pod_rank_order(user_pods(job_pods(api_client, namespace, name)))):
            log = read_pod_log(api_client, namespace, pod)
            if restarted(pod):  # restarted in place: the earlier instance's lines first
                log = read_pod_log(api_client, namespace, pod, previous=True) + log
            for line in log.splitlines():
                old = _earlier(line)
                if old is not None:
                    if rank is None or old[0] == rank:
                        earlier.append(old[1])
                    continue
                text = show(line)
                if text is not None:
                    who, out = _prefixed(text, r)
                    if rank is None or who == rank:
                        current.append(out)
        if earlier:
            yield from [EARLIER_HEADER, *earlier, RAN_AGAIN]
        yield from current
        return
    q: queue.Queue = queue.Queue(maxsize=max_buffered_lines)
    started: set[str] = set()
    threads: list[threading.Thread] = []
    stop = threading.Event()

    said = {"earlier": False, "again": False}
    said_lock = threading.Lock()

    def put(who: int, line: str, earlier: bool = False) -> None:
        if rank is not None and who != rank:
            return
        with said_lock:  # an earlier run's lines come first in each pod's log: one header
            if earlier and not said["earlier"]:
                said["earlier"] = True
                q.put(EARLIER_HEADER)
            elif not earlier and said["earlier"] and not said["again"]:
                said["again"] = True
                q.put(RAN_AGAIN)
        q.put(line)

    def put_line(line: str, r: int) -> None:
        old = _earlier(line)
        if old is not None:
            put(*old, earlier=True)
            return
        text = show(line)
        if text is not None:
            put(*_prefixed(text, r))

    def stream(pod: str, r: int, container: str | None = None) -> None:
        try:
            query = [("follow", "true")] + ([("container", container)] if container else [])
            resp = api_client.call_api(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", "GET",
                                       query_params=query, auth_settings=["BearerToken"],
                                       _return_http_data_only=True, _preload_content=False)
            buf = b""
            for chunk in resp.stream(4096):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    put_line(line.decode("utf-8", "replace"), r)
                if stop.is_set():
                    break
            if buf:
                put_line(buf.decode("utf-8", "replace"), r)
        except (ApiException, OSError, ValueError):
            started.discard(pod)  # not started yet (400) or dropped: try again later
        finally:
            q.put(_DONE)

    active = 0
    try:
        while True:
            pods = pod_rank_order(user_pods(job_pods(api_client, namespace, name)))
            for r, pod in enumerate(pods):
                pname = pod["metadata"]["name"]
                if pname in started:  # every pod: one may hold several ranks
                    continue
                if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                    continue
                started.add(pname)
                t = threading.Thread(target=stream, args=(pname, r, main_container(pod)), daemon=True)
                threads.append(t)
                t.start()
                active += 1
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    item = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is _DONE:
                    active -= 1
                    continue
                yield item
            done = is_done() if is_done else True
            if done and active == 0:
                while not q.empty():
                    item = q.get_nowait()
                    if item is not _DONE:
                        yield item
                return
    finally:
        stop.set()
