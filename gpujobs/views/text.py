"""Plain-text rendering of a JobStatus (terminals, ``text/plain``, frontends without widgets)."""
from __future__ import annotations

import time

from ..status import GpuSample, JobStatus


def fmt_duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h07m``; empty for None."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def device_label(sample: GpuSample) -> str:
    """``rank 0 GPU 1`` or ``rank 0 CPU`` (psutil samples are CPU, never called GPU)."""
    kind = "CPU" if sample.is_cpu else f"GPU {sample.device}"
    return f"rank {sample.rank} {kind}"


def metric_line(sample: GpuSample) -> str:
    util = "?" if sample.util is None else f"{sample.util:.0f}%"
    if sample.sm_util is not None and sample.util is not None:  # GPM: how much of the GPU works
        util += f" (SMs {sample.sm_util:.0f}%)"
    busy = "CPU busy" if sample.is_cpu else "GPU busy"
    mem = ""
    if sample.mem_used is not None:
        mem = f", mem {fmt_bytes(sample.mem_used)}"
        if sample.mem_total:
            mem += f" / {fmt_bytes(sample.mem_total)}"
    return f"{device_label(sample)}: {busy} {util}{mem}"


def elapsed_text(status: JobStatus) -> str:
    """'for 20s' while running (after the phase badge 'running'), 'ran 20s' once ended."""
    if status.elapsed is None:
        return ""
    return f"{'ran' if status.terminal else 'for'} {fmt_duration(status.elapsed)}"


def render_job_text(status: JobStatus, logs_tail: str = "", result_text: str = "") -> str:
    """A few lines: summary, timing, per-device metrics, last events, result, log tail."""
    lines = [f"Job {status.job_id} [{status.backend}] {status.summary()}"]
    timing = []
    if status.waited is not None and status.started_at is None:
        timing.append(f"waiting {fmt_duration(status.waited)}")
    if status.elapsed is not None:
        timing.append(elapsed_text(status))
    if status.reason:
        timing.append(f"reason: {status.reason}")
    if timing:
        lines.append("  " + ", ".join(timing))
    for s in status.metrics:
        lines.append("  " + metric_line(s))
    for ev in status.events[-5:]:
        stamp = time.strftime("%H:%M:%S", time.localtime(ev.time))
        lines.append(f"  {stamp} {ev.kind}" + (f": {ev.message}" if ev.message else ""))
    if result_text:
        lines.append(f"  result: {result_text}")
    if logs_tail:
        lines.append("  logs:")
        lines.extend("    " + ln for ln in logs_tail.rstrip("\n").splitlines()[-10:])
    return "\n".join(lines)
