"""The metrics model: a bounded history of :class:`GpuSample` per (rank, device).

``MetricsHistory`` keeps at most ``maxlen`` samples per (rank, device) (a ring
buffer, like jupyterlab-nvdashboard's 1000-point series), so a job that runs
for a week costs the same memory as one that runs for an hour. ``latest()`` is
what ``JobStatus.metrics`` carries; ``frame()`` (pandas, see :mod:`.frame`) is
what ``job.metrics()`` returns. Standard library only: it also runs in pods.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Iterable

from ..rank.wire import GpuSample

#: 30 minutes at one sample per 2 s, per (rank, device).
DEFAULT_MAXLEN = 900


class MetricsHistory:
    """Thread-safe ring buffers of samples, one per (rank, device)."""

    def __init__(self, maxlen: int = DEFAULT_MAXLEN):
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self.maxlen = maxlen
        self._series: dict[tuple[int, int], deque[GpuSample]] = {}
        self._lock = threading.Lock()

    def add(self, samples: Iterable[GpuSample]) -> None:
        with self._lock:
            for s in samples:
                key = (s.rank, s.device)
                series = self._series.get(key)
                if series is None:
                    series = self._series[key] = deque(maxlen=self.maxlen)
                series.append(s)

    __call__ = add  # a history is a valid Sampler sink

    def latest(self) -> tuple[GpuSample, ...]:
        """The newest sample per (rank, device), ordered by rank then device."""
        with self._lock:
            return tuple(self._series[k][-1] for k in sorted(self._series) if self._series[k])

    def samples(self) -> list[GpuSample]:
        """Every kept sample, oldest first."""
        with self._lock:
            out = [s for series in self._series.values() for s in series]
        return sorted(out, key=lambda s: (s.time, s.rank, s.device))

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._series.values())

    def clear(self) -> None:
        with self._lock:
            self._series.clear()

    def frame(self):
        """The samples as a :class:`~gpujobs.metrics.frame.MetricsFrame` (needs pandas)."""
        from .frame import metrics_frame
        return metrics_frame(self.samples())


def latest_per_device(samples: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """The newest sample per (rank, device) of any sample list."""
    newest: dict[tuple[int, int], GpuSample] = {}
    for s in samples:
        key = (s.rank, s.device)
        if key not in newest or s.time >= newest[key].time:
            newest[key] = s
    return tuple(newest[k] for k in sorted(newest))
