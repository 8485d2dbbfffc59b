"""ctx.progress on the rank side (throttle, flush, line format) and the reading side
(rate, expected end, history frame, status round trip). No processes started."""
from __future__ import annotations

import io
import json

import pytest

from gpujobs.backends.local.store import status_from_dict
from gpujobs.rank.context import JobContext
from gpujobs.progress import ProgressTail, progress_frame, summarize, usual_interval
from gpujobs.rank.progress import ProgressReporter
from gpujobs.rank.wire import PROGRESS_MARKER, format_progress_line, parse_progress_line
from gpujobs.status import JobStatus, Progress


def test_line_round_trip_and_prefix():
    line = format_progress_line(2, 40, 100, {"loss": 0.25, "lr": 1e-3, "tag": "warm"}, 1000.5)
    assert line.startswith(PROGRESS_MARKER + " ")
    rep = parse_progress_line("[rank 2] " + line)
    assert rep == {"rank": 2, "time": 1000.5, "step": 40.0, "total": 100.0,
                   "metrics": {"loss": 0.25, "lr": 1e-3, "tag": "warm"}}
    assert parse_progress_line("GPUJOBS-PROGRESS {not json") is None
    assert parse_progress_line("loss went down") is None


def test_unknown_total_and_unjsonable_metric():
    line = format_progress_line(0, 7, None, {"x": object(), "nan": float("nan")}, 5.0)
    rep = parse_progress_line(line)
    assert rep["total"] is None and rep["metrics"]["nan"] is None
    assert rep["metrics"]["x"].startswith("<object")


def test_reporter_throttles_and_flushes_the_last_report():
    out = io.StringIO()
    rep = ProgressReporter(0, stream=out, interval=3600)
    for step in range(1, 1001):
        rep.report(step, 1000, {"loss": 1 / step})
    assert rep.writes == 1  # the first call writes; the rest only keep the values
    rep.flush()
    lines = [parse_progress_line(x) for x in out.getvalue().splitlines()]
    assert [r["step"] for r in lines] == [1.0, 1000.0]
    assert lines[-1]["metrics"]["loss"] == pytest.approx(1 / 1000)
    rep.flush()
    assert rep.writes == 2  # nothing pending: no second copy


def test_reporter_writes_a_file(tmp_path):
    rep = ProgressReporter(1, path=tmp_path / "progress-1.log", interval=0)
    rep.report(1, 3)
    rep.report(2, 3)
    tail = ProgressTail(tmp_path)
    assert [r["step"] for r in tail.read()] == [1.0, 2.0]
    rep.report(3, 3)
    assert [r["step"] for r in tail.read()] == [3.0]  # only new lines
    assert tail.latest().step == 3.0 and tail.latest().rank == 1


def test_tail_waits_for_a_line_being_written(tmp_path):
    path = tmp_path / "progress-0.log"
    full = format_progress_line(0, 1, None, {}, 1.0) + "\n"
    half = format_progress_line(0, 2, None, {}, 2.0)
    path.write_text(full + half[:10])
    tail = ProgressTail(tmp_path)
    assert [r["step"] for r in tail.read()] == [1.0]
    with open(path, "a") as fh:
        fh.write(half[10:] + "\n")
    assert [r["step"] for r in tail.read()] == [2.0]


def reports(points, rank=0, total=None):
    return [{"rank": rank, "time": t, "step": s, "total": total, "metrics": {}} for t, s in points]


def test_rate_and_expected_end():
    p = summarize(reports([(100.0, 10), (101.0, 20), (102.0, 30)], total=130))
    assert p.rate == pytest.approx(10.0)
    assert p.expected_end == pytest.approx(102.0 + 100 / 10.0)
    assert p.updated == 102.0 and p.fraction == pytest.approx(30 / 130)


def test_rate_restarts_when_the_step_goes_back():
    """A requeued job resumes from its checkpoint: the old run's steps do not skew the rate."""
    p = summarize(reports([(0.0, 0), (1.0, 100), (2.0, 200), (3.0, 150), (5.0, 160)], total=200))
    assert p.rate == pytest.approx(5.0)


def test_no_rate_from_one_report_and_no_reports():
    assert summarize([]) is None
    p = summarize(reports([(1.0, 5)], total=10))
    assert p.rate is None and p.expected_end is None


def test_usual_interval_is_the_median_gap():
    assert usual_interval(reports([(0, 1), (1, 2), (2, 3), (30, 4)])) == 1.0
    assert usual_interval(reports([(0, 1)])) is None


def test_status_round_trip_keeps_progress_and_stall():
    st = JobStatus(job_id="j", phase="running",
                   progress=Progress(step=3, total=10, rate=1.5, expected_end=9.0,
                                     metrics={"loss": 0.5}, updated=4.0),
                   stalled_since=12.0, extra={"stall": "stalled? rank 1 quiet"})
    back = status_from_dict(json.loads(json.dumps(st.to_dict())))
    assert back.progress == st.progress and back.stalled_since == 12.0
    assert "30%" in back.summary() and "rank 1 quiet" in back.summary()
    assert back.progress.text(now=4.0) == "step 3/10 (30%) · 1.5 steps/s · 5 s left"


def test_summary_progress_is_coarse_so_plain_wait_lines_stay_few():
    """A plain (non-terminal) wait prints a line whenever the summary changes."""
    base = dict(total=1000, rate=10.0, updated=0.0)
    texts = {Progress(step=s, expected_end=(1000 - s) / 10, **base).short_text(now=0.0)
             for s in range(300, 310)}  # ten reports, two texts: whole percent, whole minutes
    assert texts == {"30% · ~1 min left", "31% · ~1 min left"}
    assert Progress(step=12_345).short_text() == "step ~12k"


def test_frame_has_one_column_per_metric():
    rows = reports([(1.0, 1), (2.0, 2)], total=2)
    rows[1]["metrics"] = {"loss": 0.1}
    df = progress_frame(rows)
    assert list(df.columns)[:4] == ["time", "rank", "step", "total"] and "loss" in df.columns
    assert list(df["step"]) == [1.0, 2.0]
    assert progress_frame([]).empty


def test_context_progress_reports_rank_zero_only_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUJOBS_RESULT_SINK", f"dir:{tmp_path}")
    monkeypatch.setenv("GPUJOBS_PROGRESS_INTERVAL", "0")

    def ctx(rank):
        return JobContext(job_id="j", rank=rank, world_size=2, local_rank=rank, node_rank=0,
                          device="cpu", checkpoint_dir=tmp_path, framework="ddp")
    c0, c1 = ctx(0), ctx(1)
    c0.progress(1, total=5)
    c1.progress(1, total=5)  # ignored: not rank 0
    c1.progress(2, total=5, rank=None)  # every rank may report when asked
    assert sorted(p.name for p in tmp_path.glob("progress-*.log")) == \
        ["progress-0.log", "progress-1.log"]
    assert [r["step"] for r in ProgressTail(tmp_path).read() if r["rank"] == 1] == [2.0]


def test_context_progress_outside_a_job_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import gpujobs
    gpujobs.context().progress(1, total=2, loss=0.1)  # no job: nothing written, no error
    assert not list(tmp_path.iterdir())
