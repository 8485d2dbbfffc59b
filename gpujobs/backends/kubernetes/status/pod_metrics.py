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

import functools
import threading
import time
from typing import Any, Callable, Iterable

from kubernetes.client.exceptions import ApiException

from ....errors import KubernetesError
from ....metrics import MetricsHistory
from ....progress import stall_message, summarize
from ....rank.wire import (METRICS_MARKER, PHASE_MARKER, PROGRESS_MARKER, STACKS_MARKER, parse_metrics_line,
                           is_marker_line, parse_progress_line)
from ....status import GpuSample, JobStatus
from .. import naming
from ..cluster import Cluster
from .objects import parse_time
from .results import job_pods, main_container

TAIL_LINES = 5000


class _JobSeries:
    def __init__(self, maxlen: int | None):
        self.history = MetricsHistory(maxlen) if maxlen else MetricsHistory()
        self.last: dict[tuple[int, int], float] = {}
        self.read_at = 0.0  # monotonic time of the last on-demand read
        self.final = False  # read after the job ended: complete
        self.progress: list[dict] = []  # ctx.progress reports (GPUJOBS-PROGRESS lines) [progress]
        self._progress_keys: set[tuple] = set()
        self.stall = StallEvidence()
        self.phase: str | None = None  # the ranks' start-up phase (GPUJOBS-PHASE lines)
        self.tails: dict[str, tuple[int, str]] = {}  # pod uid -> (its node rank, log tail as last read)
        self.born: dict[str, float | None] = {}  # pod uid -> its creationTimestamp (epoch s)

    def add_progress(self, rep: dict) -> None:
        key = (rep["rank"], rep["time"], rep["step"])
        if key in self._progress_keys:
            return
        self._progress_keys.add(key)
        self.progress.append(rep)
        if len(self.progress) > 10_000:
            old = self.progress[:5_000]
            del self.progress[:5_000]
            self._progress_keys.difference_update((r["rank"], r["time"], r["step"]) for r in old)

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
        self.on_run_gone: Callable[[str, str], None] | None = None
        """(job id, logs): the logs of an earlier run whose pods are gone, as last read."""
        self.keep_unless_kept: Callable[[str, Callable[[], None]], None] = lambda uid, keep: keep()
        """(pod uid, keep): hands a gone pod's lines to the log keeper (status/log_keeper.py,
        LogKeeper.keep_unless_kept), which runs ``keep`` unless it keeps that pod's whole log."""
        self.requeued_at: Callable[[str], float | None] = lambda job_id: None
        """(job id) -> when it last went back to the queue (its latest preempted/evicted/requeued
        event), None if never: the pods made before then were an earlier run's."""
        self.locate: Callable[[str, list[int]], dict[int, str]] | None = None
        """(job id, ranks) -> rank -> the function it sits in (from its stack), for the stall flag."""

    def _series(self, job_id: str) -> _JobSeries:
        with self._lock:
            s = self._jobs.get(job_id)
            if s is None:
                s = self._jobs[job_id] = _JobSeries(self.maxlen)
            return s

    def feed(self, job_id: str, line: str) -> bool:
        """Take a log line; True when it was a metrics, progress or phase line (the caller hides it)."""
        i = line.find(PHASE_MARKER + " ")
        if i >= 0:  # "starting Ray head …" until "-": the function runs
            text = line[i + len(PHASE_MARKER) + 1:].strip()
            self._series(job_id).phase = None if text in ("", "-") else text
            return True
        if PROGRESS_MARKER in line:
            rep = parse_progress_line(line)
            if rep is not None:
                self._series(job_id).add_progress(rep)
                return True
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
        self._runs_gone(job_id, series, {p["metadata"].get("uid", "") for p in pods}, terminal)
        from .logs import pod_rank_order, user_pods
        ranks = {p["metadata"].get("uid", ""): r for r, p in enumerate(pod_rank_order(user_pods(pods)))}
        for pod in pods:
            pname = pod["metadata"]["name"]
            last_output: float | None = None
            text = self._tail(ns, pname, main_container(pod))
            uid = pod["metadata"].get("uid", "")
            if text and uid in ranks:
                series.tails[uid] = (ranks[uid], text)
                series.born[uid] = parse_time(pod["metadata"].get("creationTimestamp"))
            for stamped in text.splitlines():
                at, line = split_timestamp(stamped)
                if METRICS_MARKER in line or PROGRESS_MARKER in line or PHASE_MARKER in line:
                    self.feed(job_id, line)
                elif _said_something(line):
                    last_output = at  # (a stack answer is gpujobs' own, not the rank moving)
            series.stall.output(pname, last_output)
        if terminal:
            series.final = True

    def _runs_gone(self, job_id: str, series: _JobSeries, live: set[str], terminal: bool = False) -> None:
        """Pods read before and gone now (a preempted run's: Kueue deleted them): their logs as
        last read go to ``on_run_gone`` (the archive), so the next run's logs do not replace them.
        Once the job has ended, a pod made after its last requeue was its last run's (deleted as
        the job ended: the MPI Operator's cleanPodPolicy): never an earlier run's."""
        requeued = self.requeued_at(job_id) if terminal else None
        for uid in [u for u in series.tails if u not in live]:
            text = _visible_text(*series.tails.pop(uid))
            born = series.born.pop(uid, None)
            if terminal and (requeued is None or (born is not None and born > requeued)):
                continue  # the last run's (an unknown birth is kept: better twice than lost)
            if text and self.on_run_gone is not None:  # once: the keeper's whole log, or this tail
                self.keep_unless_kept(uid, functools.partial(self.on_run_gone, job_id, text))

    def _tail(self, ns: str, pod: str, container: str | None = None) -> str:
        """The pod's log tail, naming gpujobs' container (a sidecar makes an unqualified read 400)."""
        path = f"/api/v1/namespaces/{ns}/pods/{pod}/log"
        query = [("tailLines", str(self.tail_lines)), ("timestamps", "true")] + \
            ([("container", container)] if container else [])
        try:
            self.reads += 1
            resp = self.api.call_api(path, "GET", query_params=query,
                                     auth_settings=["BearerToken"], _return_http_data_only=True,
                                     _preload_content=False, _request_timeout=60)
            return resp.data.decode("utf-8", "replace")
        except (ApiException, OSError):  # not started (400), gone (404), a dropped read
            return ""

    def history(self, job_id: str) -> list[GpuSample]:
        return self._series(job_id).history.samples()

    def latest(self, job_id: str) -> tuple[GpuSample, ...]:
        return self._series(job_id).history.latest()

    def known_progress(self, job_id: str):
        """The latest progress already read (no log read)."""
        return summarize(self._series(job_id).progress[-160:])

    def progress(self, job_id: str) -> list[dict]:
        return sorted(self._series(job_id).progress, key=lambda r: r["time"])

    def with_metrics(self, st: JobStatus) -> JobStatus:
        """``st`` carrying the job's latest sample per (rank, device) (read on demand if stale),
        its latest ``ctx.progress`` report and, while running, the stall flag."""
        if st.phase in ("running",) or st.terminal:
            self.refresh(st.job_id, terminal=st.terminal)
        latest = self.latest(st.job_id)
        if latest:
            st = st.with_(metrics=latest)
        series = self._series(st.job_id)
        progress = summarize(series.progress[-160:])
        if progress is not None:
            st = st.with_(progress=progress)  # the ranks' own reports beat trainerStatus
        if st.phase == "running" and series.phase and series.phase not in st.message:
            st = st.with_(message="; ".join(filter(None, [series.phase, st.message])))
        if st.phase == "running":
            stall = series.stall
            since, quiet, limit = stall.verdict(series.progress, series.history.samples())
            if since is None:
                stall.where = None
            else:
                if stall.where is None and self.locate is not None:
                    stall.where = {}  # once per stall episode (and no recursion through status)
                    stall.where = self.locate(st.job_id, sorted(quiet))
                message = stall_message(quiet, limit, stall.where or {}, stall.waiting)
                st = st.with_(stalled_since=since, extra={**st.extra, "stall": message},
                              message="; ".join(filter(None, [st.message, message])))
        return st


def _visible_text(rank: int, text: str) -> str:
    """A pod's timestamped log tail as ``gpujobs logs`` shows it (rank-prefixed, no marker lines)."""
    from .logs import _prefixed, _visible
    out = []
    for stamped in text.splitlines():
        line = _visible(split_timestamp(stamped)[1])
        if line is not None:
            out.append(_prefixed(line, rank)[1])
    return "".join(out)


def _said_something(line: str) -> bool:
    """A line of the rank's own output (not empty, not gpujobs' marker lines)."""
    text = line.partition("] ")[2] if line.startswith("[rank ") else line
    return bool(text.strip()) and not is_marker_line(text) and STACKS_MARKER not in text


def split_timestamp(line: str) -> tuple[float | None, str]:
    """A ``timestamps=true`` log line -> (its time, epoch s; the line): the time the container
    runtime stamped it with, on the pod's node (None when the line has no stamp)."""
    head, sep, rest = line.partition(" ")
    if sep and len(head) >= 20 and head[4:5] == "-" and head[10:11] == "T":
        t = parse_time(head[:19] + "Z") if head.endswith("Z") else None
        if t is not None:
            frac = head[19:-1].lstrip(".")
            return t + (float("0." + frac) if frac.isdigit() else 0.0), rest
    return None, line


class StallEvidence:
    """Stall detection from what the pod logs say (see gpujobs.backends.local.liveness for
    the rule): progress reports, CPU/GPU samples per rank and the time of each pod's last output
    line, all on the pods' own clocks (the report's, the sample's, the log line's stamp), so a
    one-shot reader sees the same quiet time as a long-lived one. Settings from the client's
    environment: ``GPUJOBS_STALL_FLOOR_S`` (60), ``GPUJOBS_STALL_FACTOR`` (5)."""

    def __init__(self) -> None:
        self._last_output: dict[str, float] = {}
        self.where: dict[int, str] | None = None  # rank -> the function it sits in (this episode)
        self.waiting: set[int] = set()  # ranks whose GPUs only waited in their latest samples

    @property
    def output_at(self) -> float | None:
        """When any pod last wrote an output line (its node's clock); None before any."""
        return max(self._last_output.values(), default=None)

    def output(self, pod: str, at: float | None) -> None:
        if at is not None:
            self._last_output[pod] = max(at, self._last_output.get(pod, at))

    def verdict(self, progress: list[dict], samples: list[GpuSample],
                now: float | None = None) -> tuple[float | None, dict[int, float], float]:
        """(quiet since, {rank: quiet since}, threshold s); (None, {}, 0) when none is stalled."""
        from ....progress import gpu_activities, stall_settings, usual_interval, waiting_sm_pct
        now = time.time() if now is None else now
        floor, factor = stall_settings({})
        sm_pct = waiting_sm_pct({})
        if floor <= 0 or not samples:
            return None, {}, 0.0  # no CPU/GPU evidence: never call a rank idle
        usual = usual_interval(progress[-200:])
        limit = max(floor, factor * usual) if usual else floor
        last_progress = max((r["time"] for r in progress), default=0.0)
        first: dict[int, float] = {}
        busy_at: dict[int, float] = {}
        said, self.waiting = gpu_activities(samples, sm_pct)
        for s, says in said:
            first[s.rank] = min(first.get(s.rank, s.time), s.time)
            if says == "busy":
                busy_at[s.rank] = max(busy_at.get(s.rank, 0.0), s.time)
        quiet: dict[int, float] = {}
        for rank in first:
            active = max(last_progress, self.output_at or 0.0, busy_at.get(rank, first[rank]))
            if now - active > limit:
                quiet[rank] = active
        if not quiet:
            return None, {}, 0.0
        return min(quiet.values()), quiet, limit


def for_backend(backend: Cluster) -> PodMetrics:
    state = backend.state
    with state.lock:
        if state.pod_metrics is None:
            state.pod_metrics = PodMetrics(backend.api_client)
            state.pod_metrics.locate = lambda job_id, ranks: _locate(backend, job_id, ranks)
            state.pod_metrics.on_run_gone = lambda job_id, text: _keep_run(backend, job_id, text)
            state.pod_metrics.requeued_at = lambda job_id: _requeued_at(backend, job_id)
            state.pod_metrics.keep_unless_kept = lambda uid, keep: (
                state.log_keeper.keep_unless_kept(uid, keep) if state.log_keeper else keep())
        return state.pod_metrics


def _requeued_at(backend: Cluster, job_id: str) -> float | None:
    """When the job last went back to the queue, as its watch hub knows it (None: never, or no hub)."""
    ns, name = naming.parse_job_id(job_id)
    hub = backend.state.hubs.get(ns)
    st = hub.status(name) if hub is not None else None
    times = [e.time for e in (st.events if st is not None else ()) if e.kind in ("preempted", "evicted", "requeued")]
    return max(times, default=None)


def _locate(backend: Cluster, job_id: str, ranks: list[int]) -> dict[int, str]:
    """Where the stalled ``ranks`` sit: each one's innermost user frame from a stack dump."""
    from ....progress import innermost_frame
    from ..control.stack_dump import stacks
    try:
        dumps = stacks(backend, job_id, timeout=3.0)
    except Exception:  # noqa: BLE001 - where they sit is a nicety; the flag stands without it
        return {}
    return {r: w for r, text in dumps.items() if r in ranks and (w := innermost_frame(text))}


def _keep_run(backend: Cluster, job_id: str, text: str) -> None:
    from . import archive
    try:
        archive.save_earlier_run(backend.home, job_id, text)
    except OSError:
        pass  # a courtesy: the job goes on
