"""Views of :class:`~gpujobs.status.JobStatus`: text, static HTML, tables and live widgets.

Every displayable object publishes ``text/html`` and ``text/plain`` for every front end
(GitHub, nbconvert, terminals) and, where a widget manager runs, a live widget before them
(:func:`.bundle.display_bundle`: the static copy stays in the saved notebook and shows in JupyterLab
when the widget's model is gone). ``GPUJOBS_DISPLAY=html|text`` forces a fallback.

Modules: ``text``, ``html``, ``widgets``, ``terminal`` (progress while waiting), ``updater``
(JobUpdater: feeds a view from a job's events), ``frames`` (job lists as DataFrames) and
``table`` (JobTable, QueueView).
"""
from __future__ import annotations

import reprlib
from typing import Any

from ..status import JobStatus
from .bundle import WIDGET_MIME, display_bundle, display_mode, fallback_bundle
from .html import render_job_html
from .updater import settle
from .table import JobTable, QueueView, jobs_frame
from .text import render_job_text

__all__ = ["settle", "display_job", "display_bundle", "display_mode", "fallback_bundle", "WIDGET_MIME",
           "job_widget", "summarize_outcome",
           "render_job_html", "render_job_text", "JobTable", "QueueView", "jobs_frame"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


def summarize_outcome(job: Any, status: JobStatus) -> str:
    """One line for the widget's result row: the return value's repr or the error."""
    if status.phase == "succeeded":
        return _repr.repr(job.result(timeout=0))
    exc = job.exception(timeout=0)
    if exc is None:
        return ""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


def job_widget(job: Any, start: bool = True, status: JobStatus | None = None):
    """A :class:`~gpujobs.views.widgets.JobWidget` for ``job`` with its updater running.

    ``status``: the job's status when the caller has just read it (not read again)."""
    from .widgets import JobUpdater, JobWidget
    status = job.status() if status is None else status
    widget = JobWidget(on_cancel=job.cancel)
    try:  # sparklines start from what the backend kept before this widget existed
        from ..metrics import job_samples
        widget.seed_history(job_samples(job.backend, job.id))
    except Exception:
        pass
    widget.update(status)
    updater = JobUpdater(job, widget, summarize=summarize_outcome, initial=status)
    widget.updater = updater
    if start:
        updater.start()
    return widget


class _HtmlDisplayView:
    """The widget-less live view: rewrites one display_id output (no widget manager needed)."""

    def __init__(self, handle: Any):
        self.handle = handle
        self.logs_tail = ""
        self.result_text = ""

    def update(self, status: JobStatus, logs_tail: str | None = None,
               result_text: str | None = None) -> None:
        if logs_tail is not None:
            self.logs_tail = logs_tail
        if result_text is not None:
            self.result_text = result_text
        self.handle.update({"text/plain": render_job_text(status, self.logs_tail, self.result_text),
                            "text/html": render_job_html(status, None, self.logs_tail,
                                                         self.result_text)}, raw=True)


def display_job(job: Any) -> Any:
    """Display ``job`` live: a widget in Jupyter, an updating HTML output elsewhere.

    The status is read once; the text, the HTML, the widget and the updater's first
    render all show that one reading."""
    from IPython.display import display
    status = job.status()
    mode = display_mode()
    text, html = render_job_text(status), render_job_html(status)
    if mode == "widget":
        return display_bundle(lambda: job_widget(job, status=status), text, html)
    if mode == "text" or status.terminal:
        display({"text/plain": text, "text/html": html}, raw=True)
        return None
    handle = display({"text/plain": text, "text/html": html}, raw=True, display_id=True)
    from .updater import JobUpdater
    JobUpdater(job, _HtmlDisplayView(handle), summarize=summarize_outcome, initial=status).start()
    return handle
