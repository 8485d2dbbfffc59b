"""What a forecast reads and gives: jobs (:class:`Job`), past runtimes (:class:`History`), the
queue at one moment (:class:`Snapshot`), the answer (:class:`Forecast`), and how a job's end
is estimated (progress, history, declared limit)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..engine import Engine
from ..model import ClusterQueue, Cohort, Workload
from .runtimes import HISTORY_KEEP, PREDICTORS, History

if TYPE_CHECKING:
    from .calibration import StartErrors

# where an end (or, "stop", a preempted job's exit) comes from, in the order a basis names them
SOURCES = ("progress", "history", "learned", "limit", "stop", "arrival", "unknown")
__all__ = ["SOURCES", "HISTORY_KEEP", "History", "Job", "Snapshot", "Forecast", "expected_runtime", "expected_end",
           "stop_after"]
MODES = ("point", "early", "late")  # the expected start, and the two ends of its range
EARLY_Q, LATE_Q = 0.1, 0.9
PROGRESS_SPREAD = 0.25  # the range's ends around a progress rate's end: +-25 % of the time left
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
    ``kind``: what its similar runs in :class:`History` are filed under with ``user`` and the
    queue (``name`` when empty; on Kubernetes the job's name label, ``name`` being its id).
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
    kind: str = ""

    @property
    def similar(self) -> str:
        """The name its similar runs share in :class:`History`."""
        return self.kind or self.name

    @property
    def id(self) -> str:
        return self.workload.id

    @property
    def label(self) -> str:
        return self.name or self.workload.id


@dataclass
class Snapshot:
    """The queue configuration (as given to :class:`Engine`) and the workloads right now.

    ``running`` holds admitted workloads (stopping ones with ``stops_at``); ``pending`` the
    queued ones in the order they were queued (their ``created`` and priority decide the
    engine's order, the list order only breaks ties); ``arrivals`` jobs not submitted yet,
    expected at the times given (:class:`~.arrivals.Arrivals`): the point and late runs queue
    them then, the early run leaves them out."""
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
    start_errors: StartErrors | None = None  # past start forecasts' errors: the ranges (calibration.py)
    arrivals: Sequence[tuple[float, Job]] = ()  # (time, job) expected to be submitted later (arrivals.py)
    requeue_delay_s: float = 0.0  # Engine(requeue_delay_s=): Kueue's requeueBatchPeriod on Kubernetes

    def engine(self, clock: Callable[[], float] | None = None) -> Engine:
        kw: dict[str, Any] = {"flavors": self.flavors} if self.flavors is not None else {}
        return Engine(self.queues, self.cohorts, self.priorities, self.default_priority,
                      clock=clock or (lambda: self.now), kueue_version=self.kueue_version,
                      requeue_delay_s=self.requeue_delay_s, **kw)


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
                     mode: str = "point", q: float | None = None) -> tuple[float | None, str]:
    """(total runtime in s, source) for ``job`` having run ``elapsed`` s; (None, "unknown").

    ``point``: the predictor (``PREDICTORS``: the median of similar runs "history", the user's
    usual share of its declared limit "learned", the limit plus the grace period "limit":
    SIGKILL comes ``grace_period_s`` after SIGTERM at the limit) whose past error for this kind
    is smallest (:meth:`History.ranked`), else the first with a number in that order.
    ``early``/``late``: the ``EARLY_Q``/``LATE_Q`` quantiles of history and learned share
    (``early`` without any: it can end now; ``late``: the limit and its grace, an upper bound,
    before any learned number). Never past limit + grace. ``q``: in the point mode, that
    quantile of each predictor in place of the median (``benchmarks/eta_oracle.py`` draws
    runtimes with it)."""
    limit = job.max_runtime_s
    cap = float(limit) + job.grace_period_s if limit else None
    queue = job.workload.queue
    qq = {"point": 0.5 if q is None else q, "early": EARLY_Q, "late": LATE_Q}[mode]
    if mode == "late" and cap is not None:
        return max(cap, elapsed), "limit"
    order = history.ranked(job.user, job.similar, queue) if mode == "point" else PREDICTORS
    for src in order:
        if src == "limit" and mode == "early":
            continue  # nothing known but the limit: it can end any moment
        v = history.predict(src, job.user, job.similar, queue, limit, job.grace_period_s, elapsed, qq)
        if v is None:
            continue
        if src == "history" or v > elapsed:
            return v, src
    if mode == "early":
        return elapsed, "unknown"
    return None, "unknown"


def stop_after(job: Job, history: History, mode: str = "point") -> tuple[float, str]:
    """(seconds from its preemption to its exit, source) for a preempted ``job``: its grace
    period ("limit": the agent kills it then), or, in the point run, the median time this
    kind's preempted runs took to stop when that is shorter ("stop"); 0 in the early run."""
    grace = float(job.grace_period_s)
    if mode == "early":
        return 0.0, "stop"
    learned = history.stop_time(job.user, job.similar) if mode == "point" else None
    if learned is not None and learned < grace:
        return learned, "stop"
    return grace, "limit"


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
