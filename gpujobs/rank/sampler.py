"""The sampler the rank *launcher* runs (local agent, pod launcher), never the training process.

>>> s = Sampler(ranks={0: (pid0, [0]), 1: (pid1, [1])}, interval=2.0, sink=history)
>>> s.start(); ...; s.stop()

Each round reads NVML for the GPUs a rank owns (with the memory its own
process tree holds there), or, without NVML or without GPUs, the CPU % and RSS
of the rank's process tree (``source="psutil"``). The sink gets one list per
round. ``cpu_seconds`` is the CPU time the sampling thread itself used.
"""
from __future__ import annotations

import sys
import threading
import time
from types import ModuleType
from typing import Callable, Mapping, Sequence, TextIO

from ..errors import SpecError
from .cpu import CpuReader
from .wire import GpuSample, format_metrics_line
from .nvml import Device, NvmlReader, hostname

Ranks = Mapping[int, tuple[int, Sequence[Device]]]
Sink = Callable[[list[GpuSample]], object]


class Sampler:
    """Samples a gang's ranks every ``interval`` seconds from a daemon thread."""

    def __init__(self, ranks: Ranks, interval: float = 2.0, sink: Sink | None = None,
                 host: str | None = None, nvml: ModuleType | None = None, use_nvml: bool = True):
        if not interval or interval <= 0:
            raise SpecError("interval", f"must be > 0 seconds, got {interval!r}", "use e.g. 2.0")
        self.interval = float(interval)
        self.sink = sink
        self.host = host if host is not None else hostname()
        self._ranks: dict[int, tuple[int, list[Device]]] = {}
        self.update(ranks)
        self._nvml = NvmlReader.open(nvml) if use_nvml else None
        try:
            self._cpu: CpuReader | None = CpuReader()
        except ImportError:  # a pod image without psutil: GPU readings only
            self._cpu = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.cpu_seconds = 0.0
        self.rounds = 0
        self.sink_error: str = ""

    # ------------------------------------------------------------------ setup
    def update(self, ranks: Ranks) -> None:
        """Replace the ranks (e.g. after a gang restart)."""
        new = {}
        for rank, value in ranks.items():
            try:
                pid, devices = value
                new[int(rank)] = (int(pid), list(devices or ()))
            except (TypeError, ValueError):
                raise SpecError(f"ranks[{rank!r}]", f"expected (pid, [gpu indices]), got {value!r}",
                                "pass {rank: (pid, [0, 1])}; [] for a CPU rank") from None
        self._ranks = new

    @property
    def nvml_available(self) -> bool:
        return self._nvml is not None

    @property
    def cpu_available(self) -> bool:
        """psutil imported (CPU readings of GPU-less ranks are possible)."""
        return self._cpu is not None

    @property
    def errors(self) -> dict:
        """Devices that failed on their last read, with the NVML error."""
        return dict(self._nvml.errors) if self._nvml else {}

    @property
    def reason(self) -> str:
        """Why a round may come back empty (for the "nothing to report" log line)."""
        if self._nvml is None and self._cpu is None:
            return "neither NVML nor psutil is available"
        if self._nvml is not None and self._nvml.errors:
            return "; ".join(f"GPU {d}: {e}" for d, e in self._nvml.errors.items())
        return "the rank processes have exited" if self._ranks else "no ranks to sample"

    # --------------------------------------------------------------- sampling
    def sample_once(self, now: float | None = None) -> list[GpuSample]:
        """One round over every rank (also usable without the thread)."""
        now = time.time() if now is None else now
        out: list[GpuSample] = []
        with self._lock:
            for rank, (pid, devices) in sorted(self._ranks.items()):
                if self._nvml is not None and devices:
                    pids = self._cpu.pids(pid) if self._cpu is not None else [pid]
                    out.extend(self._nvml.read(rank, devices, pids, host=self.host, now=now))
                elif self._cpu is not None:
                    out.extend(self._cpu.read(rank, pid, host=self.host, now=now))
        return out

    def _round(self) -> None:
        t0 = time.thread_time()
        samples = self.sample_once()
        if self.sink is not None:
            try:
                self.sink(samples)
            except Exception as exc:  # a broken sink must not stop sampling
                self.sink_error = f"{type(exc).__name__}: {exc}"
        self.rounds += 1
        self.cpu_seconds += time.thread_time() - t0

    def _run(self) -> None:
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                self._round()
                next_at += self.interval
                delay = next_at - time.monotonic()
                if delay < 0:  # fell behind (suspended machine): don't burst to catch up
                    next_at, delay = time.monotonic(), 0
                self._stop.wait(delay)
        finally:
            self._close_nvml()

    def _close_nvml(self) -> None:
        with self._lock:
            if self._nvml is not None:
                self._nvml.close()
                self._nvml = None

    def start(self) -> "Sampler":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="gpujobs-sampler")
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0, wait: bool = True) -> None:
        """Stop sampling. ``wait=False`` returns at once (safe while holding a lock the sink
        takes); the thread then ends after its current round and closes NVML itself."""
        self._stop.set()
        if self._thread is None:
            self._close_nvml()
        elif wait:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._close_nvml()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def log_sink(stream: TextIO | None = None, lock: threading.Lock | None = None,
             reason: Callable[[], str] | None = None) -> Sink:
    """A sink that writes one ``GPUJOBS-METRICS`` line per round (the Kubernetes channel).

    ``reason()`` explains an empty round (e.g. ``lambda: sampler.reason``).
    """
    lock = lock or threading.Lock()

    def write(samples: list[GpuSample]) -> None:
        why = "" if samples or reason is None else reason()
        line = format_metrics_line(samples, reason=why) + "\n"
        out = stream or sys.stdout
        with lock:
            out.write(line)
            out.flush()

    return write
