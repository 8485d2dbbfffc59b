"""The forecast's faster path gives what the straightforward one gives: the can-it-ever-fit check
of each queued job once per queue and request shape (not once per job, in each of the three
simulations). Oracle: the same generated states through both."""
from __future__ import annotations

import random

import pytest

from gpujobs.admission import ClusterQueue, Cohort, PodSet, Workload
from gpujobs.admission.forecast import History, Job, Snapshot, forecast

NOW = 1e6
STRATEGIES = ["BestEffortFIFO", "StrictFIFO"]


def state(seed: int) -> Snapshot:
    rng = random.Random(seed)
    qs = [ClusterQueue(f"q{i}", {"gpu": 4}, cohort=f"c{i % 3}" if i < 6 else None,
                       reclaim_within_cohort=rng.choice(["Never", "LowerPriority", "Any"]),
                       within_queue=rng.choice(["Never", "LowerPriority"]),
                       strategy=rng.choice(STRATEGIES)) for i in range(8)]
    h = History()
    for _ in range(60):
        h.add(f"u{rng.randrange(3)}", f"n{rng.randrange(4)}", f"q{rng.randrange(8)}", rng.uniform(30, 900),
              rng.choice([None, 1800.0]))
    running = []
    for i in range(8):
        for k in range(2):
            running.append(Job(Workload(f"r{i}-{k}", f"q{i}", [PodSet("r", rng.choice([1, 2]), {"gpu": 1})],
                                        priority=rng.choice(["low", "normal"]), created=NOW - 900),
                               user=f"u{k}", name=f"n{rng.randrange(4)}", started=NOW - rng.uniform(0, 600),
                               max_runtime_s=rng.choice([None, 600.0, 1200.0]),
                               expected_end=NOW + rng.uniform(10, 600) if rng.random() < 0.3 else None))
    pending = [Job(Workload(f"p{n}", f"q{rng.randrange(8)}", [PodSet("r", rng.choice([1, 2, 4]), {"gpu": 1})],
                            priority=rng.choice(["low", "normal", "high"]), created=NOW - 300 + n),
                   user=f"u{rng.randrange(3)}", name=f"n{rng.randrange(4)}",
                   max_runtime_s=rng.choice([None, 600.0, 1800.0])) for n in range(120)]
    return Snapshot(qs, [Cohort(f"c{i}") for i in range(3)], running=running, pending=pending, history=h, now=NOW)


def _checked_every_add(monkeypatch):
    """Every add asks whether the job can ever fit (the engine forgets the shapes it found to fit)."""
    from gpujobs.admission.engine import Engine
    real = Engine.add

    def add(self, w, check=True):
        self._fit.clear()
        return real(self, w, check=True)
    monkeypatch.setattr(Engine, "add", add)


@pytest.mark.parametrize("seed", range(4))
def test_checking_each_shape_once_gives_the_forecasts_of_checking_every_job(seed, monkeypatch):
    snap = state(seed)
    fast = forecast(snap)
    some = forecast(snap, ids=["p3", "p40", "p77"])
    assert sum(f.expected_start is not None for f in fast.values()) > 20
    assert sum(f.expected_start_range is not None for f in fast.values()) > 5
    _checked_every_add(monkeypatch)
    assert forecast(snap) == fast
    assert forecast(snap, ids=["p3", "p40", "p77"]) == some


def test_a_job_that_can_never_fit_is_still_refused_when_its_shape_repeats():
    from gpujobs.errors import QuotaError
    snap = state(0)
    too_big = [Job(Workload(f"big{k}", "q6", [PodSet("r", 8, {"gpu": 1})], created=NOW - 5)) for k in range(2)]
    with pytest.raises(QuotaError):
        forecast(Snapshot(snap.queues, snap.cohorts, running=snap.running, pending=[*snap.pending, *too_big],
                          history=snap.history, now=NOW))


def test_a_shape_that_fits_one_queue_is_still_refused_by_a_smaller_one():
    """The engine remembers which (queue, request shape) fit when all is idle, per queue."""
    from gpujobs.admission import Engine
    from gpujobs.errors import QuotaError
    eng = Engine([ClusterQueue("big", {"gpu": 8}), ClusterQueue("small", {"gpu": 2})])
    eng.add(Workload("a", "big", [PodSet("r", 4, {"gpu": 1})]))
    eng.add(Workload("b", "big", [PodSet("r", 4, {"gpu": 1})]))
    with pytest.raises(QuotaError):
        eng.add(Workload("c", "small", [PodSet("r", 4, {"gpu": 1})]))
    assert "c" not in eng and eng.pending() == ["a", "b"]
