"""Why a workload waits and when it will start: a forward simulation with the admission engine.

The forecast builds a fresh :class:`~gpujobs.admission.Engine` from the same queue
configuration and the current workloads (running ones restored where they are, pending ones
queued in their order) and plays time forward: running workloads end at their expected end,
evicted ones stop when their grace period runs out and queue again, and every
``schedule()`` pass admits and preempts exactly as the real engine would. Only the engine's
public API is used, so the forecast follows whatever the engine decides.

Expected ends, in the order they are trusted (``basis``):

- ``progress``: the running job's own ``expected_end`` (from its reported progress rate);
- ``history``: the median runtime of finished runs of the same user/name/queue (for a
  running job: of those that ran longer than it has so far; longer than all of them, the
  median of a log-normal fitted to them, given how long it ran), capped at its limit + grace;
- ``learned``: its declared limit times the median share of their limits this user's runs
  used (Tsafrir, Etsion, Feitelson: system-generated predictions beat user estimates);
- ``limit``: its declared ``max_runtime_s`` plus ``grace_period_s`` (SIGKILL comes that long
  after SIGTERM at the limit): an upper bound of the run;
- nothing: the end is **unknown**. Quota it holds is never given back in the simulation, so
  the jobs waiting on it get ``expected_start=None``.

The point predictor of a kind is the one whose past error for that kind is smallest
(:mod:`.runtimes`); a preempted job stops after the median stop time of its kind's past
preemptions when that is shorter than its grace period ("stop").

Every forecast carries ``not_before``, a true lower bound (any job holding quota may end at
any moment, so nothing later than the forecast's own time is certain), and, with an expected
start within ``RANGE_HORIZON_S``, ``expected_start_range`` (early, late): from the quantiles of
past forecasts' errors of its population (:mod:`.calibration`, ``Snapshot.start_errors``)
once there are enough, else from two more runs with the ``EARLY_Q`` and ``LATE_Q`` runtime
quantiles (the late run: declared limits + grace, where declared).

Entry points: :func:`forecast` (every pending workload) and :func:`plan` (a what-if for one
more workload, nothing submitted). Both take a :class:`Snapshot`. See docs/forecast.md.

Jobs not submitted yet: ``Snapshot.arrivals``, the arrivals the recent submissions make
expected (:mod:`.arrivals`). A job's expected start counts those that come before it would
start without them (one more run with them queued at their times; the engine decides which go
ahead: a higher priority, a smaller shape that fits first); the late run counts them too, the
early one does not.

Modules: ``inputs`` (Job, History, Snapshot, Forecast, expected ends), ``simulate`` (the run,
:func:`forecast`, :func:`plan`), ``reasons`` (why a workload waits, in words), ``runtimes``
(expected runtimes), ``calibration`` (ranges from past forecasts' errors), ``arrivals``
(expected arrivals).
"""
from .arrivals import ARRIVALS_KEEP, Arrivals
from .calibration import RANGE_Q, StartErrors
from .inputs import (AHEAD_SHOWN, BLOCKED_BY_MAX, EARLY_Q, HISTORY_KEEP, HORIZON_S, LATE_Q, MODES, RANGE_HORIZON_S, SOURCES,
                     Forecast, History, Job, Snapshot, expected_end, expected_runtime)
from .runtimes import PREDICTORS
from .reasons import duration
from .simulate import forecast, plan

__all__ = ["Job", "History", "StartErrors", "Arrivals", "ARRIVALS_KEEP", "Snapshot", "PREDICTORS", "RANGE_Q", "Forecast", "forecast", "plan", "expected_runtime", "expected_end",
           "duration", "SOURCES", "MODES", "EARLY_Q", "LATE_Q", "RANGE_HORIZON_S", "HISTORY_KEEP", "AHEAD_SHOWN", "BLOCKED_BY_MAX", "HORIZON_S"]
