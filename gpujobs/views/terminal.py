"""Terminal progress while waiting: ``job.wait(progress=True)`` and ``gpujobs submit --wait``.

Before the job reports progress: a spinner with its phase (rich). Once it calls
``ctx.progress(step, total)``: a bar with rate and time left (tqdm when installed, else
rich). Not a terminal: one plain line per change.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Protocol, TextIO

from ..status import JobStatus


def _left(st: JobStatus) -> str:
    p = st.progress
    if p is None or p.expected_end is None:
        return ""
    from ..status import duration_text
    return duration_text(max(0.0, p.expected_end - time.time())) + " left"


class ProgressDisplay:
    """Shows one job's status: spinner, then a bar; ``close()`` leaves the terminal clean."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None,
                 prefer: str | None = None):
        self.stream = stream or sys.stderr
        self.live = _isatty(self.stream) if live is None else live
        self.prefer = prefer  # "tqdm" / "rich" / None (tqdm when installed)
        self._lock = threading.Lock()
        self._spinner: Any = None
        self._bar: Any = None
        self._kind = ""
        self._task: Any = None
        self._last = ""
        self.kind_used = ""  # what drew the bar: "tqdm", "rich", "plain", "spinner"

    # ------------------------------------------------------------------ public
    def update(self, st: JobStatus) -> None:
        with self._lock:
            if not self.live:
                return self._plain(st)
            p = st.progress
            if p is None or st.terminal and self._bar is None:
                return self._spin(st)
            self._stop_spinner()
            self._draw_bar(st)

    def close(self) -> None:
        with self._lock:
            self._stop_spinner()
            if self._bar is not None:
                try:
                    if self._kind == "tqdm":
                        self._bar.close()
                    else:
                        self._bar.stop()
                except Exception:  # noqa: BLE001
                    pass
                self._bar = None

    # ---------------------------------------------------------------- drawing
    def _plain(self, st: JobStatus) -> None:
        text = st.summary()
        if text != self._last:
            self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            self.stream.flush()
            self._last = text
            self.kind_used = self.kind_used or "plain"

    def _spin(self, st: JobStatus) -> None:
        text = st.summary()
        if self._spinner is None:
            try:
                from rich.console import Console
                self._spinner = Console(file=self.stream).status(text)
                self._spinner.start()
                self.kind_used = self.kind_used or "spinner"
            except Exception:  # noqa: BLE001 - no rich after all: plain lines
                self.live = False
                return self._plain(st)
        self._spinner.update(text)

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            try:
                self._spinner.stop()
            except Exception:  # noqa: BLE001
                pass
            self._spinner = None

    def _draw_bar(self, st: JobStatus) -> None:
        p = st.progress
        assert p is not None  # drawn only once the job reports progress (see update)
        total = p.total
        extra = " · ".join(x for x in (
            ", ".join(f"{k}={_short(v)}" for k, v in list(p.metrics.items())[:4]), _left(st),
            st.extra.get("stall") if st.stalled_since is not None else "", st.stale_note) if x)
        if self._bar is None:
            self._open_bar(st, total)
        total = _whole(total)
        if self._kind == "tqdm":
            bar = self._bar
            if total and bar.total != total:
                bar.total = total
            bar.n = _whole(p.step)
            bar.set_postfix_str(extra, refresh=False)
            bar.refresh()
        else:
            rate = f"{p.rate:.3g} steps/s" if p.rate else ""
            self._bar.update(self._task, completed=p.step, total=total, count=_count(p),
                             info=" · ".join(x for x in (rate, extra) if x))

    def _open_bar(self, st: JobStatus, total: float | None) -> None:
        label = st.name or st.job_id
        if self.prefer in (None, "tqdm"):
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=_whole(total), desc=label, unit="step", file=self.stream,
                                 dynamic_ncols=True)
                self._kind = self.kind_used = "tqdm"
                return
            except ImportError:
                pass
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                             TextColumn("{task.fields[count]}"),
                             TextColumn("{task.fields[info]}"),
                             console=_console(self.stream), transient=False)
        self._task = self._bar.add_task(label, total=total, info="", count="")
        self._bar.start()
        self._kind = self.kind_used = "rich"


def _console(stream: TextIO):
    from rich.console import Console
    return Console(file=stream)


def _whole(x: Any) -> Any:
    """30.0 -> 30: counts read '30/30', never '30/30.0'."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _count(p: Any) -> str:
    """'12/30' (or '12' without a total), as ``Progress.text`` writes numbers."""
    from ..status import _num_text
    return _num_text(p.step) + (f"/{_num_text(p.total)}" if p.total else "")


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)[:20]


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except Exception:  # noqa: BLE001
        return False


class WaitSource(Protocol):
    """What :func:`wait_with_bar` needs of a backend (every backend has it)."""

    def subscribe(self, job_id: str, callback: Callable[[JobStatus], Any]) -> Callable[[], None]: ...

    def wait(self, job_id: str, timeout: float | None = None) -> JobStatus: ...

    def status(self, job_id: str) -> JobStatus: ...


def wait_with_bar(backend: WaitSource, job_id: str, timeout: float | None = None,
                  display: ProgressDisplay | None = None) -> JobStatus:
    """``backend.wait`` with a :class:`ProgressDisplay` fed by pushed status changes (and a
    status read each second, for backends whose pushes carry no progress)."""
    display = display or ProgressDisplay()
    deadline = None if timeout is None else time.monotonic() + timeout
    unsubscribe = None
    try:
        unsubscribe = backend.subscribe(job_id, display.update)
    except Exception:  # noqa: BLE001 - a backend without pushes: reads alone
        pass
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            st = backend.wait(job_id, timeout=1.0 if left is None else min(1.0, left))
            if not st.terminal and st.progress is None:
                st = backend.status(job_id)  # a status read carries progress where waits do not
            display.update(st)
            if st.terminal or (deadline is not None and time.monotonic() >= deadline):
                return st
    finally:
        if unsubscribe is not None:
            try:
                unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        display.close()
