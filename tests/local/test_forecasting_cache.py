"""LocalForecasts recomputes at most once a second after changes (progress reports mark it
stale several times a second), at once for a queued job it has not seen, and every
REFRESH_S while asked. No processes: the forecast and the snapshot are stand-ins."""
from __future__ import annotations

from gpujobs.admission.forecast import Forecast, Snapshot
from gpujobs.backends.local import forecasting


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def make(monkeypatch, ids):
    calls = []
    clock = Clock()
    monkeypatch.setattr(forecasting.time, "monotonic", clock)

    def fake_forecast(snap):
        calls.append(clock.t)
        return {i: Forecast(i, 5.0, "declared limit", f"reason {i}") for i in ids}

    monkeypatch.setattr(forecasting, "forecast", fake_forecast)
    lf = forecasting.LocalForecasts(agent=None, admission_config={})
    monkeypatch.setattr(lf, "snapshot", lambda: Snapshot([]))
    return lf, calls, clock


def test_changes_recompute_at_most_once_a_second(monkeypatch):
    ids = ["a", "b"]
    lf, calls, clock = make(monkeypatch, ids)
    assert lf.fields("a")["reason"] == "reason a" and len(calls) == 1
    for _ in range(10):  # ten progress reports within the same second
        lf.stale()
        clock.t += 0.05
        lf.fields("a")
        lf.fields("b")
    assert len(calls) == 1
    clock.t += 1.0
    assert lf.fields("b")["expected_start"] == 5.0 and len(calls) == 2  # stale and 1 s old
    lf.fields("a")
    assert len(calls) == 2  # not stale: cached
    clock.t += forecasting.REFRESH_S + 0.1
    lf.fields("a")
    assert len(calls) == 3  # too old: time-left texts are refreshed


def test_a_new_queued_job_is_computed_at_once_and_an_unknown_one_only_once(monkeypatch):
    ids = ["a"]
    lf, calls, clock = make(monkeypatch, ids)
    lf.fields("a")
    ids.append("new")  # submitted a moment later
    lf.stale()
    assert lf.fields("new")["reason"] == "reason new" and len(calls) == 2
    assert lf.fields("ghost") == {} and len(calls) == 3
    assert lf.fields("ghost") == {} and len(calls) == 3  # a miss does not recompute again
