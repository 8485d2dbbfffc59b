"""``job.metrics()``: samples as a pandas DataFrame whose ``.plot()`` draws the usual two panels."""
from __future__ import annotations

from dataclasses import asdict, fields
from typing import Iterable

import pandas as pd

from ..status import GpuSample

COLUMNS = [f.name for f in fields(GpuSample)]


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
    def plot(self) -> MetricsPlot:
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
    for col in ("util", "mem_used", "mem_total", "power_w", "temp_c", "proc_mem", "sm_util"):
        df[col] = df[col].astype(float)
    df = df.sort_values(["time", "rank", "device"], kind="stable").reset_index(drop=True)
    return MetricsFrame(df)
