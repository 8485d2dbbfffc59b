"""One running gang's metrics, for the local agent: a Sampler, its bounded history, a file.

>>> jm = JobMetrics.for_gang(gang, path=job_dir / "metrics.log", on_update=notify)
>>> jm.latest()          # -> JobStatus.metrics
>>> jm.stop()            # when the gang ends (the history stays readable)
>>> read_history(job_dir / "metrics.log").samples()   # any other process (client, CLI)

The file holds the same ``GPUJOBS-METRICS`` lines a pod writes into its log,
one per round, and is trimmed back to ``maxlen`` rounds whenever it reaches
twice that, so it stays bounded too.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

from ..status import GpuSample
from ..rank.wire import format_metrics_line, parse_metrics_line
from .model import DEFAULT_MAXLEN, MetricsHistory
from ..rank.sampler import Ranks, Sampler
from ..rank import contract
from ..rank.filemodes import open_private, replace_private


def default_interval() -> float:
    """Seconds between rounds: ``GPUJOBS_METRICS_INTERVAL`` or 2."""
    try:
        return float(os.environ.get(contract.METRICS_INTERVAL) or 2.0)
    except ValueError:
        return 2.0


def ranks_of_gang(gang: Any, devices: Any = None) -> dict[int, tuple[int, list[int]]]:
    """{rank: (pid, [gpu indices])} of a local gang (``procs``; ``devices`` or ``gang.devices``).

    A gang with one launcher process for several ranks (mpirun, a Ray driver) is sampled
    as one process tree holding all the gang's GPUs.
    """
    devices = devices if devices is not None else getattr(gang, "devices", None)
    procs = dict(gang.procs)
    if devices and len(procs) == 1 and len(devices) > 1:
        ((rank, proc),) = procs.items()
        return {rank: (proc.pid, [d for per_rank in devices for d in per_rank])}
    return {rank: (proc.pid, list(devices[rank]) if devices and rank < len(devices) else [])
            for rank, proc in procs.items()}


class JobMetrics:
    """Samples one gang into a bounded history (and optionally a bounded file)."""

    def __init__(self, ranks: Ranks, path: Path | str | None = None,
                 on_update: Callable[[tuple[GpuSample, ...]], Any] | None = None,
                 interval: float | None = None, maxlen: int = DEFAULT_MAXLEN, **sampler_kw: Any):
        self.history = MetricsHistory(maxlen)
        self.path = Path(path) if path is not None else None
        self.on_update = on_update
        self._file_rounds = 0
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():  # a restarted gang keeps its past
            self.history.add(read_history(self.path, maxlen).samples())
            self._file_rounds = sum(1 for _ in self.path.open())
        self.sampler = Sampler(ranks, interval=interval or default_interval(), sink=self._sink,
                               **sampler_kw)

    @classmethod
    def for_gang(cls, gang: Any, **kw: Any) -> "JobMetrics":
        return cls(ranks_of_gang(gang), **kw).start()

    def _sink(self, samples: list[GpuSample]) -> None:
        if not samples:
            return
        self.history.add(samples)
        if self.path is not None:
            self._write(format_metrics_line(samples))
        if self.on_update is not None:
            self.on_update(self.history.latest())

    def _write(self, line: str) -> None:
        assert self.path is not None  # written only when the tracker has a file (see _sink)
        with self._lock:
            if self._file_rounds >= 2 * self.history.maxlen:
                keep = self.path.read_text().splitlines()[-self.history.maxlen:]
                replace_private(self.path, "".join(k + "\n" for k in keep))
                self._file_rounds = len(keep)
            with open_private(self.path, "a") as fh:
                fh.write(line + "\n")
            self._file_rounds += 1

    def start(self) -> "JobMetrics":
        self.sampler.start()
        return self

    def stop(self, wait: bool = True) -> None:
        self.sampler.stop(wait=wait)

    def latest(self) -> tuple[GpuSample, ...]:
        return self.history.latest()

    def samples(self) -> list[GpuSample]:
        return self.history.samples()


def read_history(path: Path | str, maxlen: int = DEFAULT_MAXLEN) -> MetricsHistory:
    """The history a JobMetrics file holds (empty when there is no file yet)."""
    hist = MetricsHistory(maxlen)
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                samples = parse_metrics_line(line)
                if samples:
                    hist.add(samples)
    except FileNotFoundError:
        pass
    return hist
