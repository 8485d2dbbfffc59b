"""Jobs not submitted yet: the arrivals to expect, from the recent ones (:class:`Arrivals`).

A job submitted later can still start first: with a higher priority it goes ahead (and may
preempt), and in a ``BestEffortFIFO`` queue a smaller one that fits is admitted before a large
head that does not. The forecast cannot know those jobs; it can expect them at the rate they
came. The recent submissions (the last ``ARRIVALS_KEEP``) over the time ``W`` they span are
split by class (queue, request shape, priority); a class with ``n`` of them is expected to
bring its ``i``-th next job at ``now + i W / n`` (the expected time of the ``i``-th event of a
Poisson process of rate ``n / W``), ``i`` = 1..n: the next ``W`` seconds bring what the last
``W`` brought, evenly spread, and nothing after (the simulation does not assume the load lasts
for ever). Each expected job is the class's latest submission again (its user, name, limit:
its runtime is predicted as that job's). A job's forecast queues, at those times, the ones
that come before it would start without them; the engine decides which go ahead
(:mod:`.simulate`, ``_with_arrivals``); where more would still pass it, its reason and range
say how late it gets while they come (``_overtaken``). Deterministic: the same recent jobs
give the same arrivals.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Hashable

from ..model import Workload
from .inputs import Job

ARRIVALS_KEEP = 50  # recent submissions the rates come from
ARRIVALS_MIN = 10  # no expected arrivals before this many submissions were seen


def _shape(w: Workload) -> Hashable:
    return tuple((ps.count, tuple(sorted(ps.requests.items()))) for ps in w.podsets)


class Arrivals:
    """The recent submissions, and the arrivals they make expected (:meth:`expected`)."""

    def __init__(self, keep: int = ARRIVALS_KEEP) -> None:
        self._recent: deque[tuple[float, Job]] = deque(maxlen=keep)

    def add(self, at: float, job: Job) -> None:
        """A job was submitted at ``at`` (epoch s)."""
        if math.isfinite(at):
            self._recent.append((at, job))

    def __len__(self) -> int:
        return len(self._recent)

    def expected(self, now: float) -> list[tuple[float, Job]]:
        """(time, job) of the arrivals expected after ``now``, in time order; none before
        ``ARRIVALS_MIN`` submissions were seen."""
        recent = [(t, j) for t, j in self._recent if t <= now]
        if len(recent) < ARRIVALS_MIN:
            return []
        span = now - min(t for t, _ in recent)
        if span <= 0:
            return []
        classes: dict[Hashable, list[Job]] = {}
        for _, j in sorted(recent, key=lambda x: x[0]):
            w = j.workload
            classes.setdefault((w.queue, _shape(w), w.priority), []).append(j)
        out = []
        for k, jobs in enumerate(classes.values()):
            n, tmpl = len(jobs), jobs[-1]
            for i in range(1, n + 1):
                at = now + i * span / n
                w = replace(tmpl.workload, id=f"(expected arrival {k}.{i})", created=at)
                out.append((at, replace(tmpl, workload=w, started=None, expected_end=None, stops_at=None,
                                        preempted_by=None, flavor=None)))
        out.sort(key=lambda x: (x[0], x[1].id))
        return out
