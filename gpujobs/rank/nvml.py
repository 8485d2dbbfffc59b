"""GPU readings through NVML (``pynvml`` from nvidia-ml-py).

``NvmlReader.open()`` returns None where NVML is missing (``nvmlInit`` raises
``NVMLError_LibraryNotFound`` on machines without a driver): the caller then
falls back to CPU readings. A device that fails to answer (lost GPU, reset)
yields no sample for that round and is named in ``reader.errors``; the other
devices keep reporting.

Where NVML has GPM (GPU Performance Monitoring: Hopper and later), each sample also
carries ``sm_util``, the percent of SMs busy since the previous round. It tells a GPU that
computes from one whose kernel only waits: on an H200, bf16 matrix products read 93 %
``utilization.gpu`` and 96 % SM utilisation, a one-thread spinning kernel (the shape of a
rank blocked in an NCCL collective) 100 % and 0.8 % (tools/gpu_signals.py,
benchmarks/RESULTS.md).
"""
from __future__ import annotations

import importlib
import os
import socket
import time
from types import ModuleType
from typing import Iterable, Sequence

from .wire import GpuSample
from . import contract

Device = int | str  # an NVML index or a GPU UUID (as CUDA_VISIBLE_DEVICES may hold)


def load_pynvml() -> ModuleType | None:
    """The pynvml module (looked up each time, so tests can inject one), or None."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def parse_visible_devices(value: str | None) -> list[Device] | None:
    """CUDA_VISIBLE_DEVICES as a list (ints or UUIDs); None when unset (all GPUs)."""
    if value is None:
        return None
    out: list[Device] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if part.lstrip("-").isdigit():
            idx = int(part)
            if idx < 0:
                break  # CUDA stops at the first invalid index
            out.append(idx)
        else:
            out.append(part)
    return out


def gpm_metrics(nvml: ModuleType, first: object, second: object, ids: Sequence[int]) -> list[float | None]:
    """The GPM metrics ``ids`` (``NVML_GPM_METRIC_*``) between two GPM samples of one GPU, in
    that order; None where NVML gave none. Raises what ``nvmlGpmMetricsGet`` raises."""
    get = nvml.c_nvmlGpmMetricsGet_t()
    get.version = nvml.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = len(ids)
    get.sample1, get.sample2 = first, second
    for i, metric in enumerate(ids):
        get.metrics[i].metricId = metric
    nvml.nvmlGpmMetricsGet(get)
    ok = getattr(nvml, "NVML_SUCCESS", 0)
    return [round(float(m.value), 2) if m.nvmlReturn == ok else None
            for m in (get.metrics[i] for i in range(len(ids)))]


def _unsupported(nvml: ModuleType, exc: Exception) -> bool:
    """``exc`` says the call can never work here (not a passing failure of one round)."""
    kinds = tuple(k for k in (getattr(nvml, "NVMLError_NotSupported", None),
                              getattr(nvml, "NVMLError_FunctionNotFound", None)) if isinstance(k, type))
    return isinstance(exc, (AttributeError, *kinds))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads utilisation, memory, power and temperature of chosen GPUs."""

    def __init__(self, nvml: ModuleType):
        self.nvml = nvml
        self.errors: dict[Device, str] = {}
        self._closed = False
        self._gpm_last: dict[tuple[int, Device], object] = {}  # (rank, device) -> GPM sample of its last read
        self._gpm_off: set[Device] = set()  # devices without GPM (asked once)

    @classmethod
    def open(cls, nvml: ModuleType | None = None) -> "NvmlReader | None":
        """An initialised reader, or None when NVML (or its library) is not there."""
        nvml = nvml or load_pynvml()
        if nvml is None:
            return None
        try:
            nvml.nvmlInit()
        except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, …
            return None
        return cls(nvml)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for sample in self._gpm_last.values():
                self._optional(self.nvml.nvmlGpmSampleFree, sample)
            self._gpm_last.clear()
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass

    def count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def _handle(self, device: Device):
        if isinstance(device, str):
            return self.nvml.nvmlDeviceGetHandleByUUID(device)
        return self.nvml.nvmlDeviceGetHandleByIndex(device)

    def _optional(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # NotSupported on some boards / MIG
            return None

    def read(self, rank: int, devices: Sequence[Device], pids: Iterable[int] = (),
             host: str = "", now: float | None = None) -> list[GpuSample]:
        """One sample per answering device; ``pids`` (the rank's process tree) gives proc_mem."""
        now = time.time() if now is None else now
        pids = set(pids)
        out: list[GpuSample] = []
        for pos, dev in enumerate(devices):
            try:
                h = self._handle(dev)
                util = self.nvml.nvmlDeviceGetUtilizationRates(h).gpu
                mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
            except Exception as exc:
                self.errors[dev] = f"{type(exc).__name__}: {exc}"
                continue
            self.errors.pop(dev, None)
            power = self._optional(self.nvml.nvmlDeviceGetPowerUsage, h)
            temp = self._optional(self.nvml.nvmlDeviceGetTemperature, h,
                                  getattr(self.nvml, "NVML_TEMPERATURE_GPU", 0))
            out.append(GpuSample(
                time=now, rank=rank, device=dev if isinstance(dev, int) else pos,
                util=float(util), mem_used=float(mem.used), mem_total=float(mem.total),
                power_w=None if power is None else power / 1000.0,
                temp_c=None if temp is None else float(temp), source="nvml",
                host=host, proc_mem=self._proc_mem(h, pids) if pids else None,
                sm_util=self._sm_util(rank, dev, h)))
        return out

    def _sm_util(self, rank: int, dev: Device, handle) -> float | None:
        """Percent of SMs busy since this rank's last reading of this device (GPM: kept per
        rank, so two ranks that share a GPU each get a whole round), or None: no GPM here
        (asked once per device), or the first round."""
        if dev in self._gpm_off:
            return None
        nv = self.nvml
        key = (rank, dev)
        try:
            if key not in self._gpm_last and not nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                self._gpm_off.add(dev)  # older GPUs, MIG slices: no SM readings
                return None
        except Exception:  # an old driver or pynvml without GPM
            self._gpm_off.add(dev)
            return None
        sample = None
        try:
            sample = nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(handle, sample)
        except Exception as exc:
            if sample is not None:
                self._optional(nv.nvmlGpmSampleFree, sample)
            if _unsupported(nv, exc):
                self._gpm_off.add(dev)
            stale = self._gpm_last.pop(key, None)  # a failed round: the next starts afresh
            if stale is not None:
                self._optional(nv.nvmlGpmSampleFree, stale)
            return None
        last, self._gpm_last[key] = self._gpm_last.get(key), sample
        if last is None:
            return None
        try:
            return gpm_metrics(nv, last, sample, [nv.NVML_GPM_METRIC_SM_UTIL])[0]
        except Exception:  # one bad round: no reading this time
            return None
        finally:
            self._optional(nv.nvmlGpmSampleFree, last)

    def _proc_mem(self, handle, pids: set[int]) -> float | None:
        procs = self._optional(self.nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is None:
            return None
        used = [p.usedGpuMemory for p in procs if p.pid in pids]
        if not used:
            return 0.0
        if any(u is None for u in used):  # NVML_VALUE_NOT_AVAILABLE (e.g. no permission)
            return None
        return float(sum(used))

    def devices(self) -> list[dict]:
        """Whole-machine state, one dict per GPU (for the queue view)."""
        rows = []
        for i in range(self.count()):
            try:
                h = self.nvml.nvmlDeviceGetHandleByIndex(i)
                util = self.nvml.nvmlDeviceGetUtilizationRates(h).gpu
                mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
            except Exception as exc:
                rows.append({"index": i, "name": "", "uuid": "", "util": None, "mem_used": None,
                             "mem_total": None, "processes": None, "free": False,
                             "error": f"{type(exc).__name__}: {exc}"})
                continue
            procs = self._optional(self.nvml.nvmlDeviceGetComputeRunningProcesses, h) or []
            rows.append({
                "index": i, "name": _text(self._optional(self.nvml.nvmlDeviceGetName, h) or ""),
                "uuid": _text(self._optional(self.nvml.nvmlDeviceGetUUID, h) or ""),
                "util": float(util), "mem_used": float(mem.used), "mem_total": float(mem.total),
                "processes": len(procs), "free": len(procs) == 0, "error": ""})
        return rows


def hostname() -> str:
    return os.environ.get(contract.HOST) or socket.gethostname()
