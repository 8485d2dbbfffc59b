"""Live GPU metrics for every job: sampler, bounded history, log-line channel, DCGM, usage.

- :class:`Sampler` runs in the rank launcher (local agent thread, pod launcher)
  and reads NVML, or the CPU of the ranks' process trees (``source="psutil"``)
  when there is no GPU.
- :class:`MetricsHistory` keeps a bounded history per (rank, device);
  ``JobStatus.metrics`` carries its ``latest()``; ``job.metrics()`` returns
  :func:`job_metrics_frame` (a DataFrame with a ``.plot()``).
- On Kubernetes the launcher writes ``GPUJOBS-METRICS {json}`` log lines
  (:func:`parse_metrics_line` reads them back).
- :mod:`gpujobs.metrics.dcgm` reads dcgm-exporter through Prometheus;
  :mod:`gpujobs.metrics.usage` turns job records and samples into a usage report.

Modules: ``sampler``, ``nvml`` (GPU readings), ``cpu`` (a rank's process tree, no GPU),
``model`` (MetricsHistory), ``tracker`` (one running gang's metrics, for the local agent),
``logline`` (the ``GPUJOBS-METRICS`` line), ``podlaunch`` (the pod launcher with metrics),
``frame`` (``job.metrics()`` as a DataFrame), ``dcgm``, ``usage``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .logline import METRICS_MARKER, format_metrics_line, metrics_reason, parse_metrics_line
from .model import CPU_DEVICE, MetricsHistory, latest_per_device
from .sampler import Sampler, log_sink
from .tracker import JobMetrics, read_history, ranks_of_gang

if TYPE_CHECKING:
    from ..status import JobStatus

_LAZY = {"MetricsFrame": ".frame", "metrics_frame": ".frame", "usage_report": ".usage"}


def __getattr__(name: str) -> Any:
    """pandas-based names load on first use: the sampler side (pods) needs no pandas."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Sampler", "log_sink", "MetricsHistory", "MetricsFrame", "metrics_frame",
           "latest_per_device", "job_metrics_frame", "machine_gpus", "parse_metrics_line",
           "format_metrics_line", "metrics_reason", "METRICS_MARKER", "CPU_DEVICE",
           "usage_report", "job_samples", "JobMetrics", "read_history", "ranks_of_gang"]


class StatusReader(Protocol):
    """What :func:`job_samples` needs of a backend (any backend; ``metrics_history`` is optional)."""

    def status(self, job_id: str) -> JobStatus: ...


def job_samples(backend: StatusReader, job_id: str) -> list:
    """A job's kept samples: the backend's history when it keeps one, else its latest readings."""
    from ..backends.base import HasMetricsHistory
    if isinstance(backend, HasMetricsHistory):
        return list(backend.metrics_history(job_id))
    return list(backend.status(job_id).metrics)


def job_metrics_frame(job: Any):
    """``job.metrics()``: every kept sample of the job, one row each (a MetricsFrame)."""
    from .frame import metrics_frame
    return metrics_frame(job_samples(job.backend, job.id))


MACHINE_COLUMNS = ["index", "name", "uuid", "util", "mem_used", "mem_total", "processes", "free",
                   "error"]


def machine_gpus(nvml: Any = None):
    """This machine's GPUs now (one row each; ``free`` = no compute process on it).

    Without NVML the frame is empty and ``.attrs["summary"]`` says
    ``"no GPU: N CPU slots"``; with GPUs it says ``"k of N GPUs free"``.
    """
    import pandas as pd

    from ..devices import local_gpu_slots
    from .nvml import NvmlReader

    reader = NvmlReader.open(nvml)
    if reader is None:
        slots, _ = local_gpu_slots(found=0)  # NVML just said no: do not ask again
        df = pd.DataFrame([], columns=MACHINE_COLUMNS)
        df.attrs.update(summary=f"no GPU: {slots} CPU slots", gpus=0, cpu_slots=slots)
        return df
    try:
        rows = reader.devices()
    except Exception as exc:  # NVML answered init but not the device count
        df = pd.DataFrame([], columns=MACHINE_COLUMNS)
        df.attrs.update(summary=f"GPUs unreadable: {type(exc).__name__}: {exc}", gpus=0,
                        cpu_slots=0)
        return df
    finally:
        reader.close()
    df = pd.DataFrame(rows, columns=MACHINE_COLUMNS)
    df.attrs.update(summary=f"{int(df['free'].sum())} of {len(df)} GPUs free", gpus=len(df),
                    cpu_slots=0)
    return df
