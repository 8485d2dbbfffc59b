"""What accelerators this machine has (NVML), and the one CPU-rank notice."""
from __future__ import annotations

import os
import sys
import threading

from .config import LocalSettings, config_path, settings
from .rank import contract

_notice_lock = threading.Lock()
_notice_shown = False
CPU_NOTICE = ("gpujobs: no GPU found on this machine; each requested GPU runs as a CPU rank "
              "({how}). {slots}")


def cpu_notice_text(framework: str = "ddp") -> str:
    """The notice for a job whose GPUs run as CPU ranks: how they run, and how to change how
    many run at once (naming the variable's current value when it is already set)."""
    how = {"mpi": "MPI on CPU", "ray": "Ray workers on CPU"}.get(framework,
                                                                 "torch.distributed with gloo")
    override = os.environ.get(contract.LOCAL_GPUS)
    if override:
        slots = (f"GPUJOBS_LOCAL_GPUS={override} sets how many run at once; it cannot make a "
                 "GPU appear.")
    else:
        slots = (f"To change how many run at once: export GPUJOBS_LOCAL_GPUS=N, or put "
                 f"gpus = N under [local] in {config_path()}.")
    return CPU_NOTICE.format(how=how, slots=slots)


def beyond_machine(need: int, slots: int, real: bool, queue: str, slots_set_queues: bool) -> str | None:
    """Why a job asking for ``need`` GPU slots can never start on this machine's local agent,
    which has ``slots`` (``real``: GPUs, else CPU ranks), with its fix; None when it may fit.
    ``slots_set_queues``: the queues' quotas are the slot count (no ``[[local.queues]]``), so
    more slots (``GPUJOBS_LOCAL_GPUS``, CPU ranks only) let it start."""
    if need <= slots:
        return None
    have = f"{slots} GPUs" if real else f"{slots} GPU slots, each a CPU rank (no GPU here)"
    fix = f"ask for fewer GPUs, at most {slots}"
    if not real and slots_set_queues:
        fix += (f"; or run {need} CPU ranks at once: gpujobs agent stop, then "
                f"export GPUJOBS_LOCAL_GPUS={need} and submit again")
    elif not real:
        fix += (f"; or raise gpus under [local] in {config_path()} to {need} or more, and the "
                "queue's gpus with it")
    return (f"this job can never start in queue {queue!r} on this machine: it asks for {need} gpu "
            f"and the local agent has {have}, whatever runs (fix: {fix})")


def nvml_gpu_count() -> int:
    """GPUs NVML can see (0 when NVML or its library is missing)."""
    from .rank.nvml import NvmlReader

    reader = NvmlReader.open()
    if reader is None:
        return 0
    try:
        return reader.count()
    except Exception:  # noqa: BLE001 - NVML answered init but not the count
        return 0
    finally:
        reader.close()


def local_gpu_slots(found: int | None = None, local: LocalSettings | None = None) -> tuple[int, bool]:
    """(slots, real_gpus): ``GPUJOBS_LOCAL_GPUS``, else ``[local] gpus`` of the config file,
    else the GPUs NVML finds; without GPUs slots are CPU ranks.

    ``found``: the GPU count when the caller already asked NVML; ``local``: the settings when the
    caller already has them (default: :func:`gpujobs.config.settings`).
    """
    found = nvml_gpu_count() if found is None else found
    configured = (local or settings().local).gpus
    if configured is not None:
        return configured, found > 0
    if found:
        return found, True
    return max(os.cpu_count() or 1, 4), False


def local_cpus(local: LocalSettings | None = None) -> float:
    """The CPU quota of the local queues, charged by ranks that ask for 0 GPUs:
    ``GPUJOBS_LOCAL_CPUS``, else ``[local] cpus`` of the config file, else the machine's CPU
    count with the same floor of 4 as CPU-rank GPU slots (so the 4-rank examples run on a 2-core
    laptop, ranks sharing cores)."""
    configured = (local or settings().local).cpus
    return float(max(os.cpu_count() or 1, 4)) if configured is None else configured


def _in_kernel() -> bool:
    """Inside a Jupyter kernel, where stderr is drawn as a red error box."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # noqa: BLE001
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def cpu_notice(framework: str = "ddp") -> None:
    """Print the CPU-rank notice once per process (information: on stdout in a notebook, where
    the job's widget also shows it as an info chip; on stderr elsewhere)."""
    global _notice_shown
    with _notice_lock:
        if not _notice_shown:
            print(cpu_notice_text(framework), file=sys.stdout if _in_kernel() else sys.stderr)
            _notice_shown = True
