"""The metrics model: a bounded history of :class:`GpuSample` per (rank, device), and its frame.

``MetricsHistory`` keeps at most ``maxlen`` samples per (rank, device) (a ring
buffer, like jupyterlab-nvdashboard's 1000-point series), so a job that runs
for a week costs the same memory as one that runs for an hour. ``latest()`` is
what ``JobStatus.metrics`` carries; ``frame()`` is what ``job.metrics()`` returns.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, fields
from typing import Iterable

import pandas as pd

from ..status import GpuSample

#: 30 minutes at one sample per 2 s, per (rank, device).
DEFAULT_MAXLEN = 900
#: ``GpuSample.device`` of a CPU (psutil) reading: it is not a GPU index.
CPU_DEVICE = -1
COLUMNS = [f.name for f in fields(GpuSample)]


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

    def frame(self) -> "MetricsFrame":
        return metrics_frame(self.samples())


def latest_per_device(samples: Iterable[GpuSample]) -> tuple[GpuSample, ...]:
    """The newest sample per (rank, device) of any sample list."""
    newest: dict[tuple[int, int], GpuSample] = {}
    for s in samples:
        key = (s.rank, s.device)
        if key not in newest or s.time >= newest[key].time:
            newest[key] = s
    return tuple(newest[k] for k in sorted(newest))


class MetricsPlot:
    """``frame.plot()``: utilisation and memory per (rank, device) over time.

    Any other attribute (``frame.plot.line(...)``) is pandas' own plot accessor.
    """

    def __init__(self, frame: "MetricsFrame"):
        self._frame = frame

    def __call__(self, **kwargs):
        import matplotlib.pyplot as plt

        df = self._frame
        fig, (ax_u, ax_m) = plt.subplots(2, 1, sharex=True, figsize=kwargs.pop("figsize", (8, 5)))
        if df.empty:
            ax_u.set_title("no metrics samples yet")
            return fig
        cpu = bool((df["source"] == "psutil").all())
        for (rank, device, source), g in df.groupby(["rank", "device", "source"], sort=True):
            label = f"rank {rank} CPU" if source == "psutil" else f"rank {rank} GPU {device}"
            ax_u.plot(g["time"], g["util"], label=label, **kwargs)
            ax_m.plot(g["time"], g["mem_used"] / 2**30, label=label, **kwargs)
        ax_u.set_ylabel("CPU %" if cpu else "busy %")
        ax_m.set_ylabel("RSS GiB" if cpu else "memory GiB")
        ax_u.set_title("CPU ranks (no GPU): psutil" if cpu else "GPU busy % (NVML/DCGM)")
        ax_u.legend(loc="upper left", fontsize="small")
        fig.autofmt_xdate()
        return fig

    def __getattr__(self, name: str):
        return getattr(pd.DataFrame(self._frame).plot, name)


class MetricsFrame(pd.DataFrame):
    """A DataFrame of samples (one row per sample) whose ``.plot()`` draws the usual two panels."""

    _metadata: list[str] = []

    @property
    def _constructor(self):
        return MetricsFrame

    @property
    def plot(self) -> MetricsPlot:  # type: ignore[override]
        return MetricsPlot(self)

    @property
    def is_cpu(self) -> bool:
        """True when every row is a CPU (psutil) reading, not a GPU one."""
        return bool(len(self)) and bool((self["source"] == "psutil").all())


def metrics_frame(samples: Iterable[GpuSample]) -> MetricsFrame:
    """Samples as a MetricsFrame: columns of GpuSample, ``time`` as UTC timestamps, time-sorted."""
    rows = [asdict(s) for s in samples]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["time"] = pd.to_datetime(df["time"].astype(float), unit="s", utc=True)
    for col in ("util", "mem_used", "mem_total", "power_w", "temp_c", "proc_mem"):
        df[col] = df[col].astype(float)
    df = df.sort_values(["time", "rank", "device"], kind="stable").reset_index(drop=True)
    return MetricsFrame(df)
