"""How far past start forecasts were off, and the range that follows from it
(``expected_start_range``), per population of jobs.

Each forecast start that came true is kept as a pair (forecast wait ``E``, actual wait ``A``,
both from the moment of the forecast) in its population: (GPUs, priority), then GPUs alone,
then all jobs. The error of a forecast is the ratio ``r = (A + c) / (E + c)``, where ``c`` is
the mean actual wait of the population: a long wait's error is relative, a short one's is of
the size of the usual wait, not of itself (a forecast of 1 s that starts after 3 s is not 3x
off; many forecasts are "any moment" with ``E`` near 0, so ``c`` is not taken from ``E``). The range of a new forecast of wait ``E`` is ``((E + c) r_lo - c, (E + c) r_hi - c)``
with ``r_lo``, ``r_hi`` the ``RANGE_Q`` quantiles of the population's past ratios: the
empirical bounds that held for ``RANGE_Q[1] - RANGE_Q[0]`` of its past starts (the approach of
QBETS: Nurmi, Brevik and Wolski, "QBETS: queue bounds estimation from time series",
JSSPP 2007, which bounds queue waits by quantiles of observed ones). No further simulation:
the range costs two quantile look-ups. Before a population (or all jobs) has enough pairs, the
forecast falls back to the early and late simulations (docs/forecast.md).
"""
from __future__ import annotations

import math
from collections import defaultdict, deque
from typing import Iterable, Mapping

from .reasons import priority_rank
from .runtimes import quantile

RANGE_Q = (0.1, 0.9)  # the range holds about 80 % of starts (the target is 70-90 %)
ERRORS_KEEP = 200  # pairs kept per population (the most recent)
ERRORS_MIN = 20  # a population's own quantiles from this many pairs on
ERRORS_MIN_ALL = 10  # the pooled quantiles (all jobs) from this many


def size_class(gpus: float) -> str:
    """'0', '1', '2', '3-4', '5-8', '9-16', '17+' GPUs."""
    for hi, label in ((0, "0"), (1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16")):
        if gpus <= hi:
            return label
    return "17+"


def _recent() -> deque:
    return deque(maxlen=ERRORS_KEEP)


class StartErrors:
    """Past start forecasts against their actual starts, per population."""

    def __init__(self) -> None:
        self._pairs: dict[tuple, deque] = defaultdict(_recent)
        self._cache: dict[tuple, tuple[float, float, float, int] | None] = {}

    @staticmethod
    def keys(gpus: float, priority: int) -> tuple[tuple, ...]:
        """A job's populations, most specific first."""
        s = size_class(gpus)
        return ((s, priority), (s,), ())

    def add(self, gpus: float, priority: int, forecast_wait: float, actual_wait: float) -> None:
        """A forecast made ``forecast_wait`` s before its expected start; the job started
        ``actual_wait`` s after the forecast."""
        if not (math.isfinite(forecast_wait) and math.isfinite(actual_wait)):
            return
        pair = (max(0.0, forecast_wait), max(0.0, actual_wait))
        for key in self.keys(gpus, priority):
            self._pairs[key].append(pair)
            self._cache.pop(key, None)

    def __len__(self) -> int:
        return len(self._pairs.get((), ()))

    def _quantiles(self, key: tuple) -> tuple[float, float, float, int] | None:
        if key not in self._cache:
            pairs = list(self._pairs.get(key, ()))  # one copy (in C: a thread's add() cannot cut in)
            if len(pairs) < (ERRORS_MIN_ALL if key == () else ERRORS_MIN):
                self._cache[key] = None
            else:
                c = max(1e-3, sum(a for _, a in pairs) / len(pairs))
                ratios = sorted((a + c) / (e + c) for e, a in pairs)
                self._cache[key] = (c, quantile(ratios, RANGE_Q[0]), quantile(ratios, RANGE_Q[1]), len(pairs))
        return self._cache[key]

    def range(self, gpus: float, priority: int, now: float,
              expected: float) -> tuple[float, float, int, bool] | None:
        """(early, late, pairs it rests on, whether they are of its own size) around
        ``expected`` (epoch s) forecast at ``now``, from the most specific population with
        enough pairs; None when none has. Pairs of all sizes (the last population) say little of
        a rare size's error (eta_replay's 8-GPU jobs started inside such ranges 1 of 9 and 5
        of 10 times): the forecast widens those ranges (``simulate._calibrated``)."""
        for key in self.keys(gpus, priority):
            qs = self._quantiles(key)
            if qs is None:
                continue
            c, lo, hi, n = qs
            e = max(0.0, expected - now)
            early = now + max(0.0, (e + c) * lo - c)
            late = now + max(0.0, (e + c) * hi - c)
            return min(early, expected), max(late, expected), n, key != ()
        return None


FIRST_KEEP = 10_000  # queued jobs whose first forecast waits for their start (the oldest dropped)


class FirstForecasts:
    """Each queued job's first forecast with a start, kept until the job starts (its error then
    joins ``errors``) or goes. Both backends feed it: the local agent from its records' start
    events, Kubernetes from the Workloads' admission times (:meth:`score`)."""

    def __init__(self, errors: StartErrors, keep: int = FIRST_KEEP) -> None:
        self.errors = errors
        self.keep = keep
        self._first: dict[str, tuple[float, float, float, int]] = {}  # id -> (at, expected, gpus, priority)

    def __contains__(self, jid: object) -> bool:
        return jid in self._first

    def waiting(self) -> list[tuple[str, float]]:
        """(job id, when its first forecast was made) of the jobs not started yet."""
        return [(jid, v[0]) for jid, v in self._first.items()]

    def note(self, snap, cache: dict) -> None:
        """Keep the first forecast with a start of each of ``snap``'s pending jobs."""
        for j in snap.pending:
            fc = cache.get(j.id)
            if fc is not None and fc.expected_start is not None and j.id not in self._first:
                self._first[j.id] = (snap.now, fc.expected_start, j.workload.total().get("gpu", 0.0),
                                     priority_rank(snap, j.workload.priority))
        while len(self._first) > self.keep:
            del self._first[next(iter(self._first))]

    def started(self, jid: str, at: float) -> None:
        """``jid`` started at ``at`` (epoch s): its first forecast's error is kept, once."""
        first = self._first.pop(jid, None)
        if first is not None and at >= first[0] - 1.0:  # a Kubernetes time has whole seconds
            made, expected, gpus, prio = first
            self.errors.add(gpus, prio, expected - made, at - made)

    def forget(self, jid: str) -> None:
        """``jid`` went (deleted, or ended without starting): nothing to score."""
        self._first.pop(jid, None)

    def score(self, admitted: Mapping[str, float], pending: Iterable[str]) -> None:
        """Score the jobs ``admitted`` shows (id -> when) and forget those neither admitted nor
        ``pending`` (a view of the cluster's objects, where starts and ends leave no event)."""
        pending = set(pending)
        for jid, _ in self.waiting():
            if jid in admitted:
                self.started(jid, admitted[jid])
            elif jid not in pending:
                self.forget(jid)
