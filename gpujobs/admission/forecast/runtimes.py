"""What past runs teach: how long runs of a kind last (:class:`History`), which predictor of a
run's length has been closest for each kind, and how long preempted runs took to stop.

Runtime predictors (``PREDICTORS``, in the order used while none has a record): the median of
similar runs ("history"), the declared limit times the user's usual share of it ("learned"),
the declared limit plus the grace period ("limit"). Each finished run first scores every
predictor that had a number for it (the absolute error, in seconds, of what it would have
said at the run's start), then joins the history. A kind's runs are then predicted by
the predictor that was closer on the kind's last ``HISTORY_KEEP`` runs: two predictors are
compared on the runs both had a number for (from ``SCORE_MIN`` such runs on; smaller mean
absolute error wins), the one that wins most comparisons first, ties in the default order:
where users' limits are tight (jobs that run to their limit) the
limit wins, where they overestimate, history or the learned share do (Tsafrir, Etsion and
Feitelson, "Backfilling using system-generated predictions rather than user runtime
estimates", IEEE TPDS 18(6), 2007).
"""
from __future__ import annotations

import math
import statistics
from bisect import bisect_right, insort
from collections import defaultdict, deque
from statistics import NormalDist
from typing import Sequence

HISTORY_KEEP = 50  # runtimes kept per (user, name, queue); ratios per user (and queue); scores per kind
RATIO_MIN_RUNS = 3  # a user's actual/declared ratio is used from this many runs on
SCORE_MIN = 3  # a predictor's past error decides from this many scored runs of the kind on
STOP_MIN = 3  # preempted runs' stop times are used from this many on
FIT_MIN = 2  # similar runs a log-normal is fitted to, for a run longer than all of them (beyond)
PREDICTORS = ("history", "learned", "limit")  # point predictors of a run's length (default order)


def quantile(srt: Sequence[float], q: float) -> float:
    """Of a sorted list: the median as usual for q=0.5, else the nearest rank."""
    n = len(srt)
    if q == 0.5:
        return srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2
    return srt[min(n - 1, max(0, math.ceil(q * n) - 1))]


def beyond(srt: Sequence[float], elapsed: float, q: float = 0.5) -> float | None:
    """The ``q`` quantile of a run that has lasted ``elapsed``, longer than every run in
    ``srt``: of the log-normal fitted to them (mean and spread of their logs), given it lasted
    that long; None with fewer than ``FIT_MIN`` runs or no spread. (Before, such a run fell to
    the declared limit + grace: 24 s late at the median on eta_replay's runs.)"""
    if len(srt) < FIT_MIN:
        return None
    logs = [math.log(max(v, 1e-3)) for v in srt]
    mu, sd = statistics.fmean(logs), statistics.pstdev(logs)
    return lognormal_given(mu, sd, elapsed, q) if sd > 0 else None


def lognormal_given(mu: float, sd: float, elapsed: float, q: float = 0.5) -> float:
    """The ``q`` quantile of a log-normal run length (``mu``, ``sd`` of its log) given that
    the run has lasted ``elapsed`` s (never less than that)."""
    dist = NormalDist(mu, sd)
    p = dist.cdf(math.log(max(elapsed, 1e-3)))
    return max(elapsed, math.exp(dist.inv_cdf(min(p + (1.0 - p) * q, 1.0 - 1e-12))))


class History:
    """Runtimes of finished runs, by (user, name, queue) and (user, name); per user (and queue)
    how much of its declared limit each run used (actual / declared); per kind the past errors of
    each predictor (``PREDICTORS``); and how long preempted runs took to stop."""

    def __init__(self) -> None:
        self._by: dict[tuple, list[float]] = defaultdict(list)  # kept sorted
        self._order: dict[tuple, list[float]] = defaultdict(list)  # insertion order (to drop old)
        self._errors: dict[tuple, deque] = {}  # kind -> per run {predictor: absolute error (s)}
        self._best: dict[tuple, tuple[str, ...]] = {}  # kind -> predictors, closest first (cache)

    def _keep(self, key: tuple, value: float) -> None:
        order, srt = self._order[key], self._by[key]
        order.append(value)
        insort(srt, value)
        if len(order) > HISTORY_KEEP:
            srt.remove(order.pop(0))

    def add(self, user: str, name: str, queue: str, runtime_s: float,
            limit_s: float | None = None, grace_s: float = 30.0) -> None:
        """One finished run (succeeded or failed: either gave its quota back) of ``runtime_s``;
        ``limit_s``: the limit it declared, when it did (``grace_s``: its grace period)."""
        if runtime_s is None or runtime_s < 0 or not math.isfinite(runtime_s):
            return
        for key in ((user, name, queue), (user, name, None)):  # scored before it counts itself
            errs = {src: abs(guess - runtime_s) for src in PREDICTORS
                    if (guess := self.predict(src, user, name, queue, limit_s, grace_s)) is not None}
            if errs:
                self._errors.setdefault(key, deque(maxlen=HISTORY_KEEP)).append(errs)
                self._best.pop(key, None)
        for key in ((user, name, queue), (user, name, None)):
            self._keep(key, runtime_s)
        if limit_s and limit_s > 0:
            ratio = min(1.0, runtime_s / limit_s)
            for key in (("ratio", user, queue), ("ratio", user, None)):
                self._keep(key, ratio)

    def add_stop(self, user: str, name: str, seconds: float) -> None:
        """A preempted run took ``seconds`` from its preemption to its exit (quota back)."""
        if seconds is not None and seconds >= 0 and math.isfinite(seconds):
            for key in (("stop", user, name), ("stop", None, None)):
                self._keep(key, seconds)

    def __len__(self) -> int:
        return sum(len(v) for k, v in self._order.items() if k[0] not in ("ratio", "stop") and k[2] is not None)

    # ------------------------------------------------------------ predictors
    def runtime(self, user: str, name: str, queue: str, elapsed: float = 0.0,
                q: float = 0.5) -> float | None:
        """The ``q`` quantile (the median by default) of runtimes of similar runs that ran
        longer than ``elapsed``; past all of them, :func:`beyond`'s; None without any."""
        for key in ((user, name, queue), (user, name, None)):
            srt = self._by.get(key)
            if not srt:
                continue
            if elapsed > 0:
                longer = srt[bisect_right(srt, elapsed):]
                if not longer:  # it already ran longer than every similar run
                    return beyond(srt, elapsed, q)
                srt = longer
            return quantile(srt, q)
        return None

    def ratio(self, user: str, queue: str, q: float = 0.5) -> float | None:
        """The ``q`` quantile of actual / declared runtime of this user's runs (in this queue,
        else any) once there are ``RATIO_MIN_RUNS``; None before."""
        for key in (("ratio", user, queue), ("ratio", user, None)):
            srt = self._by.get(key)
            if srt and len(srt) >= RATIO_MIN_RUNS:
                return quantile(srt, q)
        return None

    def predict(self, src: str, user: str, name: str, queue: str, limit_s: float | None,
                grace_s: float, elapsed: float = 0.0, q: float = 0.5) -> float | None:
        """What predictor ``src`` says a run of this kind lasts (None: it has no number)."""
        cap = float(limit_s) + grace_s if limit_s else None
        if src == "history":
            h = self.runtime(user, name, queue, elapsed, q)
            return None if h is None else (min(h, cap) if cap is not None else h)
        if src == "learned":
            r = self.ratio(user, queue, q) if limit_s else None
            return None if r is None or limit_s is None else r * float(limit_s)
        return cap  # "limit"

    def ranked(self, user: str, name: str, queue: str) -> tuple[str, ...]:
        """``PREDICTORS`` for this kind, the one that was closer on its past runs first (see the
        module's docstring); the default order while nothing was compared."""
        for key in ((user, name, queue), (user, name, None)):
            runs = self._errors.get(key)
            if not runs:
                continue
            best = self._best.get(key)
            if best is None:
                wins = dict.fromkeys(PREDICTORS, 0)
                for i, a in enumerate(PREDICTORS):
                    for b in PREDICTORS[i + 1:]:
                        both = [(r[a], r[b]) for r in runs if a in r and b in r]
                        if len(both) >= SCORE_MIN:
                            ea, eb = sum(x for x, _ in both), sum(y for _, y in both)
                            if abs(ea - eb) > 1e-9 * max(ea, eb, 1.0):  # float noise is a tie
                                wins[a if ea < eb else b] += 1
                best = self._best[key] = tuple(sorted(PREDICTORS, key=lambda s: (-wins[s], PREDICTORS.index(s))))
            return best
        return PREDICTORS

    def stop_time(self, user: str, name: str, q: float = 0.5) -> float | None:
        """The ``q`` quantile of how long this kind's preempted runs took to stop (else all
        kinds'), from ``STOP_MIN`` of them; None before."""
        for key in (("stop", user, name), ("stop", None, None)):
            srt = self._by.get(key)
            if srt and len(srt) >= STOP_MIN:
                return quantile(srt, q)
        return None
