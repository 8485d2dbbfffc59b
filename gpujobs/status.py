"""One status model for every backend, view and command.

Backends translate their world (local agent records, Kueue Workloads, PodGroups,
job conditions) into :class:`JobStatus`; the Job handle, the widgets and the CLI
read nothing else.
"""
from __future__ import annotations

import time
from copy import deepcopy
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .rank.wire import GpuSample

PHASES = ("queued", "admitted", "starting", "running", "succeeded", "failed", "cancelled",
          "preempted")
TERMINAL_PHASES = frozenset({"succeeded", "failed", "cancelled"})
TIME_LIMIT = "time-limit"  # JobStatus.reason of a run stopped at its max_runtime_s, on every backend


def time_limit_message(ran_s: float | None, limit_s: float | None) -> str:
    """The message of a run stopped at its limit (the local agent's, and on Kubernetes the
    job's own ``activeDeadlineSeconds``: DeadlineExceeded), with the fix."""
    ran = f"it ran {ran_s:.0f} s, " if ran_s is not None else ""
    lim = f"max_runtime_s is {limit_s:g}; " if limit_s else ""
    return (f"stopped at its time limit: {ran}{lim}for a longer run submit with .max_runtime(SECONDS) "
            "(CLI: --time SECONDS)")


@dataclass(frozen=True)
class JobEvent:
    """One entry of a job's timeline."""
    time: float
    kind: str  # submitted, queued, admitted, started, preempted, requeued, finished, …
    message: str = ""


@dataclass(frozen=True)
class Progress:
    """How far a job is, from ``ctx.progress(step, total, **metrics)`` in its ranks.

    ``rate`` is steps per second over the recent reports; ``expected_end`` (epoch seconds)
    is ``updated + (total - step) / rate`` when both are known; ``updated`` is when the
    last report was made (epoch seconds, the rank's clock)."""
    step: float
    total: float | None = None
    rate: float | None = None
    expected_end: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    updated: float = 0.0
    rank: int = 0

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return max(0.0, min(1.0, self.step / self.total))

    def text(self, now: float | None = None) -> str:
        """'step 40/100 (40%) · 3.2 steps/s · 19 s left'."""
        step = _num_text(self.step)
        parts = [f"step {step}/{_num_text(self.total)} ({100 * (self.fraction or 0):.0f}%)"
                 if self.total else f"step {step}"]
        if self.rate:
            parts.append(f"{self.rate:.3g} steps/s" if self.rate >= 0.1 else
                         f"{60 * self.rate:.3g} steps/min")
        if self.expected_end is not None:
            left = self.expected_end - (time.time() if now is None else now)
            parts.append(f"{duration_text(max(0.0, left))} left")
        return " · ".join(parts)


    def short_text(self, now: float | None = None, ended: bool = False) -> str:
        """Coarse, for one-line summaries that print when they change: '40% · ~3 min left'
        (whole percent, whole minutes), or 'step ~1.2k' without a total; ``ended``: no time
        left (the job is over)."""
        if not self.total:
            return f"step ~{_sig2(self.step)}"
        parts = [f"{100 * (self.fraction or 0):.0f}%"]
        if self.expected_end is not None and not ended:
            left = max(0.0, self.expected_end - (time.time() if now is None else now))
            parts.append("<1 min left" if left < 60 else f"~{round(left / 60)} min left"
                         if left < 5400 else f"~{left / 3600:.1f} h left")
        return " · ".join(parts)


def _sig2(x: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2g}{unit}"
    return f"{x:.2g}" if abs(x) >= 10 else f"{x:g}"


def _num_text(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"


def duration_text(seconds: float) -> str:
    """'42 s', '3 min 5 s', '2 h 10 min'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


@dataclass(frozen=True)
class JobStatus:
    """Where a job is. ``queue_position`` is 1-based (1 = next), None unless queued."""
    job_id: str
    phase: str
    name: str = ""
    backend: str = "local"
    queue: str = ""
    priority: str | None = None
    user: str = ""
    gpus: int = 0
    queue_position: int | None = None
    position_available: bool = True
    gang_ready: int = 0
    gang_size: int = 0
    message: str = ""
    reason: str = ""  # queued: why it waits (human); ended: a short cause (lost, rank-failed, …)
    blocked_by: tuple[str, ...] = ()  # queued: ids ahead of it or holding its quota
    expected_start: float | None = None  # queued: forecast start (epoch s), None: nothing to go on
    expected_start_basis: str = ""  # what the forecast rests on (see docs/forecast.md)
    not_before: float | None = None  # queued: a true lower bound on the start (epoch s; docs/forecast.md), or None
    expected_start_range: tuple[float, float] | None = None  # queued: (early, late) around expected_start
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    cpu_ranks: bool = False  # ranks run on CPU because no GPU was found
    restarts: int = 0
    events: tuple[JobEvent, ...] = ()
    metrics: tuple[GpuSample, ...] = ()  # latest sample per (rank, device)
    progress: Progress | None = None  # the latest ctx.progress() report (with rate, expected end)
    stalled_since: float | None = None  # epoch seconds its quiet ranks went quiet; None = not stalled
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {PHASES}")
        if not isinstance(self.blocked_by, tuple):  # e.g. a list from JSON
            object.__setattr__(self, "blocked_by", tuple(self.blocked_by or ()))
        if self.expected_start_range is not None and not isinstance(self.expected_start_range, tuple):
            object.__setattr__(self, "expected_start_range", tuple(self.expected_start_range))

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def elapsed(self) -> float | None:
        """Seconds running (so far, or until finished)."""
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    @property
    def waited(self) -> float | None:
        """Seconds between submission and start (or now, if not started)."""
        if self.submitted_at is None:
            return None
        return (self.started_at or time.time()) - self.submitted_at

    def with_(self, **changes: Any) -> "JobStatus":
        return replace(self, **changes)

    @property
    def stale_note(self) -> str:
        """The "not current: …" note of the message (see :meth:`not_current`), or ''."""
        return str(self.extra.get("stale_note") or "")

    def not_current(self, since: float, why: str, source: str = "the cluster") -> "JobStatus":
        """This status marked as possibly out of date: its message starts with "not current: no
        news from SOURCE since HH:MM:SS (WHY)", ``extra["stale_since"]`` is ``since`` and
        ``extra["stale_note"]`` the note. Read by the widgets, the CLI and the lab panel like any
        message; the next fresh status drops it."""
        note = f"not current: no news from {source} since {time.strftime('%H:%M:%S', time.localtime(since))} ({why})"
        old = self.stale_note
        rest = self.message.replace(f"{old} · ", "", 1).replace(old, "", 1) if old else self.message
        return replace(self, message=f"{note} · {rest}" if rest else note,  # one note, the newest
                       extra={**self.extra, "stale_since": since, "stale_note": note})

    def position_text(self) -> str:
        """'2nd in team-a', 'position unavailable', or ''."""
        if self.phase != "queued":
            return ""
        if self.queue_position is None:
            return "position unavailable" if not self.position_available else f"queued in {self.queue}"
        return f"{ordinal(self.queue_position)} in {self.queue}"

    def summary(self) -> str:
        """One line for terminals and logs."""
        parts = [f"{self.name or self.job_id}: {self.phase}"]
        pos = self.position_text()
        if pos:
            parts.append(pos)
        if self.phase == "queued" and (self.expected_start is not None or self.not_before is not None):
            parts.append(start_text(self.expected_start, not_before=self.not_before))
        if self.gang_size:
            parts.append(f"gang {self.gang_ready}/{self.gang_size}")
        if self.cpu_ranks:
            parts.append("ranks on CPU")
        if self.progress is not None:
            parts.append(self.progress.short_text(ended=self.terminal))
        if self.stalled_since is not None and self.extra.get("stall") and \
                str(self.extra["stall"]) not in self.message:
            parts.append(str(self.extra["stall"]))
        if self.message:
            parts.append(self.message)
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """What :func:`dataclasses.asdict` gives, plus ``terminal``; built field by field (the
        scalar and tuple-of-str fields need no copy), as every status request and job list
        encodes one per job and ``asdict``'s deep copy of each field was most of that."""
        d: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if name == "extra":
                value = deepcopy(value) if value else {}
            elif name in _NESTED and value:
                value = asdict(value) if name == "progress" else tuple(asdict(v) for v in value)
            d[name] = value
        d["terminal"] = self.terminal
        return d


_FIELDS = tuple(f.name for f in fields(JobStatus))
_NESTED = frozenset({"events", "metrics", "progress", "extra"})  # JobStatus.to_dict copies these


def restarts_text(st: JobStatus) -> str:
    """'restarted 2 times (preempted)': how often the job ran again, and why (its events)."""
    n = st.restarts
    why = sorted({e.kind for e in st.events if e.kind in ("preempted", "evicted", "lost")})
    return f"restarted {n} time{'s' if n != 1 else ''}" + (f" ({', '.join(why)})" if why else "")


def ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def start_when(when: float | None, now: float | None = None, not_before: float | None = None) -> str:
    """When a queued job starts, in the one wording every view uses: 'in ~25 s',
    'in ~12 min (14:05)', 'any moment (was due 10:02)' (the forecast start has passed),
    'not before 10:40' (no forecast, a lower bound later than now) or 'unknown'."""
    now = time.time() if now is None else now
    if when is None:
        if not_before is not None and not_before > now + 1:
            return f"not before {_hhmm(not_before, now)}"
        return "unknown"
    left = when - now
    if left <= 0:
        return "any moment" + (f" (was due {_hhmm(when, now)})" if left < -1 else "")
    # coarse on purpose (5 s, whole minutes): progress lines print when this text changes
    if left < 60:
        return f"in ~{max(5, 5 * round(left / 5))} s"
    if left < 5400:
        text = f"{max(1, round(left / 60))} min"
    elif left < 2 * 86400:
        text = f"{left / 3600:.1f} h"
    else:
        text = f"{left / 86400:.1f} d"
    return f"in ~{text} ({_hhmm(when, now)})"


def start_text(when: float | None, now: float | None = None, not_before: float | None = None) -> str:
    """'starts in ~12 min (14:05)', 'starts any moment (was due 10:02)', 'starts not before
    10:40' or 'start unknown' (:func:`start_when` with a verb)."""
    w = start_when(when, now, not_before)
    return "start unknown" if w == "unknown" else f"starts {w}"


def range_text(rng: tuple[float, float], now: float | None = None) -> str:
    """'between 10:02 and 10:40' (the expected start's range, docs/forecast.md)."""
    now = time.time() if now is None else now
    return f"between {_hhmm(max(rng[0], now), now)} and {_hhmm(max(rng[1], now), now)}"


def _hhmm(t: float, now: float) -> str:
    lt = time.localtime(t)
    return time.strftime("%H:%M" if lt[:3] == time.localtime(now)[:3] else "%b %d %H:%M", lt)


@dataclass(frozen=True)
class Plan:
    """What submitting a job now would do; nothing is submitted (``JobBuilder.plan()``).

    ``admit_now``: it would be admitted in the next scheduling pass. ``position``: its
    1-based place in its queue otherwise (None when admitted now or it can never fit).
    ``preempts``: ids it would evict. ``expected_start``: forecast start (epoch s), None when
    it rests on jobs whose end is unknown or it can never fit. ``not_before``: a true lower
    bound on the start: the moment of the forecast (any job holding quota may end, any job
    ahead be cancelled, at once), later only where something certain holds the job back.
    ``expected_start_range``: (early, late) around ``expected_start``, from past forecasts'
    errors or two more simulations (docs/forecast.md). ``reason``: why, in words; ``basis``:
    what the forecast rests on.
    """
    admit_now: bool
    position: int | None
    preempts: tuple[str, ...]
    expected_start: float | None
    reason: str
    basis: str = ""
    blocked_by: tuple[str, ...] = ()
    not_before: float | None = None
    queue: str = ""
    expected_start_range: tuple[float, float] | None = None

    @property
    def never(self) -> bool:
        """It can never fit its queue (submit would refuse it: QuotaError)."""
        return not self.admit_now and self.position is None and self.expected_start is None and \
            self.basis.startswith("never")

    def summary(self) -> str:
        if self.admit_now:
            head = "would be admitted now"
        elif self.never:
            head = "can never start"
        else:
            head = (f"would wait {ordinal(self.position)} in {self.queue}" if self.position
                    else "would wait") + f", {start_text(self.expected_start, not_before=self.not_before)}"
        if self.preempts:
            head += f", preempting {', '.join(self.preempts)}"
        return f"{head}: {self.reason}" if self.reason else head

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
