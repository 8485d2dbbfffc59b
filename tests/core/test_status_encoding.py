"""JobStatus.to_dict, the encoding of every status request and job list: what
dataclasses.asdict gives plus ``terminal``, and nothing in it shared with the status."""
from __future__ import annotations

from dataclasses import asdict

from gpujobs.rank.wire import GpuSample
from gpujobs.status import JobEvent, JobStatus, Progress


def full_status(**changes):
    fields = dict(
        job_id="j-1", phase="running", name="j", queue="default", priority="high", user="u",
        gpus=2, gang_ready=2, gang_size=2, blocked_by=("a", "b"), expected_start_range=(1.0, 2.0),
        submitted_at=1.0, started_at=2.0, restarts=1,
        events=(JobEvent(1.0, "submitted"), JobEvent(2.0, "started", "ok")),
        metrics=(GpuSample(2.0, 0, 0, 50.0, 1.0, 2.0, source="psutil"),),
        progress=Progress(3, 10, 0.5, 20.0, {"loss": [1.0, 0.5]}, 2.5),
        extra={"kueue": {"admitted": ["x"]}})
    return JobStatus(**{**fields, **changes})


def test_to_dict_is_asdict_plus_terminal():
    for st in (full_status(), JobStatus(job_id="j-2", phase="queued"),
               full_status(phase="failed", finished_at=3.0, exit_code=1)):
        assert st.to_dict() == {**asdict(st), "terminal": st.terminal}
        assert list(st.to_dict()) == [*asdict(st), "terminal"]


def test_to_dict_shares_no_mutable_part_with_the_status():
    for st in (full_status(), JobStatus(job_id="j-2", phase="queued")):
        d = st.to_dict()
        d["extra"]["new"] = 1
        d["extra"].setdefault("kueue", {})["admitted"] = []
        if d["progress"] is not None:
            d["progress"]["metrics"]["loss"].append(0.1)
        assert "new" not in st.extra
        assert st.extra.get("kueue", {"admitted": ["x"]})["admitted"] == ["x"]
        assert st.progress is None or st.progress.metrics["loss"] == [1.0, 0.5]


def test_a_status_marked_not_current_twice_carries_one_note_the_newest():
    from gpujobs.status import JobStatus
    st = JobStatus("ml/a", "running", backend="kubernetes", message="epoch 3")
    once = st.not_current(1000.0, "HTTP 401 Unauthorized")
    assert once.message.startswith("not current: no news from the cluster since ") and once.message.endswith(
        "(HTTP 401 Unauthorized) · epoch 3")
    assert once.extra["stale_since"] == 1000.0 and st.extra == {}  # the original is untouched
    twice = once.not_current(1000.0, "BackendUnavailable: gone", source="the local agent")
    assert twice.message.count("not current") == 1 and "BackendUnavailable: gone) · epoch 3" in twice.message
    # a view that puts words before the note (the ranks' start-up phase) keeps it whole
    prefixed = once.with_(message=f"pulling image; {once.message}")
    again = prefixed.not_current(1000.0, "y · z")
    assert again.message.count("not current") == 1 and again.stale_note.endswith("(y · z)")
    assert again.message.endswith("pulling image; epoch 3") and prefixed.stale_note == once.stale_note
    bare = JobStatus("a", "queued").not_current(5.0, "x")
    assert bare.message == bare.stale_note and bare.message.endswith("(x)") and " · " not in bare.message
