"""One display reads the status model once: a job's text, HTML, widget and the updater's first
render share one ``backend.status``; a queue's text, HTML and widget share one ``backend.jobs``.
Counted on a real Job handle over a backend that counts its calls."""
from __future__ import annotations

import collections
import time

import pytest
from IPython.display import display
from IPython.utils.capture import capture_output

from gpujobs.handle import Job
from gpujobs.status import JobStatus
from gpujobs.views import updater as live
from gpujobs.views.table import QueueView


class CountingBackend:
    """The Backend protocol over fixed statuses; counts every call by method."""
    name = "counting"

    def __init__(self, statuses: dict[str, JobStatus]):
        self.statuses = statuses
        self.calls: collections.Counter = collections.Counter()

    def submit(self, spec):
        raise NotImplementedError

    def status(self, job_id):
        self.calls["status"] += 1
        return self.statuses[job_id]

    def wait(self, job_id, timeout=None):
        self.calls["wait"] += 1
        return self.statuses[job_id]

    def outcomes(self, job_id):
        self.calls["outcomes"] += 1
        return {}

    def job_key(self, job_id):
        self.calls["job_key"] += 1
        return b"k" * 32

    def logs(self, job_id, rank=None, follow=False):
        self.calls["logs"] += 1
        return iter(["[rank 0] step 1\n"])

    def cancel(self, job_id):
        self.calls["cancel"] += 1

    def jobs(self, queue=None):
        self.calls["jobs"] += 1
        return [s for s in self.statuses.values() if queue is None or s.queue == queue]

    def subscribe(self, job_id, callback):
        self.calls["subscribe"] += 1
        return lambda: None

    def metrics_history(self, job_id):
        self.calls["metrics_history"] += 1
        return []

    def render(self, spec, kind=None):
        raise NotImplementedError


def st(job_id: str, phase: str, **kw) -> JobStatus:
    return JobStatus(job_id=job_id, name=job_id, phase=phase, backend="counting", queue="team-a",
                     gang_size=2, gang_ready=2 if phase == "running" else 0, submitted_at=1000.0, **kw)


@pytest.fixture
def backend():
    return CountingBackend({"run-1": st("run-1", "running", started_at=1001.0),
                            "bad-1": st("bad-1", "failed", message="rank 1 exited 3"),
                            "wait-1": st("wait-1", "queued", queue_position=1)})


@pytest.fixture
def stop_updaters():
    before = set(live._updaters)
    yield
    for u in set(live._updaters) - before:
        u.stop()
        assert u.join(5), "an updater did not stop"


def until(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.01)


def test_widget_display_of_a_finished_job_reads_its_status_once(shell, backend, recording_comm,
                                                                monkeypatch, stop_updaters):
    monkeypatch.setenv("GPUJOBS_DISPLAY", "widget")
    from gpujobs.views import display_job
    widget = display_job(Job("bad-1", backend))
    assert widget.updater.join(5)
    assert backend.calls["status"] == 1, backend.calls
    assert backend.calls["jobs"] == 0
    assert widget.status.phase == "failed" and "rank 1 exited 3" in widget.header.value
    assert "JobFailedError" in widget.result_text and "[rank 0] step 1" in widget.logs_tail


def test_widget_display_of_a_running_job_reads_its_status_once(shell, backend, recording_comm,
                                                               monkeypatch, stop_updaters):
    monkeypatch.setenv("GPUJOBS_DISPLAY", "widget")
    from gpujobs.views import display_job
    widget = display_job(Job("run-1", backend))
    until(lambda: widget.renders >= 2)  # the widget's own first render and the updater's
    assert backend.calls["status"] == 1, backend.calls  # the updater polls again only after poll_s (2 s)
    assert backend.calls["subscribe"] == 1 and backend.calls["logs"] == 1
    assert "2/2 ready" in widget.gang_label.value


def test_html_display_of_a_running_job_reads_its_status_once(shell, backend, monkeypatch, stop_updaters):
    monkeypatch.setenv("GPUJOBS_DISPLAY", "html")
    display(Job("run-1", backend))  # through the handle's _ipython_display_
    until(lambda: backend.calls["logs"] >= 1)  # the updater's first render reads the log tail
    assert backend.calls["status"] == 1, backend.calls


@pytest.mark.parametrize("mode", ["widget", "html"])
def test_queue_display_reads_the_jobs_once(shell, backend, recording_comm, monkeypatch, mode):
    monkeypatch.setenv("GPUJOBS_DISPLAY", mode)
    made = []
    orig = QueueView.widget

    def keep(self, statuses=None):
        made.append(orig(self, statuses))
        return made[-1]
    monkeypatch.setattr(QueueView, "widget", keep)
    view = QueueView(lambda: backend.jobs("team-a"), name="team-a", refresh_s=60)
    with capture_output() as cap:
        display(view)
    try:
        assert backend.calls["jobs"] == 1, backend.calls
        assert backend.calls["status"] == 0
        out = cap.outputs[-1]  # the static copy (after the widget view in widget mode)
        assert len(cap.outputs) == (2 if mode == "widget" else 1)
        assert "wait-1" in out.data["text/plain"] and "run-1" in out.data["text/plain"]
        assert "gpujobs-phase-queued" in out.data["text/html"] and "queue team-a" in out.data["text/html"]
        assert ("application/vnd.jupyter.widget-view+json" in cap.outputs[0].data) == (mode == "widget")
        if mode == "widget":
            assert len(made) == 1 and made[0].refreshes == 1
            assert ">wait-1<" in made[0].table.value and ">run-1<" in made[0].table.value
        else:
            assert made == []
    finally:
        for w in made:
            w.close()
    view.widget().close()  # a widget made on its own still reads the source
    assert backend.calls["jobs"] == 2
