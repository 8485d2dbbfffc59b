"""gpujobs.queue() and the queue widget against the real local backend (a genuinely busy queue)."""
from __future__ import annotations

import time

import pytest

import gpujobs
from gpujobs.views.widgets import QueueWidget


def hold(seconds: float) -> str:
    import time as _t
    _t.sleep(seconds)
    return "held"


@pytest.mark.slow
def test_queue_view_shows_positions_of_a_busy_local_queue(nb_env, monkeypatch, recording_comm,
                                                          no_leftovers):
    monkeypatch.setenv("GPUJOBS_LOCAL_GPUS", "2")
    first = gpujobs.submit(hold, 30, gpus=2, name="first")
    second = gpujobs.submit(hold, 30, gpus=2, name="second")
    try:
        q = gpujobs.queue("default")
        deadline = time.monotonic() + 30
        frame = q.to_pandas()
        while time.monotonic() < deadline:
            frame = q.to_pandas().set_index("name")
            if frame.loc["first", "phase"] == "running" and frame.loc["second", "phase"] == "queued":
                break
            time.sleep(0.2)
        assert frame.loc["first", "phase"] == "running", frame
        assert frame.loc["second", "phase"] == "queued" and frame.loc["second", "position"] == 1
        assert frame.loc["second", "gpus"] == 2 and frame.loc["first", "gang"] == "2/2"
        assert second.status().position_text() == "1st in default"

        w = QueueWidget(lambda: gpujobs.jobs("default"), title="queue default", refresh_s=0.2)
        assert "second" in w.table.value and "gpujobs-phase-queued" in w.table.value
        first.cancel()  # the queue moves: second is admitted
        deadline = time.monotonic() + 30
        while "gpujobs-phase-queued" in w.table.value and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "gpujobs-phase-queued" not in w.table.value
        assert "gpujobs-phase-cancelled" in w.table.value
        w.close()
    finally:
        for j in (first, second):
            j.cancel()
    for j in (first, second):
        assert j.wait(30).phase == "cancelled"
        no_leftovers(j.id, within=10)
