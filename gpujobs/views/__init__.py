"""Views of :class:`~gpujobs.status.JobStatus`: text, static HTML, tables and live widgets.

Every displayable object publishes ``text/html`` and ``text/plain`` for every front end
(GitHub, nbconvert, terminals) and, where a widget manager runs, a live widget before them
(:func:`display_bundle`: the static copy stays in the saved notebook and shows in JupyterLab
when the widget's model is gone). ``GPUJOBS_DISPLAY=html|text`` forces a fallback.

Modules: ``text``, ``html``, ``widgets``, ``terminal`` (progress while waiting), ``updater``
(JobUpdater: feeds a view from a job's events), ``frames`` (job lists as DataFrames) and
``table`` (JobTable, QueueView).
"""
from __future__ import annotations

import os
import reprlib
from typing import Any, Callable

from ..status import JobStatus
from .html import render_job_html
from .updater import settle
from .table import JobTable, QueueView, jobs_frame
from .text import render_job_text
from .. import contract

__all__ = ["settle", "display_job", "display_bundle", "display_mode", "job_widget", "summarize_outcome",
           "render_job_html", "render_job_text", "JobTable", "QueueView", "jobs_frame"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


def display_mode() -> str:
    """``widget`` in a Jupyter kernel with ipywidgets, ``html`` in one without, ``text`` in a
    terminal; ``GPUJOBS_DISPLAY`` overrides."""
    forced = os.environ.get(contract.DISPLAY, "").strip().lower()
    if forced in ("widget", "html", "text"):
        return forced
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        return "text"
    if shell is None:
        return "text"
    if getattr(shell, "kernel", None) is None:
        return "text"  # a terminal: no live outputs to rewrite
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "html"
    return "widget"


def summarize_outcome(job: Any, status: JobStatus) -> str:
    """One line for the widget's result row: the return value's repr or the error."""
    if status.phase == "succeeded":
        return _repr.repr(job.result(timeout=0))
    exc = job.exception(timeout=0)
    if exc is None:
        return ""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: JupyterLab shows either the live widget (``gpujobs-live``) or the static copy after it
#: (``gpujobs-fallback``), never both: a reopened notebook whose kernel restarted has no widget
#: model, and this hides the "Error displaying widget: model not found" in its place.
FALLBACK_STYLE = (
    "<style>"
    ".jp-OutputArea-child:has(.gpujobs-live)+.jp-OutputArea-child:has(.gpujobs-fallback)"
    "{display:none}"
    ".jp-OutputArea-child:has(+.jp-OutputArea-child .gpujobs-fallback):not(:has(.gpujobs-live))"
    "{display:none}"
    "</style>")


def fallback_bundle(text: str, html: str) -> dict[str, str]:
    """The static copy of a live widget: its HTML (with :data:`FALLBACK_STYLE`) and text."""
    return {"text/plain": text,
            "text/html": f'{FALLBACK_STYLE}<div class="gpujobs-fallback">{html}</div>'}


def display_bundle(make_widget: Callable[[], Any] | None, text: str, html: str) -> Any:
    """Publish a view; returns the widget (or None).

    Widget mode: two outputs, the widget view alone and then its static copy
    (:func:`fallback_bundle`, with a display id the widget keeps current through
    ``attach_fallback``), so what a notebook saves shows the last state wherever the widget
    cannot render (GitHub, nbconvert, JupyterLab after a kernel restart). Otherwise one
    output: ``text/html`` and ``text/plain``."""
    from IPython.display import display
    if make_widget is None or display_mode() != "widget":
        display({"text/plain": text, "text/html": html}, raw=True)
        return None
    widget = make_widget()
    display({WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}},
            raw=True)
    handle = display(fallback_bundle(text, html), raw=True, display_id=True)
    attach = getattr(widget, "attach_fallback", None)
    if attach is not None:
        attach(handle)
    return widget


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
