"""job.wait(progress=True) / gpujobs submit --wait: spinner with the phase, then a bar once
progress is reported; plain lines off a terminal. A scripted backend, no processes."""
from __future__ import annotations

import io
import time

from gpujobs.cli import output
from gpujobs.status import JobStatus, Progress
from gpujobs.views.terminal import ProgressDisplay, wait_with_bar


def statuses():
    now = time.time()
    yield JobStatus(job_id="j", name="exp", phase="queued", queue="q", queue_position=1)
    yield JobStatus(job_id="j", name="exp", phase="running")
    for step in (10, 50, 100):
        yield JobStatus(job_id="j", name="exp", phase="running",
                        progress=Progress(step=step, total=100, rate=20.0,
                                          expected_end=now + (100 - step) / 20, updated=now,
                                          metrics={"loss": 1 / step}))
    yield JobStatus(job_id="j", name="exp", phase="succeeded",
                    progress=Progress(step=100, total=100, updated=now))


class ScriptedBackend:
    def __init__(self):
        self.script = statuses()
        self.last = None
        self.subscribed = False

    def subscribe(self, job_id, cb):
        self.subscribed = True
        return lambda: None

    def wait(self, job_id, timeout=None):
        self.last = next(self.script, self.last)
        return self.last

    def status(self, job_id):
        return self.last


class Spy(ProgressDisplay):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = []

    def update(self, st):
        self.seen.append((st.phase, st.progress is not None, self._kind or "spinner"))
        super().update(st)


def test_wait_shows_a_spinner_then_a_rich_bar():
    disp = Spy(stream=io.StringIO(), live=True, prefer="rich")  # tqdm is not installed here
    st = wait_with_bar(ScriptedBackend(), "j", timeout=30, display=disp)
    assert st.phase == "succeeded"
    drawn_with = [k for _, _, k in disp.seen]  # what was on screen when each status came
    assert drawn_with[:3] == ["spinner", "spinner", "spinner"]  # queued, running, 1st report
    assert drawn_with[3:] == ["rich"] * (len(drawn_with) - 3)
    assert disp.kind_used == "rich"
    assert disp._bar is None and disp._spinner is None  # closed: the terminal is clean


def test_plain_lines_off_a_terminal_carry_progress_text():
    out = io.StringIO()
    wait_with_bar(ScriptedBackend(), "j", timeout=30, display=ProgressDisplay(stream=out, live=False))
    text = out.getvalue()
    assert "queued" in text and "50%" in text and "<1 min left" in text
    assert "100%" in text and "succeeded" in text


def test_cli_live_wait_switches_to_a_bar_when_progress_comes():
    p = output.Progress(stream=io.StringIO(), live=True)
    for st in statuses():
        p.update(st)
        if st.progress is not None:
            assert p._bar is not None and p._status is None  # the spinner gave way to the bar
    assert p._bar.kind_used in ("tqdm", "rich")
    p.close()
    assert p._bar is None


def test_queue_progress_cell_and_status_lines():
    now = time.time()
    st = JobStatus(job_id="j", phase="running", progress=Progress(
        step=40, total=100, rate=2.0, expected_end=now + 30, updated=now, metrics={"loss": 0.5}))
    assert output.progress_cell(st, now) == "40/100 2/s 30s"
    lines = output.status_lines(st)
    assert "Progress:    step 40/100 (40%) · 2 steps/s · 30 s left" in lines
    assert "Metrics:     loss=0.5" in lines
    stalled = st.with_(stalled_since=now - 125, extra={"stall": "stalled? rank 3 quiet"})
    assert output.progress_cell(stalled, now) == "STALLED 2m"
    assert "Stalled:     since 2m: stalled? rank 3 quiet" in output.status_lines(stalled)
    assert output.progress_cell(JobStatus(job_id="j", phase="running"), now) == "-"


def test_widget_html_shows_the_bar_rate_and_time_left():
    from gpujobs.views.html import progress_html, render_job_html
    now = time.time()
    st = JobStatus(job_id="j", phase="running", progress=Progress(
        step=25, total=100, rate=5.0, expected_end=now + 15, updated=now))
    html = progress_html(st, now)
    assert 'class="gpujobs-progress-bar"' in html and "width:25.0%" in html
    assert "5 steps/s" in html and "15s left" in html
    assert "gpujobs-progress" in render_job_html(st)
    flagged = st.with_(stalled_since=now, extra={"stall": "stalled? rank 1 quiet"})
    assert "gpujobs-stalled" in progress_html(flagged) and "rank 1 quiet" in progress_html(flagged)


def test_bar_counts_are_whole_numbers_and_an_ended_job_has_no_time_left():
    """#31: the rich bar read '30/30.0'; a succeeded job's line said '100% · <1 min left'."""
    now = time.time()
    st = JobStatus(job_id="j", name="exp", phase="running",
                   progress=Progress(step=12.0, total=30.0, rate=1.0, expected_end=now + 18,
                                     updated=now))
    out = io.StringIO()
    disp = ProgressDisplay(stream=out, live=True, prefer="rich")
    disp.update(st)
    disp.update(JobStatus(job_id="j", name="exp", phase="running",
                          progress=Progress(step=30.0, total=30.0, updated=now)))
    disp.close()
    assert "30/30" in out.getvalue() and "30.0" not in out.getvalue(), out.getvalue()
    ended = JobStatus(job_id="j", name="exp", phase="succeeded",
                      progress=Progress(step=30, total=30, rate=1.0, expected_end=now + 20, updated=now))
    assert "100%" in ended.summary() and "left" not in ended.summary(), ended.summary()


def test_a_bar_says_when_the_status_is_not_current():
    now = time.time()
    out = io.StringIO()
    disp = ProgressDisplay(stream=out, live=True, prefer="rich")
    st = JobStatus(job_id="j", name="exp", phase="running",
                   progress=Progress(step=10, total=100, rate=2.0, updated=now, metrics={}))
    disp.update(st)
    assert "not current" not in out.getvalue()
    disp.update(st.not_current(now - 12, "HTTP 401 Unauthorized: log in again"))
    disp.close()
    assert "not current: no news from the cluster since" in out.getvalue()
    assert st.not_current(now, "x").stale_note.startswith("not current") and st.stale_note == ""
