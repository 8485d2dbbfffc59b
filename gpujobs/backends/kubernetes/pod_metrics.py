"""GPU/CPU metrics of Kubernetes jobs, read from the ``GPUJOBS-METRICS`` lines in their pod logs.

The pod bootstrap (bootstrap_script.py) samples the pod's ranks and writes one
``GPUJOBS-METRICS {json}`` line per round into the pod log, so metrics need no
cluster permission beyond ``pods/log`` and no extra object per job.

Design (no per-job polling, no background thread): one :class:`PodMetrics` per
backend keeps a bounded :class:`~gpujobs.metrics.MetricsHistory` per job, fed by

1. every log line the client reads anyway through ``job.logs()`` (followed or not);
2. an on-demand read of each of the job's pods' log *tail* (``tailLines``,
   default 5,000) when someone asks: ``job.metrics()`` (``metrics_history``) always,
   ``job.status()`` / ``wait()`` only when the job's samples are older than
   ``refresh_s`` (default 2 s). A terminal job is read once more, then never again.

So the cost is at most one tail read per pod per ``refresh_s`` per job *that is being
asked about*; nothing is read for jobs nobody looks at. Samples are kept only when newer
than the last one kept for their (rank, device), so overlapping reads never duplicate.
Statuses pushed to ``subscribe()`` callbacks come from the watch hub and carry no
metrics (the hub makes no log reads); ``status()`` returns them.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Iterable

from kubernetes.client.exceptions import ApiException

from ...errors import KubernetesError
from ...metrics import METRICS_MARKER, MetricsHistory, parse_metrics_line
from ...status import GpuSample, JobStatus
from . import naming
from .results import job_pods

TAIL_LINES = 5000


class _JobSeries:
    def __init__(self, maxlen: int | None):
        self.history = MetricsHistory(maxlen) if maxlen else MetricsHistory()
        self.last: dict[tuple[int, int], float] = {}
        self.read_at = 0.0  # monotonic time of the last on-demand read
        self.final = False  # read after the job ended: complete

    def add(self, samples: Iterable[GpuSample]) -> None:
        new = []
        for s in samples:
            key = (s.rank, s.device)
            if s.time > self.last.get(key, float("-inf")):
                self.last[key] = s.time
                new.append(s)
        if new:
            self.history.add(new)


class PodMetrics:
    """Per-backend cache of jobs' metrics histories (see module doc)."""

    def __init__(self, api_client: Any, refresh_s: float = 2.0, tail_lines: int = TAIL_LINES,
                 maxlen: int | None = None):
        self.api, self.refresh_s, self.tail_lines, self.maxlen = api_client, refresh_s, tail_lines, maxlen
        self._jobs: dict[str, _JobSeries] = {}
        self._lock = threading.Lock()
        self.reads = 0  # pod log reads made (tests, diagnosis)

    def _series(self, job_id: str) -> _JobSeries:
        with self._lock:
            s = self._jobs.get(job_id)
            if s is None:
                s = self._jobs[job_id] = _JobSeries(self.maxlen)
            return s

    def feed(self, job_id: str, line: str) -> bool:
        """Take a log line; True when it was a metrics line (the caller hides it)."""
        samples = parse_metrics_line(line)
        if samples is None:
            return False
        if samples:
            self._series(job_id).add(samples)
        return True

    def refresh(self, job_id: str, terminal: bool = False, force: bool = False) -> None:
        """Read the job's pods' log tails unless fresh (or final) enough."""
        series = self._series(job_id)
        if series.final or (not force and time.monotonic() - series.read_at < self.refresh_s):
            return
        series.read_at = time.monotonic()
        ns, name = naming.parse_job_id(job_id)
        try:
            pods = job_pods(self.api, ns, name)
        except (ApiException, KubernetesError, OSError):  # metrics never fail a status call
            return
        for pod in pods:
            for line in self._tail(ns, pod["metadata"]["name"]).splitlines():
                if METRICS_MARKER in line:
                    self.feed(job_id, line)
        if terminal:
            series.final = True

    def _tail(self, ns: str, pod: str) -> str:
        path = f"/api/v1/namespaces/{ns}/pods/{pod}/log"
        try:
            self.reads += 1
            resp = self.api.call_api(path, "GET", query_params=[("tailLines", str(self.tail_lines))],
                                     auth_settings=["BearerToken"], _return_http_data_only=True,
                                     _preload_content=False, _request_timeout=60)
            return resp.data.decode("utf-8", "replace")
        except (ApiException, OSError):  # not started (400), gone (404), a dropped read
            return ""

    def history(self, job_id: str) -> list[GpuSample]:
        return self._series(job_id).history.samples()

    def latest(self, job_id: str) -> tuple[GpuSample, ...]:
        return self._series(job_id).history.latest()

    def with_metrics(self, st: JobStatus) -> JobStatus:
        """``st`` carrying the job's latest sample per (rank, device) (read on demand if stale)."""
        if st.phase in ("running",) or st.terminal:
            self.refresh(st.job_id, terminal=st.terminal)
        latest = self.latest(st.job_id)
        return st.with_(metrics=latest) if latest else st


def for_backend(backend: Any) -> PodMetrics:
    with _lock:
        pm = backend.__dict__.get("_pod_metrics")
        if pm is None:
            pm = backend.__dict__["_pod_metrics"] = PodMetrics(backend.api_client)
        return pm


_lock = threading.Lock()
