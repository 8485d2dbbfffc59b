"""A fake ``pynvml``: a real module object with NVML's function names, injected via sys.modules.

Each GPU's utilisation/memory/power/temperature comes from a function of how
many times it was read, so values change between rounds. A GPU can be made to
vanish after some reads (NVMLError_GpuIsLost), and nvmlInit can be made to
fail (NVMLError_LibraryNotFound), as on a machine without a driver. A GPU with ``sm_util``
set has GPM (Hopper and later): its samples, taken by nvmlGpmSampleGet, read that SM
utilisation between two of them; the module counts the GPM samples still allocated.
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field


class NVMLError(Exception):
    def __init__(self, value: int = 999):
        self.value = value
        super().__init__(f"NVML error {value}")


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self):
        super().__init__(12)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self):
        super().__init__(15)


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(3)


class NVMLError_Uninitialized(NVMLError):
    def __init__(self):
        super().__init__(1)


@dataclass
class FakeGpu:
    index: int
    uuid: str
    total: int = 80 * 2**30
    lost_after: int | None = None  # reads before the GPU disappears
    power_supported: bool = True
    procs: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes
    reads: int = 0
    sm_util: float | None = None  # None: no GPM on this GPU
    gpm_fails: int = 0  # the next GPM samples that fail (a passing error, not NotSupported)
    util: int | None = None  # fixed utilisation (None: varies with the reads)


def make_fake_nvml(n_gpus: int = 3, init_error: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.gpus = [FakeGpu(i, f"GPU-{i:08d}-fake") for i in range(n_gpus)]
    m.initialised = 0
    m.init_error = init_error
    m.NVMLError = NVMLError
    m.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    m.NVMLError_GpuIsLost = NVMLError_GpuIsLost
    m.NVMLError_NotSupported = NVMLError_NotSupported
    m.NVML_TEMPERATURE_GPU = 0

    def check():
        if m.initialised <= 0:
            raise NVMLError_Uninitialized()

    def nvmlInit():
        if m.init_error:
            raise NVMLError_LibraryNotFound()
        m.initialised += 1

    def nvmlShutdown():
        check()
        m.initialised -= 1

    def nvmlDeviceGetCount():
        check()
        return sum(1 for g in m.gpus if not _lost(g))

    def _lost(g):
        return g.lost_after is not None and g.reads >= g.lost_after

    def _gpu(h):
        check()
        if _lost(h):
            raise NVMLError_GpuIsLost()
        return h

    def nvmlDeviceGetHandleByIndex(i):
        check()
        if not 0 <= i < len(m.gpus):
            raise NVMLError(2)  # INVALID_ARGUMENT
        return _gpu(m.gpus[i])

    def nvmlDeviceGetHandleByUUID(uuid):
        check()
        for g in m.gpus:
            if g.uuid == uuid:
                return _gpu(g)
        raise NVMLError(6)  # NOT_FOUND

    def nvmlDeviceGetUtilizationRates(h):
        g = _gpu(h)
        g.reads += 1
        return types.SimpleNamespace(gpu=(10 * g.index + 7 * g.reads) % 101 if g.util is None else g.util,
                                     memory=5)

    def nvmlDeviceGetMemoryInfo(h):
        g = _gpu(h)
        used = (g.index + 1) * 2**30 + g.reads * 2**20
        return types.SimpleNamespace(total=g.total, used=used, free=g.total - used)

    def nvmlDeviceGetPowerUsage(h):
        g = _gpu(h)
        if not g.power_supported:
            raise NVMLError_NotSupported()
        return 300_000 + 1000 * g.reads  # milliwatts

    def nvmlDeviceGetTemperature(h, sensor):
        assert sensor == m.NVML_TEMPERATURE_GPU
        return 40 + _gpu(h).index

    def nvmlDeviceGetComputeRunningProcesses(h):
        g = _gpu(h)
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in g.procs.items()]

    def nvmlDeviceGetName(h):
        return b"NVIDIA H100 80GB HBM3 (fake)"

    def nvmlDeviceGetUUID(h):
        return _gpu(h).uuid

    m.NVML_SUCCESS = 0
    m.NVML_GPM_METRICS_GET_VERSION = 1
    m.NVML_GPM_METRIC_SM_UTIL = 2
    m.gpm_allocated = 0
    m.gpm_taken = 0  # GPM samples taken so far (each sample's ``seq``)
    m.gpm_pairs: list[tuple[int, int]] = []  # (sample1.seq, sample2.seq) of each metrics read

    def nvmlGpmQueryDeviceSupport(h):
        return types.SimpleNamespace(isSupportedDevice=int(_gpu(h).sm_util is not None))

    def nvmlGpmSampleAlloc():
        check()
        m.gpm_allocated += 1
        return types.SimpleNamespace(gpu=None)

    def nvmlGpmSampleGet(h, sample):
        g = _gpu(h)
        if g.sm_util is None:
            raise NVMLError_NotSupported()
        if g.gpm_fails:
            g.gpm_fails -= 1
            raise NVMLError(999)  # NVML_ERROR_UNKNOWN
        sample.gpu = g
        m.gpm_taken += 1
        sample.seq = m.gpm_taken
        return sample

    def nvmlGpmSampleFree(sample):
        m.gpm_allocated -= 1

    class c_nvmlGpmMetricsGet_t:
        def __init__(self):
            self.metrics = [types.SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)]

    def nvmlGpmMetricsGet(get):
        assert get.version == 1 and get.numMetrics == 1 and get.metrics[0].metricId == 2
        assert get.sample1.gpu is get.sample2.gpu and get.sample1 is not get.sample2
        get.metrics[0].value = get.sample2.gpu.sm_util
        m.gpm_pairs.append((get.sample1.seq, get.sample2.seq))
        return get

    m.c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t
    for fn in (nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc, nvmlGpmSampleGet, nvmlGpmSampleFree,
               nvmlGpmMetricsGet):
        setattr(m, fn.__name__, fn)
    for fn in (nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
               nvmlDeviceGetHandleByUUID, nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetPowerUsage, nvmlDeviceGetTemperature,
               nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetName, nvmlDeviceGetUUID):
        setattr(m, fn.__name__, fn)
    return m
