"""Progress reports from inside a job: the in-rank side of ``ctx.progress(step, total, **metrics)``.

:class:`ProgressReporter` keeps the latest report and writes at most one
``GPUJOBS-PROGRESS {json}`` line (:func:`gpujobs.rank.wire.format_progress_line`) per
``GPUJOBS_PROGRESS_INTERVAL`` seconds (default 1): the hot path of a call that is not written
is one clock read and a comparison. The line goes where the rank's status already travels:

- local backend (``dir:`` result sink): appended to ``<result dir>/progress-<rank>.log``,
  which the agent reads each metrics round into ``JobStatus.progress``;
- Kubernetes (``log`` sink): printed on stdout, so it is in the pod log the client
  already reads for metrics and results (no extra permission).

The last report of a rank is always written when the function returns (``flush``), so
the final status holds the final step. The reading side is :mod:`gpujobs.progress`.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import contract
from .filemodes import open_private
from .wire import format_progress_line

DEFAULT_INTERVAL_S = 1.0


def interval_s() -> float:
    try:
        return max(0.0, float(os.environ.get(contract.PROGRESS_INTERVAL) or DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S


class ProgressReporter:
    """The in-rank side of ``ctx.progress``: throttled writes of the latest report."""

    def __init__(self, rank: int, path: Path | str | None = None, stream: Any = None,
                 interval: float | None = None):
        self.rank = rank
        self.path = Path(path) if path is not None else None
        self.stream = stream
        self.interval = interval_s() if interval is None else interval
        self._next = 0.0  # monotonic time of the next allowed write
        self._pending: tuple | None = None  # the latest report not written yet
        self._lock = threading.Lock()
        self.writes = 0

    def report(self, step: float, total: float | None = None, metrics: dict | None = None) -> None:
        now = time.monotonic()
        if now < self._next:  # the hot path: remember, do not write
            self._pending = (step, total, metrics)
            return
        self._next = now + self.interval
        self._pending = None
        self._write(step, total, metrics or {}, time.time())

    def flush(self) -> None:
        """Write the latest report if it was throttled away (at the end of the function; it
        is stamped with the flush time, at most one interval after the call)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            step, total, metrics = pending
            self._write(step, total, metrics or {}, time.time())

    def _write(self, step: float, total: float | None, metrics: dict, t: float) -> None:
        line = format_progress_line(self.rank, step, total, metrics, t) + "\n"
        with self._lock:
            try:
                if self.path is not None:
                    with open_private(self.path, "a") as fh:
                        fh.write(line)
                else:
                    out = self.stream or sys.stdout
                    out.write(line)
                    out.flush()
                self.writes += 1
            except (OSError, ValueError):  # progress never fails a training step
                pass


def for_environment(rank: int) -> ProgressReporter:
    """The reporter of this rank: a file in the local result dir, else stdout (pod log)."""
    directory = contract.result_sink_dir(contract.RankEnv.from_env().result_sink)
    if directory is not None:
        return ProgressReporter(rank, path=directory / contract.PROGRESS.name(rank))
    return ProgressReporter(rank)
