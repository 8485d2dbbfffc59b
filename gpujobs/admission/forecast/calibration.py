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

The same pairs correct the point: the expected start becomes ``(E + c) r_50 - c``, the median
of the range's distribution, so a population whose starts came later (or earlier) than simulated
at the median (jobs of higher priority submitted after it that went ahead, smaller jobs that fit
first, the agent's own time from admission to start) is forecast that much later. The pairs keep
the simulated wait, never the corrected one (no feedback). A population with fewer pairs than
``ERRORS_MIN`` but at least ``SHIFT_MIN`` takes the quantiles of the larger population it
belongs to, scaled by its own median ratio over that population's (per-size scaling: the few
8-GPU jobs of a machine keep their own bias, with the spread of all jobs).
"""
from __future__ import annotations

import math
from collections import defaultdict, deque

from .runtimes import quantile

RANGE_Q = (0.1, 0.9)  # the range holds about 80 % of starts (the target is 70-90 %)
ERRORS_KEEP = 200  # pairs kept per population (the most recent)
ERRORS_MIN = 20  # a population's own quantiles from this many pairs on
ERRORS_MIN_ALL = 10  # the pooled quantiles (all jobs) from this many
SHIFT_MIN = 5  # a smaller population's own median scales a larger one's quantiles from this many


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
        self._cache: dict[tuple, tuple | float | None] = {}  # per key its quantiles; medians

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
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._pairs.get((), ()))

    def _quantiles(self, key: tuple) -> tuple[float, float, float, float, int] | None:
        if key not in self._cache:
            pairs = self._pairs.get(key, ())
            if len(pairs) < (ERRORS_MIN_ALL if key == () else ERRORS_MIN):
                self._cache[key] = None
            else:
                c = max(1e-3, sum(a for _, a in pairs) / len(pairs))
                ratios = sorted((a + c) / (e + c) for e, a in pairs)
                self._cache[key] = (c, quantile(ratios, RANGE_Q[0]), quantile(ratios, 0.5),
                                    quantile(ratios, RANGE_Q[1]), len(pairs))
        return self._cache[key]  # type: ignore[return-value]

    def _median(self, key: tuple, c: float) -> float | None:
        """The median ratio of a population's pairs with scale ``c`` (None below ``SHIFT_MIN``)."""
        pairs = self._pairs.get(key, ())
        if len(pairs) < SHIFT_MIN:
            return None
        ck = ("median", key, c)
        if ck not in self._cache:
            self._cache[ck] = quantile(sorted((a + c) / (e + c) for e, a in pairs), 0.5)
        return self._cache[ck]  # type: ignore[return-value]

    def estimate(self, gpus: float, priority: int, now: float,
                 expected: float) -> tuple[float, float, float, int] | None:
        """(point, early, late, pairs it rests on) for a simulated start ``expected`` (epoch s)
        forecast at ``now``: the median and the ``RANGE_Q`` quantiles of the most specific
        population with enough pairs, scaled by a more specific one's own median when that has
        ``SHIFT_MIN`` (module docstring); None when no population has enough."""
        keys = self.keys(gpus, priority)
        for i, key in enumerate(keys):
            qs = self._quantiles(key)
            if qs is None:
                continue
            c, lo, med, hi, n = qs
            for small in keys[:i]:  # the most specific population with a few pairs of its own
                own = self._median(small, c)
                if own is not None:
                    scale = own / med
                    lo, med, hi = lo * scale, own, hi * scale
                    n = len(self._pairs[small])
                    break
            e = max(0.0, expected - now)
            point = now + max(0.0, (e + c) * med - c)
            early = now + max(0.0, (e + c) * lo - c)
            late = now + max(0.0, (e + c) * hi - c)
            return point, min(early, point), max(late, point), n
        return None

    def range(self, gpus: float, priority: int, now: float, expected: float) -> tuple[float, float, int] | None:
        """(early, late, pairs it rests on) of :meth:`estimate`; None when it has none."""
        est = self.estimate(gpus, priority, now, expected)
        return None if est is None else (est[1], est[2], est[3])
