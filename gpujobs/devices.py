"""What accelerators this machine has (NVML), and the one CPU-rank notice."""
from __future__ import annotations

import os
import sys
import threading

_notice_lock = threading.Lock()
_notice_shown = False
CPU_NOTICE = ("gpujobs: no GPU found on this machine; each requested GPU runs as a CPU rank "
              "(torch.distributed with gloo). Set GPUJOBS_LOCAL_GPUS to override.")


def nvml_gpu_count() -> int:
    """GPUs NVML can see (0 when NVML or its library is missing)."""
    from .metrics.nvml import NvmlReader

    reader = NvmlReader.open()
    if reader is None:
        return 0
    try:
        return reader.count()
    except Exception:  # noqa: BLE001 - NVML answered init but not the count
        return 0
    finally:
        reader.close()


def local_gpu_slots(found: int | None = None) -> tuple[int, bool]:
    """(slots, real_gpus). ``GPUJOBS_LOCAL_GPUS`` overrides; without GPUs slots are CPU ranks.

    ``found``: the GPU count when the caller already asked NVML.
    """
    found = nvml_gpu_count() if found is None else found
    override = os.environ.get("GPUJOBS_LOCAL_GPUS")
    if override:
        return int(override), found > 0
    if found:
        return found, True
    return max(os.cpu_count() or 1, 4), False


def cpu_notice() -> None:
    """Print the CPU-rank notice once per process."""
    global _notice_shown
    with _notice_lock:
        if not _notice_shown:
            print(CPU_NOTICE, file=sys.stderr)
            _notice_shown = True
