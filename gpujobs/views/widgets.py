"""Live ipywidgets views of :class:`JobStatus` (ipywidgets 8; only APIs that 7.7 also has).

Widgets here only *show* statuses: a :class:`JobWidget` is updated with
``update(status)``; a :class:`JobUpdater` feeds it from anything with the Job
handle's ``subscribe``/``status``/``logs`` methods (at most ~2 renders a second,
trait changes batched with ``hold_sync``, never ``with output:`` from a thread),
and stops at a terminal phase. :class:`QueueWidget` refreshes a table from a
``source()`` callable (``backend.jobs(queue)``), first drawn from the ``statuses``
its caller already read, when given.
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable

import ipywidgets as W

from ..status import JobStatus
from .html import (header_html, last_line_html, logs_html, metrics_html, progress_html,
                   render_job_html, result_html, timeline_html)
from .frames import frame_html, jobs_frame

from .updater import JobUpdater, StatusSource  # noqa: F401  (re-exported)


def ranks_alive(status: JobStatus) -> bool:
    """True while a process the (local) job started still runs: a cancelled job's ranks take
    up to the grace period to exit. Other backends report no pids: False."""
    pids = status.extra.get("pids") or ()
    if not pids:
        return False
    try:
        import psutil
    except ImportError:
        return False
    for pid in pids:
        try:
            if psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, ValueError, TypeError):
            continue
    return False


class JobWidget(W.VBox):
    """Compact: phase badge, queue position, gang bar k/N, Cancel, the ``ctx.progress`` bar, the
    newest log line and the result; "details" expands the metric sparklines, the timeline and the log tail.
    ``update(status)`` is the only way it changes."""

    #: a cancelled job shows "cancelling…" while its ranks exit, at most this long
    CANCEL_SETTLE_S = 60.0

    def __init__(self, status: JobStatus | None = None, on_cancel: Callable[[], Any] | None = None,
                 history_len: int = 120):
        self.header = W.HTML()
        self.gang = W.IntProgress(value=0, min=0, max=1, layout=W.Layout(width="160px"))
        self.gang_label = W.Label()
        self.cancel_button = W.Button(description="Cancel", button_style="danger", icon="stop",
                                      tooltip="cancel this job", layout=W.Layout(width="100px"))
        self.details_button = W.Button(description="details", icon="chevron-down",
                                       tooltip="metrics, timeline and logs",
                                       layout=W.Layout(width="90px"))
        self.expanded = False
        self.progress = W.HTML()
        self.metrics = W.HTML()
        self.result = W.HTML()
        self.timeline = W.HTML()
        self.logs = W.HTML()
        self.last_line = W.HTML()
        self.error = W.HTML()
        self.details = W.VBox([self.metrics, self.timeline, self.logs],
                              layout=W.Layout(display="none"))
        self._on_cancel = on_cancel
        self._cancelled_seen: float | None = None
        self.cancel_button.on_click(self._cancel_clicked)
        self.details_button.on_click(lambda _b: self.toggle_details())
        self._history: dict[tuple[int, int, str], deque] = {}
        self._last_sample_time: dict[tuple[int, int, str], float] = {}
        self._history_len = history_len
        self.status: JobStatus | None = None
        self.logs_tail = ""
        self.result_text = ""
        self.renders = 0
        super().__init__(children=[
            self.header, W.HBox([self.gang, self.gang_label, self.cancel_button, self.details_button]),
            self.progress, self.last_line, self.result, self.error, self.details],
            layout=W.Layout(border="1px solid #d0d7de", padding="2px 4px"))
        self.add_class("gpujobs-job-widget")
        self.add_class("gpujobs-live")
        self._fallback: Any = None  # the display of the static copy (views.display_bundle)
        self._fallback_shown: tuple | None = None
        self._fallback_lock = threading.Lock()
        if status is not None:
            self.update(status)

    # ------------------------------------------------------------------ state
    @property
    def history(self) -> dict[tuple[int, int, str], list[tuple[float | None, float | None]]]:
        return {k: list(v) for k, v in self._history.items()}

    def _record_metrics(self, status: JobStatus) -> None:
        for s in status.metrics:
            self._record_metrics_sample(s)

    def seed_history(self, samples) -> None:
        """Start the sparklines from samples kept before this widget existed (oldest first)."""
        for s in sorted(samples, key=lambda x: x.time):
            self._record_metrics_sample(s)

    def _record_metrics_sample(self, s) -> None:
        key = (s.rank, s.device, s.source)
        if self._last_sample_time.get(key, -1.0) >= s.time:
            return
        self._last_sample_time[key] = s.time
        frac = s.mem_used / s.mem_total if s.mem_used is not None and s.mem_total else None
        self._history.setdefault(key, deque(maxlen=self._history_len)).append((s.util, frac))

    def update(self, status: JobStatus, logs_tail: str | None = None,
               result_text: str | None = None) -> None:
        """Show ``status`` (and optionally a new log tail / result line) in one batched sync."""
        self.status = status
        if logs_tail is not None:
            self.logs_tail = logs_tail
        if result_text is not None:
            self.result_text = result_text
        self._record_metrics(status)
        parts = [self, self.header, self.gang, self.gang_label, self.cancel_button, self.progress,
                 self.metrics, self.result, self.timeline, self.logs, self.last_line]
        cancelling = self.ending(status)
        with contextlib.ExitStack() as stack:
            for w in parts:
                stack.enter_context(w.hold_sync())
            self.header.value = header_html(status, gang=False,
                                            phase="cancelling…" if cancelling else None)
            size = max(status.gang_size, 1)
            self.gang.max = size
            self.gang.value = min(status.gang_ready, size)
            self.gang.bar_style = ("success" if status.gang_size and status.gang_ready >= status.gang_size
                                   else "info")
            self.gang_label.value = (f"gang {status.gang_ready}/{status.gang_size} ready"
                                     if status.gang_size else "")
            self.cancel_button.disabled = status.terminal or cancelling
            if cancelling:
                self.cancel_button.description = "cancelling…"
            elif status.terminal:
                self.cancel_button.description = "ended"
                self.cancel_button.button_style = ""
                self.cancel_button.icon = ""
            self.progress.value = progress_html(status)  # compact too: the bar is always shown
            self.metrics.value = metrics_html(status, self._history)
            self.result.value = result_html(self.result_text)
            self.timeline.value = timeline_html(status)
            self.logs.value = logs_html(self.logs_tail)
            self.last_line.value = "" if self.expanded else last_line_html(self.logs_tail)
        self.renders += 1
        self._sync_fallback()

    def attach_fallback(self, handle: Any) -> None:
        """Keep the static copy published after the widget (a display handle) current."""
        self._fallback = handle
        self._sync_fallback()

    def resend_fallback(self) -> None:
        """Publish the static copy again (``views.settle``: a headless run keeps only what
        arrives while a cell runs)."""
        self._fallback_shown = None
        self._sync_fallback()

    def _sync_fallback(self) -> None:
        """Rewrite the static copy when the phase, the result or the log tail changed at a
        terminal phase (not at every render: it is what a saved notebook keeps)."""
        if self._fallback is None or self.status is None:
            return
        from . import fallback_bundle
        from .text import render_job_text
        with self._fallback_lock:
            st = self.status
            key = (st.phase, st.gang_ready, self.result_text,
                   self.logs_tail if st.terminal else None)
            if key == self._fallback_shown:
                return
            self._fallback_shown = key
            try:
                self._fallback.update(fallback_bundle(
                    render_job_text(st, self.logs_tail, self.result_text), self.to_html()), raw=True)
            except Exception:  # noqa: BLE001 - the live widget matters more than its copy
                pass
    def ending(self, status: JobStatus) -> bool:
        """A cancelled job whose ranks have not exited yet (the updater keeps polling while
        this is True, so the widget says "cancelling…" until they have)."""
        if status.phase != "cancelled" or (
                status.finished_at and time.time() - status.finished_at > self.CANCEL_SETTLE_S):
            self._cancelled_seen = None  # an old cancelled job: its pids may belong to others now
            return False
        now = time.monotonic()
        if self._cancelled_seen is None:
            self._cancelled_seen = now
        return now - self._cancelled_seen < self.CANCEL_SETTLE_S and ranks_alive(status)

    def toggle_details(self, expanded: bool | None = None) -> None:
        """Show (or hide) the sparklines, the timeline and the log tail."""
        self.expanded = (not self.expanded) if expanded is None else bool(expanded)
        self.details.layout.display = "" if self.expanded else "none"
        self.details_button.icon = "chevron-up" if self.expanded else "chevron-down"
        self.last_line.value = "" if self.expanded else last_line_html(self.logs_tail)

    def to_html(self) -> str:
        """The current state as static HTML (same renderer as ``text/html``)."""
        if self.status is None:
            return ""
        return render_job_html(self.status, self._history, self.logs_tail, self.result_text)

    def _cancel_clicked(self, _button: Any = None) -> None:
        if self._on_cancel is None:
            return
        self.cancel_button.disabled = True
        self.cancel_button.description = "cancelling…"
        try:
            self._on_cancel()
        except Exception as exc:  # shown in the widget; callbacks must not raise silently
            self.error.value = f'<span style="color:#cf222e">cancel failed: {exc}</span>'
            self.cancel_button.disabled = False
            self.cancel_button.description = "Cancel"


class QueueWidget(W.VBox):
    """A refreshing table of every job in a queue, built from a pandas DataFrame."""

    def __init__(self, source: Callable[[], list[JobStatus]], title: str = "queue",
                 refresh_s: float = 2.0, autostart: bool = True,
                 statuses: list[JobStatus] | None = None):
        self._source = source
        self.title = title
        self.refresh_s = refresh_s
        self.table = W.HTML()
        self.updated = W.Label()
        self.refresh_button = W.Button(description="Refresh", icon="refresh",
                                       layout=W.Layout(width="100px"))
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.frame = None
        self.refreshes = 0
        self._stop = threading.Event()
        super().__init__(children=[W.HBox([self.refresh_button, self.updated]), self.table])
        self.add_class("gpujobs-queue-widget")
        self.add_class("gpujobs-live")
        self.refresh(statuses)
        if autostart:
            _start_refresher(self)

    def refresh(self, statuses: list[JobStatus] | None = None) -> None:
        """Read the source once (or show ``statuses``, just read by the caller) and redraw
        (errors are shown, not raised)."""
        try:
            frame = jobs_frame(self._source() if statuses is None else statuses)
        except Exception as exc:
            self.updated.value = f"refresh failed: {type(exc).__name__}: {exc}"
            return
        self.frame = frame
        with self.table.hold_sync(), self.updated.hold_sync():
            self.table.value = frame_html(frame, self.title)
            self.updated.value = f"{len(frame)} jobs · updated {time.strftime('%H:%M:%S')}"
        self.refreshes += 1

    def close(self) -> None:
        self._stop.set()
        super().close()


def _start_refresher(widget: QueueWidget) -> None:
    """Refresh on a daemon thread that holds only a weak reference (a closed or dropped
    widget ends it)."""
    ref = weakref.ref(widget)
    stop = widget._stop
    interval = widget.refresh_s

    def loop() -> None:
        while not stop.wait(interval):
            w = ref()
            if w is None:
                return
            w.refresh()
            del w

    threading.Thread(target=loop, daemon=True, name="gpujobs-queue-widget").start()
