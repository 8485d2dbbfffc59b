"""Bounded history, latest-per-device, the DataFrame and its plot."""
from __future__ import annotations

import matplotlib
import pandas as pd
import pytest

from gpujobs.metrics import MetricsFrame, MetricsHistory, latest_per_device, metrics_frame
from gpujobs.status import GpuSample

matplotlib.use("Agg")


def s(t, rank=0, device=0, util=50.0, source="nvml"):
    return GpuSample(time=t, rank=rank, device=device, util=util, mem_used=1e9, mem_total=8e10,
                     source=source)


def test_history_is_bounded_per_rank_and_device():
    h = MetricsHistory(maxlen=10)
    for t in range(1000):
        h.add([s(t, 0, 0, util=t % 100), s(t, 1, 3)])
    assert len(h) == 20
    kept = [x.time for x in h.samples() if x.rank == 0]
    assert kept == list(range(990, 1000))  # the newest ten, oldest first
    assert [(x.rank, x.device, x.time) for x in h.latest()] == [(0, 0, 999), (1, 3, 999)]
    h.clear()
    assert len(h) == 0 and h.latest() == ()


def test_history_rejects_zero_length():
    with pytest.raises(ValueError):
        MetricsHistory(maxlen=0)


def test_latest_per_device_picks_newest_whatever_the_order():
    got = latest_per_device([s(5, 0, 1), s(9, 0, 1, util=9), s(7, 0, 1), s(2, 1, 0)])
    assert [(x.rank, x.device, x.util) for x in got] == [(0, 1, 9), (1, 0, 50.0)]


def test_frame_columns_types_and_order():
    f = metrics_frame([s(20.5, 1), s(10.0, 0), s(20.5, 0)])
    assert isinstance(f, MetricsFrame) and isinstance(f, pd.DataFrame)
    assert list(f.columns)[:4] == ["time", "rank", "device", "util"]
    assert str(f["time"].dtype) == "datetime64[ns, UTC]"
    assert list(zip(f["time"].map(pd.Timestamp.timestamp), f["rank"])) == [
        (10.0, 0), (20.5, 0), (20.5, 1)]
    assert isinstance(f[f["rank"] == 0], MetricsFrame)  # slicing keeps the type (and .plot())
    assert not f.is_cpu
    assert metrics_frame([s(1, source="psutil")]).is_cpu


def test_empty_frame_has_the_columns():
    f = metrics_frame([])
    assert f.empty and "util" in f.columns and not f.is_cpu


def test_plot_draws_one_line_per_rank_device_and_labels_cpu():
    f = metrics_frame([s(t, r, d, util=10 * r + t) for t in range(5) for r, d in ((0, 0), (1, 1))])
    fig = f.plot()
    ax_u, ax_m = fig.axes
    assert [line.get_label() for line in ax_u.get_lines()] == ["rank 0 GPU 0", "rank 1 GPU 1"]
    assert list(ax_u.get_lines()[1].get_ydata()) == [10, 11, 12, 13, 14]
    assert ax_u.get_ylabel() == "busy %"
    cpu = metrics_frame([s(t, 0, -1, source="psutil") for t in range(3)]).plot()
    assert cpu.axes[0].get_ylabel() == "CPU %" and "CPU" in cpu.axes[0].get_title()
    assert metrics_frame([]).plot().axes[0].get_title() == "no metrics samples yet"
    # pandas' own accessor is still reachable
    ax = f.plot.line(x="time", y="util")
    assert ax.get_lines()
