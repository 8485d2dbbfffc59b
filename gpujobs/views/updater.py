"""The live updater: feeds any view from a job's events, throttled, stopping at a terminal phase.

When reading the status fails (the agent or the API server gone), the view keeps the last status,
marked ``not current`` with the error, and the updater polls on.

No ipywidgets here, so the widget-less HTML view uses it too.
"""
from __future__ import annotations

import re
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Iterable, Protocol

from ..status import JobStatus

MIN_INTERVAL_S = 0.5  # at most 2 renders per second
POLL_S = 2.0  # fallback poll when no event arrives
_updaters: "weakref.WeakSet[JobUpdater]" = weakref.WeakSet()  # of this process (settle())


def settle(timeout: float = 30.0) -> bool:
    """Wait until every job view of this process shows its final state, then publish it again.

    Views update from a background thread; a notebook executed headlessly (nbclient,
    ``jupyter nbconvert --execute``) keeps only widget messages that arrive while a cell
    runs, so a final render that fell between two cells is lost. Ending such a notebook
    with ``gpujobs.views.settle()`` saves every widget's final state.
    """
    deadline = time.monotonic() + timeout
    updaters = list(_updaters)
    done = all(u.join(max(0.0, deadline - time.monotonic())) for u in updaters)
    for u in updaters:
        _resend(u.view)
    return done


def _resend(widget: Any) -> None:
    send = getattr(widget, "send_state", None)
    if callable(send):
        send()
    resync = getattr(widget, "resend_fallback", None)
    if callable(resync):
        resync()
    for child in getattr(widget, "children", ()) or ():
        _resend(child)
LOGS_EVERY_S = 2.0
_SOURCE = {"local": "the local agent", "kubernetes": "the cluster"}  # who a failed status() read asks


_RANK = re.compile(r"^\[rank (\d+)\] ")


class LogTail:
    """The newest lines of every rank, interleaved in the order they were read.

    ``job.logs()`` gives each rank's whole log one after another (rank 0's, then rank 1's …),
    so its last lines are the last rank's alone. Fed each such read, this keeps the lines that
    are new since the previous read, every rank's batch aligned at its newest line, so the
    tail ends with each rank's latest output, rank 0's (the one that usually reports) last."""

    def __init__(self, keep: int = 40):
        self.seen: dict[int, int] = {}
        self.lines: deque[str] = deque(maxlen=keep)

    def feed(self, text: str) -> str:
        by_rank: dict[int, list[str]] = {}
        for line in text.rstrip("\n").splitlines():
            m = _RANK.match(line)
            by_rank.setdefault(int(m.group(1)) if m else -1, []).append(line)
        fresh = []
        for r in sorted(by_rank):
            got = by_rank[r]
            start = self.seen.get(r, 0)
            fresh.append(got[start:] if start <= len(got) else got)  # shorter: a restart rewrote it
            self.seen[r] = len(got)
        self.lines.extend(merge_newest_last(fresh))
        return "\n".join(self.lines)


def merge_newest_last(batches: Iterable[list[str]]) -> list[str]:
    """Interleave line lists line by line, aligned at their ends (their newest lines last; in a
    row, the first list's line last)."""
    lists = [b for b in batches if b]
    longest = max((len(b) for b in lists), default=0)
    out = []
    for i in range(longest):
        for b in reversed(lists):
            j = i - (longest - len(b))
            if j >= 0:
                out.append(b[j])
    return out


class StatusSource(Protocol):
    """What the updater reads: the Job handle satisfies it."""

    def subscribe(self, callback: Callable[[JobStatus], Any]) -> Callable[[], None]: ...

    def status(self) -> JobStatus: ...

    def logs(self, follow: bool = False, rank: int | None = None) -> Any: ...


class JobUpdater:
    """Feeds a view (``update(status, logs_tail=, result_text=)``) from a job.

    Events from ``job.subscribe`` wake one updater thread; a poll every ``poll_s``
    covers backends that miss events. Renders are at least ``min_interval`` apart,
    each showing the latest status. At a terminal phase it renders once more (with
    ``summarize(job)``'s result line) and stops. ``initial``: a status the caller has just
    read; the first render shows it instead of reading the job again.
    """

    def __init__(self, job: StatusSource, view: Any, *, min_interval: float = MIN_INTERVAL_S,
                 poll_s: float = POLL_S, logs_every_s: float = LOGS_EVERY_S,
                 summarize: Callable[[Any, JobStatus], str] | None = None,
                 clock: Callable[[], float] = time.monotonic, initial: JobStatus | None = None):
        self.job = job
        self.view = view
        self.min_interval = min_interval
        self.poll_s = poll_s
        self.logs_every_s = logs_every_s
        self.summarize = summarize
        self.clock = clock
        self.renders = 0
        self.final_status: JobStatus | None = None
        self._latest: JobStatus | None = initial
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self._tail = LogTail()
        self.done = threading.Event()

    def start(self) -> "JobUpdater":
        try:
            self._unsubscribe = self.job.subscribe(self._on_status)
        except Exception:
            self._unsubscribe = None  # the poll still works
        _updaters.add(self)
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpujobs-widget")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def _on_status(self, status: JobStatus) -> None:
        """Called from the backend's thread: only remember and wake (never render here)."""
        with self._lock:
            self._latest = status
        self._wake.set()

    def _take(self) -> JobStatus | None:
        with self._lock:
            st, self._latest = self._latest, None
        return st

    def _run(self) -> None:
        """Render the latest status; while ``status()`` raises, the last one marked not current
        (once per distinct error), polling on until a read works again."""
        last_render = -1e9
        last_logs = -1e9
        current: JobStatus | None = None
        good: JobStatus | None = None  # the latest status read or told, unmarked
        failing: tuple[float, str] | None = None  # (since, why) while status() raises
        try:
            while not self._stop.is_set():
                woke = self._wake.wait(self.poll_s if current is not None else 0)
                self._wake.clear()
                st = self._take()
                if st is None and (not woke or current is None):
                    try:
                        st = self.job.status()
                    except Exception as exc:  # noqa: BLE001 (any failure is shown, then polled again)
                        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
                        if good is not None and (failing is None or failing[1] != why):
                            now = time.time()  # or since the hub said so, if earlier
                            failing = (min(good.extra.get("stale_since") or now, now) if failing is None
                                       else failing[0], why)
                            st = good.not_current(failing[0], why, _SOURCE.get(good.backend, "the backend"))
                if st is None:
                    continue
                if "stale_since" not in st.extra or failing is None:
                    good, failing = st, None
                delay = last_render + self.min_interval - self.clock()
                if delay > 0:
                    self._stop.wait(delay)
                    st = self._take() or st  # coalesce what arrived meanwhile
                current = st
                logs = None
                now = self.clock()
                if st.terminal or (st.phase == "running" and now - last_logs >= self.logs_every_s):
                    logs = self._logs()
                    last_logs = now
                result = None
                if st.terminal and self.summarize is not None:
                    try:
                        result = self.summarize(self.job, st)
                    except Exception as exc:
                        result = f"{type(exc).__name__}: {exc}"
                self.view.update(st, logs_tail=logs, result_text=result)
                self.renders += 1
                last_render = self.clock()
                if st.terminal:
                    self.final_status = st
                    ending = getattr(self.view, "ending", None)
                    try:
                        still = bool(ending(st)) if ending is not None else False
                    except Exception:  # noqa: BLE001
                        still = False
                    if not still:  # e.g. a cancelled job's ranks still exiting: poll on
                        break
        finally:
            if self._unsubscribe is not None:
                try:
                    self._unsubscribe()
                except Exception:
                    pass
            self.done.set()

    def _logs(self) -> str | None:
        try:
            text = self.job.logs()
        except Exception:
            return None
        if not isinstance(text, str):
            return None
        return self._tail.feed(text)
