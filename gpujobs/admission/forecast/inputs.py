"""What a forecast reads and gives: jobs (:class:`Job`), past runtimes (:class:`History`), the
queue at one moment (:class:`Snapshot`), the answer (:class:`Forecast`), and how a job's end
is estimated (progress, history, declared limit)."""
from __future__ import annotations

import math
import time
from bisect import bisect_right, insort
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..engine import Engine
from ..model import ClusterQueue, Cohort, Workload

SOURCES = ("progress", "history", "learned", "limit", "unknown")
HISTORY_KEEP = 50  # runtimes kept per (user, name, queue); ratios per user (and queue)
RATIO_MIN_RUNS = 3  # a user's actual/declared ratio is used from this many runs on
MODES = ("point", "early", "late")  # the expected start, and the two ends of its range
EARLY_Q, LATE_Q = 0.1, 0.9
PROGRESS_SPREAD = 0.25  # the range's ends around a progress rate's end: +-25 % of the time left  # runtime quantiles of the range's ends (benchmarks/RESULTS.md)
AHEAD_SHOWN = 3    # pending workloads named in a reason
BLOCKED_BY_MAX = 10  # pending ids ahead listed in blocked_by (holders are all listed)
HORIZON_S = 2 * 86400.0  # how far ahead starts are simulated (SLURM's bf_window is 1 day)
RANGE_HORIZON_S = 3 * 3600.0  # starts further ahead get no range (its two runs cost most there)


# ------------------------------------------------------------------ inputs
@dataclass
class Job:
    """One workload as the forecast sees it.

    Running: ``started`` (epoch s) and its ``flavor``; ``expected_end`` when a progress rate
    gives one; ``stops_at`` when it was preempted and is stopping (its grace deadline).
    """
    workload: Workload
    user: str = ""
    name: str = ""
    max_runtime_s: float | None = None
    grace_period_s: float = 30.0
    started: float | None = None
    flavor: str | Mapping[str, Mapping[str, str]] | None = None  # or Kueue's podSetAssignments
    expected_end: float | None = None
    stops_at: float | None = None
    preempted_by: str | None = None

    @property
    def id(self) -> str:
        return self.workload.id

    @property
    def label(self) -> str:
        return self.name or self.workload.id


class History:
    """Runtimes of finished runs, by (user, name, queue) and (user, name); and, per user (and
    queue), how much of its declared limit each run used (actual / declared), the predictor the
    backfilling literature finds better than the limits themselves (Tsafrir, Etsion and
    Feitelson, "Backfilling using system-generated predictions rather than user runtime
    estimates", IEEE TPDS 2007)."""

    def __init__(self) -> None:
        self._by: dict[tuple, list[float]] = defaultdict(list)  # kept sorted
        self._order: dict[tuple, list[float]] = defaultdict(list)  # insertion order (to drop old)

    def _keep(self, key: tuple, value: float) -> None:
        order, srt = self._order[key], self._by[key]
        order.append(value)
        insort(srt, value)
        if len(order) > HISTORY_KEEP:
            srt.remove(order.pop(0))

    def add(self, user: str, name: str, queue: str, runtime_s: float,
            limit_s: float | None = None) -> None:
        """One finished run (succeeded or failed: either gave its quota back) of ``runtime_s``;
        ``limit_s``: the limit it declared, when it did."""
        if runtime_s is None or runtime_s < 0 or not math.isfinite(runtime_s):
            return
        for key in ((user, name, queue), (user, name, None)):
            self._keep(key, runtime_s)
        if limit_s and limit_s > 0:
            ratio = min(1.0, runtime_s / limit_s)
            for key in (("ratio", user, queue), ("ratio", user, None)):
                self._keep(key, ratio)

    def __len__(self) -> int:
        return sum(len(v) for k, v in self._order.items() if k[0] != "ratio" and k[2] is not None)

    def runtime(self, user: str, name: str, queue: str, elapsed: float = 0.0,
                q: float = 0.5) -> float | None:
        """The ``q`` quantile (the median by default) of runtimes of similar runs that ran
        longer than ``elapsed``; None without any."""
        for key in ((user, name, queue), (user, name, None)):
            srt = self._by.get(key)
            if not srt:
                continue
            if elapsed > 0:
                srt = srt[bisect_right(srt, elapsed):]
                if not srt:
                    return None  # it already ran longer than every similar run
            return _quantile(srt, q)
        return None

    def ratio(self, user: str, queue: str, q: float = 0.5) -> float | None:
        """The ``q`` quantile of actual / declared runtime of this user's runs (in this queue,
        else any) once there are ``RATIO_MIN_RUNS``; None before."""
        for key in (("ratio", user, queue), ("ratio", user, None)):
            srt = self._by.get(key)
            if srt and len(srt) >= RATIO_MIN_RUNS:
                return _quantile(srt, q)
        return None


def _quantile(srt: Sequence[float], q: float) -> float:
    """Of a sorted list: the median as usual for q=0.5, else the nearest rank."""
    n = len(srt)
    if q == 0.5:
        return srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2
    return srt[min(n - 1, max(0, math.ceil(q * n) - 1))]


@dataclass
class Snapshot:
    """The queue configuration (as given to :class:`Engine`) and the workloads right now.

    ``running`` holds admitted workloads (stopping ones with ``stops_at``); ``pending`` the
    queued ones in the order they were queued (their ``created`` and priority decide the
    engine's order, the list order only breaks ties)."""
    queues: Sequence[ClusterQueue]
    cohorts: Sequence[Cohort] = ()
    priorities: Mapping[str, int] | None = None
    default_priority: str | int | None = None
    running: Sequence[Job] = ()
    pending: Sequence[Job] = ()
    history: History = field(default_factory=History)
    now: float = field(default_factory=time.time)
    flavors: Sequence | None = None  # ResourceFlavor objects, as given to Engine(flavors=...)
    kueue_version: str | None = None  # whose scheduler the simulation follows (gates.py; None: newest)

    def engine(self, clock: Callable[[], float] | None = None) -> Engine:
        kw: dict[str, Any] = {"flavors": self.flavors} if self.flavors is not None else {}
        return Engine(self.queues, self.cohorts, self.priorities, self.default_priority,
                      clock=clock or (lambda: self.now), kueue_version=self.kueue_version, **kw)


# ------------------------------------------------------------------ outputs
@dataclass
class Forecast:
    """What the forecast says about one pending workload."""
    id: str
    expected_start: float | None
    basis: str
    reason: str
    blocked_by: tuple[str, ...] = ()
    not_before: float | None = None  # a true lower bound on the start
    position: int | None = None
    admit_now: bool = False
    preempts: tuple[str, ...] = ()
    expected_start_range: tuple[float, float] | None = None  # (early, late) around expected_start


# ------------------------------------------------------------- estimation
def expected_runtime(job: Job, history: History, elapsed: float = 0.0,
                     mode: str = "point") -> tuple[float | None, str]:
    """(total runtime in s, source) for ``job`` having run ``elapsed`` s; (None, "unknown").

    ``point``: the median of similar runs ("history"), else the user's usual share of its
    declared limit ("learned"), else the limit plus the grace period ("limit": SIGKILL comes
    ``grace_period_s`` after SIGTERM at the limit). ``early``/``late``: the ``EARLY_Q``/``LATE_Q``
    quantiles of the same (``early`` without any: it can end now; ``late``: the limit and its
    grace, an upper bound, before any learned number). Never past limit + grace."""
    limit = job.max_runtime_s
    cap = float(limit) + job.grace_period_s if limit else None
    q = job.workload.queue
    qq = {"point": 0.5, "early": EARLY_Q, "late": LATE_Q}[mode]
    if mode == "late" and cap is not None:
        return max(cap, elapsed), "limit"
    hist = history.runtime(job.user, job.name, q, elapsed, qq)
    if hist is not None:
        return (min(hist, cap) if cap else hist), "history"
    if limit:
        ratio = history.ratio(job.user, q, qq)
        if ratio is not None and ratio * limit > elapsed:
            return ratio * float(limit), "learned"
    if mode == "early":
        return elapsed, "unknown"  # nothing known: it can end any moment
    if cap is not None and cap > elapsed:
        return cap, "limit"
    return None, "unknown"


def expected_end(job: Job, history: History, now: float, mode: str = "point") -> tuple[float | None, str]:
    """When a running job ends (epoch s) and on what that rests. A progress rate's end is
    trusted first, capped at start + limit + grace (the agent stops a run there); the range's
    ends put ``PROGRESS_SPREAD`` of its remaining time either side."""
    started = job.started if job.started is not None else now
    if job.expected_end is not None and job.expected_end >= now:
        prog = float(job.expected_end)
        cap = started + float(job.max_runtime_s) + job.grace_period_s if job.max_runtime_s else None
        if cap is not None:
            prog = min(prog, cap)
        spread = {"point": 0.0, "early": -PROGRESS_SPREAD, "late": PROGRESS_SPREAD}[mode]
        end = now + (1.0 + spread) * (prog - now)
        return max(now, min(end, cap) if cap is not None else end), "progress"
    elapsed = max(0.0, now - started)
    rt, src = expected_runtime(job, history, elapsed, mode)
    return (None if rt is None else max(now, started + rt)), src
