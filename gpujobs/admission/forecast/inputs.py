"""What a forecast reads and gives: jobs (:class:`Job`), past runtimes (:class:`History`), the
queue at one moment (:class:`Snapshot`), the answer (:class:`Forecast`), and how a job's end
is estimated (progress, history, declared limit)."""
from __future__ import annotations

import math
import time
from bisect import insort
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..engine import Engine
from ..model import ClusterQueue, Cohort, Workload

SOURCES = ("progress", "history", "limit", "unknown")
HISTORY_KEEP = 50  # runtimes kept per (user, name, queue)
AHEAD_SHOWN = 3    # pending workloads named in a reason
BLOCKED_BY_MAX = 10  # pending ids ahead listed in blocked_by (holders are all listed)
HORIZON_S = 2 * 86400.0  # how far ahead starts are simulated (SLURM's bf_window is 1 day)


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
    """Runtimes of finished jobs, by (user, name, queue); the median predicts similar jobs."""

    def __init__(self) -> None:
        self._by: dict[tuple, list[float]] = defaultdict(list)  # kept sorted
        self._order: dict[tuple, list[float]] = defaultdict(list)  # insertion order (to drop old)

    def add(self, user: str, name: str, queue: str, runtime_s: float) -> None:
        if runtime_s is None or runtime_s < 0 or not math.isfinite(runtime_s):
            return
        for key in ((user, name, queue), (user, name, None)):
            order, srt = self._order[key], self._by[key]
            order.append(runtime_s)
            insort(srt, runtime_s)
            if len(order) > HISTORY_KEEP:
                old = order.pop(0)
                srt.remove(old)

    def __len__(self) -> int:
        return sum(len(v) for k, v in self._order.items() if k[2] is not None)

    def runtime(self, user: str, name: str, queue: str, elapsed: float = 0.0) -> float | None:
        """Median runtime of similar jobs that ran longer than ``elapsed``; None without any."""
        for key in ((user, name, queue), (user, name, None)):
            srt = self._by.get(key)
            if not srt:
                continue
            if elapsed > 0:
                from bisect import bisect_right
                srt = srt[bisect_right(srt, elapsed):]
                if not srt:
                    return None  # it already ran longer than every similar job
            n = len(srt)
            return srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2
        return None


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

    def engine(self, clock: Callable[[], float] | None = None) -> Engine:
        kw: dict[str, Any] = {"flavors": self.flavors} if self.flavors is not None else {}
        return Engine(self.queues, self.cohorts, self.priorities, self.default_priority,
                      clock=clock or (lambda: self.now), **kw)


# ------------------------------------------------------------------ outputs
@dataclass
class Forecast:
    """What the forecast says about one pending workload."""
    id: str
    expected_start: float | None
    basis: str
    reason: str
    blocked_by: tuple[str, ...] = ()
    not_before: float | None = None
    position: int | None = None
    admit_now: bool = False
    preempts: tuple[str, ...] = ()


# ------------------------------------------------------------- estimation
def expected_runtime(job: Job, history: History, elapsed: float = 0.0) -> tuple[float | None, str]:
    """(total runtime in s, source) for ``job`` having run ``elapsed`` s; (None, "unknown")."""
    limit = job.max_runtime_s
    q = job.workload.queue
    hist = history.runtime(job.user, job.name, q, elapsed)
    if hist is not None:
        return (min(hist, limit) if limit else hist), "history"
    if limit and limit > elapsed:
        return float(limit), "limit"
    return None, "unknown"


def expected_end(job: Job, history: History, now: float) -> tuple[float | None, str]:
    """When a running job ends (epoch s) and on what that rests."""
    if job.expected_end is not None and job.expected_end >= now:
        return float(job.expected_end), "progress"
    started = job.started if job.started is not None else now
    elapsed = max(0.0, now - started)
    rt, src = expected_runtime(job, history, elapsed)
    if rt is None:
        return None, "unknown"
    return max(now, started + rt), src
