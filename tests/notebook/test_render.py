"""Pure renderers: text, HTML, tables (no widgets, no backend)."""
from __future__ import annotations

import re

import pandas as pd

from gpujobs.views.html import render_job_html, sparkline_svg
from gpujobs.views.table import JobTable, QueueView, jobs_frame
from gpujobs.views.text import fmt_duration, render_job_text

from tests.notebook.nbscript import sample, script, status


def test_html_shows_phase_position_gang_and_escapes():
    st = status("queued", queue_position=2, message="<b>waiting</b> for quota")
    out = render_job_html(st)
    assert 'data-phase="queued"' in out
    assert "2nd in team-a" in out
    assert "gang 0/2" in out
    assert "&lt;b&gt;waiting&lt;/b&gt;" in out and "<b>waiting</b>" not in out


def test_html_position_unavailable_and_not_shown_when_running():
    assert "position unavailable" in render_job_html(
        status("queued", queue_position=None, position_available=False))
    assert "in team-a" not in render_job_html(status("running", gang_ready=2, started_at=1.0))


def test_metrics_cpu_samples_are_labelled_cpu_never_gpu():
    st = status("running", gang_ready=2, started_at=1.0,
                metrics=(sample(5.0, 0, 30, 2**30, source="psutil"),))
    out = render_job_html(st)
    assert "rank 0 CPU" in out and "CPU busy %" in out and "GPU busy" not in out
    assert "no GPU on this machine" in out
    gpu = render_job_html(status("running", metrics=(sample(5.0, 1, 97, 2**30),)))
    assert "rank 1 GPU 0" in gpu and "GPU busy %" in gpu and "97%" in gpu
    assert "SMs" not in gpu  # no GPM reading: nothing said about SMs


def test_metrics_show_how_many_sms_are_busy_where_nvml_reads_them():
    from dataclasses import replace
    waiting = replace(sample(5.0, 0, 100, 2**30), sm_util=0.76)
    out = render_job_html(status("running", metrics=(waiting,)))
    assert "100%" in out and "SMs 1%" in out and "SMs busy (NVML GPM)" in out
    assert "GPU busy 100% (SMs 1%)" in render_job_text(status("running", metrics=(waiting,)))


def test_sparkline_scales_points_into_the_box():
    svg = sparkline_svg([0, 50, 100, None, 200], width=100, height=22)
    pts = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', svg)[1].split()]
    assert len(pts) == 4  # None skipped
    assert pts[0] == (0.0, 21.0) and pts[2][1] == 1.0 and pts[3][1] == 1.0  # clamped at top
    assert all(0 <= x <= 100 for x, _ in pts)
    assert "<polyline" not in sparkline_svg([None, None])
    one = re.search(r'points="([^"]+)"', sparkline_svg([None, 40.0], width=100))[1].split()
    assert len(one) == 2 and one[0].startswith("0.0,") and one[1].startswith("100.0,")


def test_text_has_summary_result_and_log_tail():
    st = script()[-1]
    text = render_job_text(st, logs_tail="[rank 0] a\n[rank 1] b\n", result_text="{'loss': 0.1}")
    first = text.splitlines()[0]
    assert "train: succeeded" in first and "gang 2/2" in first
    assert "ran 8s" in text and "result: {'loss': 0.1}" in text and "[rank 1] b" in text


def test_fmt_duration():
    assert [fmt_duration(x) for x in (None, 5, 65, 7260)] == ["", "5s", "1m05s", "2h01m"]


def test_jobs_frame_orders_and_fills_columns():
    statuses = [status("succeeded", job_id="old", submitted_at=10.0, finished_at=20.0),
                status("queued", job_id="q2", queue_position=2, submitted_at=30.0),
                status("running", job_id="r", gang_ready=2, submitted_at=5.0, started_at=6.0),
                status("queued", job_id="q1", queue_position=1, submitted_at=40.0,
                       reason="quota")]
    df = jobs_frame(statuses, now=100.0)
    assert list(df["job_id"]) == ["r", "q1", "q2", "old"]
    assert list(df["position"].astype(object).where(df["position"].notna(), None)) == [None, 1, 2, None]
    row = df.set_index("job_id").loc["q1"]
    assert (row["user"], row["gpus"], row["gang"], row["age"], row["reason"]) == \
        ("ada", 2, "0/2", "1m00s", "quota")


def test_job_table_is_a_list_with_pandas_and_reprs():
    t = JobTable([status("queued", queue_position=1), status("running", job_id="x")])
    assert len(t) == 2 and isinstance(t[0].phase, str) and [s.job_id for s in t][1] == "x"
    assert isinstance(t.to_pandas(), pd.DataFrame) and len(t.to_pandas()) == 2
    assert "<table" in t._repr_html_() and "gpujobs-phase-queued" in t._repr_html_()
    assert "<NA>" not in repr(t) and "train-abc123" in repr(t)
    assert repr(JobTable()) == "JobTable(no jobs)"


def test_queue_view_reads_its_source_each_time():
    box = [status("queued", queue_position=1)]
    q = QueueView(lambda: list(box), name="team-a")
    assert len(q) == 1 and "queue team-a" in q._repr_html_()
    box.append(status("running", job_id="b"))
    assert list(q.to_pandas()["job_id"]) == ["b", "train-abc123"]
    assert [s.job_id for s in q] == ["b", "train-abc123"]


def test_queued_job_shows_reason_and_expected_start():
    from gpujobs.views.html import header_html
    import time as _time
    now = _time.time()
    st = status("queued", queue_position=2, submitted_at=now - 5, expected_start=now + 720,
                expected_start_basis="expected ends from declared limit",
                reason="needs 2 GPUs, 0 free in a; ahead: r (running, ~12 min left)")
    html = header_html(st)
    assert "starts in ~12 min" in html and 'title="expected ends from declared limit"' in html
    assert "needs 2 GPUs, 0 free in a; ahead: r (running, ~12 min left)" in html
    df = jobs_frame([st, status("queued", job_id="u", queue_position=3,
                                expected_start_basis="unknown: …")], now=now)
    assert df["start"][0].startswith("in ~12 min (") and df["start"][1] == "unknown"
    assert "<b>" in header_html(status("running", started_at=now)) and \
        "gpujobs-start" not in header_html(status("running", started_at=now))


def test_queue_table_is_active_jobs_one_line_each_with_priority_and_start(monkeypatch):
    """#31: the notebook queue listed every job ever run (the CLI shows active ones), priority
    and start were blank, ids wrapped over 3-4 lines and the message took half the width."""
    import gpujobs
    statuses = [status("succeeded", job_id="old-1", started_at=1001.0, finished_at=1009.0),
                status("running", job_id="train-7f3a9c2e", started_at=1002.0, gang_ready=2,
                       message="x" * 300),
                status("queued", job_id="q-1", queue_position=1)]

    class Backend:
        name = "local"

        def jobs(self, queue=None):
            return list(statuses)

        def check_queue(self, queue):
            pass
    monkeypatch.setattr("gpujobs.backends.get_backend", lambda name=None: Backend())
    active = gpujobs.queue("team-a")
    assert [s.job_id for s in active] == ["train-7f3a9c2e", "q-1"], "finished jobs are listed"
    assert [s.job_id for s in gpujobs.queue("team-a", all=True)] == ["train-7f3a9c2e", "q-1", "old-1"]
    df = active.to_pandas().set_index("job_id")
    assert df.loc["train-7f3a9c2e", "priority"] == "default"
    assert df.loc["train-7f3a9c2e", "start"] == __import__("time").strftime(
        "%H:%M:%S", __import__("time").localtime(1002.0))
    html = active._repr_html_()
    cell = re.search(r'<td style="([^"]*)"[^>]*>train-7f3a9c2e</td>', html)
    assert cell and "white-space:nowrap" in cell.group(1), html
    msg = re.search(r'<td style="([^"]*)" title="x{300}">x{300}</td>', html)
    assert msg and "max-width" in msg.group(1) and "ellipsis" in msg.group(1), html
    assert "active jobs" in active.title


def test_header_says_the_phase_once():
    """#31: the badge said 'running' and the timing 'running 20s' next to it."""
    from gpujobs.views.html import header_html
    running = status("running", started_at=1000.0, gang_ready=2)
    html = re.sub(r"<[^>]+>", " ", header_html(running))
    assert len(re.findall(r"\brunning\b", html)) == 1, html
    assert re.search(r"\bfor \d+", html), html
    text = render_job_text(running)
    assert text.count("running") == 1, text
    done = status("succeeded", started_at=1000.0, finished_at=1008.0)
    assert "ran 8s" in header_html(done)


def _font_covers(ch: str) -> bool | None:
    import shutil
    import subprocess
    if shutil.which("fc-list") is None:
        return None
    out = subprocess.run(["fc-list", f":charset={ord(ch):x}", "family"], capture_output=True,
                         text=True, timeout=30).stdout
    return bool(out.strip())


def test_every_glyph_of_the_job_card_has_a_font():
    """#31: the ⓘ of the CPU chip rendered as a box in Debian Chromium (no installed font has
    it). Every non-ASCII character the card uses must be in some installed font."""
    import html as _html
    import pytest
    st = status("running", started_at=1000.0, gang_ready=2, cpu_ranks=True,
                message="rank 1 failed … retrying")
    text = _html.unescape(re.sub(r"<[^>]+>", " ", render_job_html(st)) + render_job_text(st))
    chars = sorted({c for c in text if ord(c) > 127})
    covered = {c: _font_covers(c) for c in chars}
    if any(v is None for v in covered.values()):
        pytest.skip("no fontconfig (fc-list) to ask")
    assert all(covered.values()), {f"U+{ord(c):04X}": v for c, v in covered.items()}
