"""Static HTML for a JobStatus: what GitHub, nbviewer, nbconvert and widget-less frontends show.

Pure functions of the status model (plus optional metric history, log tail and a
result summary); the live widget reuses the same pieces.
"""
from __future__ import annotations

import html
import time
from typing import Iterable, Mapping, Sequence

from ..status import GpuSample, JobStatus, restarts_text
from .text import device_label, elapsed_text, fmt_bytes, fmt_duration

PHASE_COLORS = {
    "queued": "#8a6d00", "admitted": "#1f6feb", "starting": "#1f6feb", "running": "#1a7f37",
    "succeeded": "#116329", "failed": "#cf222e", "cancelled": "#6e7781", "preempted": "#bc4c00",
}

#: (rank, device, source) -> [(util %, memory fraction)] oldest first
History = Mapping[tuple[int, int, str], Sequence[tuple[float | None, float | None]]]


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def phase_badge(phase: str) -> str:
    color = PHASE_COLORS.get(phase, "#6e7781")
    return (f'<span class="gpujobs-phase gpujobs-phase-{esc(phase)}" style="background:{color};'
            f'color:white;border-radius:4px;padding:1px 7px;font-weight:600">{esc(phase)}</span>')


def sparkline_svg(values: Iterable[float | None], width: int = 120, height: int = 22,
                  color: str = "#1a7f37", top: float = 100.0) -> str:
    """An inline ``<svg><polyline>`` of ``values`` scaled to 0..``top`` (None points skipped)."""
    pts = [v for v in values if v is not None]
    if not pts:
        return f'<svg width="{width}" height="{height}"></svg>'
    pts = pts[-120:]
    if len(pts) == 1:
        pts = pts * 2  # one reading: a flat segment, not an invisible point
    step = width / max(1, len(pts) - 1)
    coords = " ".join(f"{i * step:.1f},{height - 1 - min(max(v, 0.0), top) / top * (height - 2):.1f}"
                      for i, v in enumerate(pts))
    return (f'<svg class="gpujobs-spark" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><polyline fill="none" stroke="{color}" '
            f'stroke-width="1.5" points="{coords}"/></svg>')


def gang_html(status: JobStatus) -> str:
    if not status.gang_size:
        return ""
    pct = 100 * status.gang_ready / status.gang_size
    return (f'<span class="gpujobs-gang">gang {status.gang_ready}/{status.gang_size}</span> '
            f'<span style="display:inline-block;width:80px;height:8px;background:#eee;'
            f'vertical-align:middle"><span style="display:block;width:{pct:.0f}%;height:8px;'
            f'background:#1a7f37"></span></span>')


CPU_CHIP_TITLE = ("no GPU on this machine: each requested GPU runs as a CPU rank "
                  "(GPUJOBS_LOCAL_GPUS sets how many run at once)")


def header_html(status: JobStatus, gang: bool = True, phase: str | None = None) -> str:
    """Name, phase badge, queue position, gang, timing and the CPU-ranks chip on one line
    (``gang=False``: the caller shows the gang itself; ``phase``: the badge's text instead of
    the status's, e.g. "cancelling…")."""
    bits = [f"<b>{esc(status.name or status.job_id)}</b>", phase_badge(phase or status.phase)]
    pos = status.position_text()
    if pos:
        bits.append(f'<span class="gpujobs-position">{esc(pos)}</span>')
    if status.phase == "queued" and (status.expected_start is not None or status.expected_start_basis):
        from ..status import start_text
        bits.append(f'<span class="gpujobs-start" title="{esc(status.expected_start_basis)}">'
                    f'{esc(start_text(status.expected_start, not_before=status.not_before))}</span>')
    gang_bits = gang_html(status) if gang else ""
    if gang_bits:
        bits.append(gang_bits)
    if status.elapsed is not None:
        bits.append(f'<span class="gpujobs-elapsed">{esc(elapsed_text(status))}</span>')
    elif status.waited is not None and not status.terminal:
        bits.append(f'<span class="gpujobs-elapsed">waiting {fmt_duration(status.waited)}</span>')
    if status.restarts:
        bits.append(f'<span class="gpujobs-restarts">{esc(restarts_text(status))}</span>')
    if status.cpu_ranks and status.gpus:  # an info chip, not an error (0-GPU jobs asked for none)
        bits.append(f'<span class="gpujobs-cpu gpujobs-info" title="{esc(CPU_CHIP_TITLE)}" '
                    'style="background:#ddf4ff;color:#0969da;border:1px solid #54aeff;'
                    'border-radius:10px;padding:0 6px;font-size:90%">ranks on CPU (i)</span>')
    meta = f"{status.job_id} · {status.backend}" + (f" · queue {status.queue}" if status.queue else "")
    meta += f" · priority {status.priority or 'default'}"
    line2 = esc(meta)
    if status.message:
        line2 += f" · {esc(status.message)}"
    if status.phase == "queued" and status.reason:
        line2 += f'<div class="gpujobs-reason">{esc(status.reason)}</div>'

    return (f'<div class="gpujobs-header">{" ".join(bits)}</div>'
            f'<div class="gpujobs-meta" style="color:#57606a;font-size:90%">{line2}</div>')


def progress_html(status: JobStatus, now: float | None = None) -> str:
    """The ``ctx.progress`` bar: step/total, percent, rate, time left, metrics; a stall flag."""
    p = status.progress
    out = ""
    if p is not None:
        frac = p.fraction
        now = time.time() if now is None else now
        bits = [f"step {p.step:g}" + (f" / {p.total:g}" if p.total else "")]
        if frac is not None:
            bits.append(f"{100 * frac:.0f}%")
        if p.rate and not status.terminal:
            bits.append(f"{p.rate:.3g} steps/s" if p.rate >= 0.1 else f"{60 * p.rate:.3g} steps/min")
        if p.expected_end is not None and not status.terminal:
            bits.append(f"{fmt_duration(max(0.0, p.expected_end - now))} left")
        if p.metrics:
            bits.append(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in list(p.metrics.items())[:6]))
        bar = ""
        if frac is not None:
            color = "#1a7f37" if status.phase != "failed" else "#cf222e"
            bar = (f'<span class="gpujobs-progress-bar" style="display:inline-block;width:160px;'
                   f'height:10px;background:#eee;vertical-align:middle;margin-right:6px">'
                   f'<span style="display:block;width:{100 * frac:.1f}%;height:10px;'
                   f'background:{color}"></span></span>')
        out = (f'<div class="gpujobs-progress" data-step="{p.step:g}">{bar}'
               f'{esc(" · ".join(bits))}</div>')
    if status.stalled_since is not None and not status.terminal:
        out += (f'<div class="gpujobs-stalled" style="color:#bc4c00">'
                f'{esc(status.extra.get("stall") or "stalled")}</div>')
    return out


def metrics_html(status: JobStatus, history: History | None = None) -> str:
    """A table row per (rank, device): busy % and memory sparklines, latest values."""
    if not status.metrics:
        if status.phase == "running":  # the first samples come a few seconds in
            return '<div class="gpujobs-metrics gpujobs-sampling" style="color:#57606a">sampling…</div>'
        return ""
    rows = []
    for s in sorted(status.metrics, key=lambda m: (m.rank, m.device)):
        hist = list((history or {}).get((s.rank, s.device, s.source), ()))
        if not hist:
            hist = [(s.util, _mem_frac(s))]
        busy = "CPU busy %" if s.is_cpu else "GPU busy %"
        util = "sampling…" if s.util is None else f"{s.util:.0f}%"
        if s.sm_util is not None and s.util is not None:  # GPM: how much of the GPU works
            util += f" <span title='SMs busy (NVML GPM): few while the GPU is 100 % busy means it waits'" \
                    f" style='color:#57606a'>SMs {s.sm_util:.0f}%</span>"
        mem = fmt_bytes(s.mem_used) + (f" / {fmt_bytes(s.mem_total)}" if s.mem_total else "")
        rows.append(
            f"<tr><td>{esc(device_label(s))}</td><td title='{busy}'>{sparkline_svg(h[0] for h in hist)}"
            f" {util}</td><td>{sparkline_svg((None if h[1] is None else 100 * h[1] for h in hist), color='#1f6feb')}"
            f" {esc(mem)}</td></tr>")
    cpu = any(s.is_cpu for s in status.metrics)
    note = ('<div style="color:#57606a;font-size:85%">CPU and memory of the rank processes '
            '(psutil): no GPU on this machine</div>') if cpu else ""
    return (f'<table class="gpujobs-metrics" style="font-size:90%"><tr><th>device</th>'
            f'<th>busy</th><th>memory</th></tr>{"".join(rows)}</table>{note}')


def _mem_frac(s: GpuSample) -> float | None:
    if s.mem_used is None or not s.mem_total:
        return None
    return s.mem_used / s.mem_total


def timeline_html(status: JobStatus, last: int = 8) -> str:
    if not status.events:
        return ""
    t0 = status.submitted_at or status.events[0].time
    items = []
    for ev in status.events[-last:]:
        stamp = time.strftime("%H:%M:%S", time.localtime(ev.time))
        msg = f": {esc(ev.message)}" if ev.message else ""
        items.append(f"<li>{stamp} (+{ev.time - t0:.1f}s) <b>{esc(ev.kind)}</b>{msg}</li>")
    return f'<ul class="gpujobs-timeline" style="margin:2px 0;font-size:90%">{"".join(items)}</ul>'


def logs_html(logs_tail: str, lines: int = 12) -> str:
    if not logs_tail:
        return ""
    tail = "\n".join(logs_tail.rstrip("\n").splitlines()[-lines:])
    # column-reverse keeps the box scrolled to its end: the newest line is always in view. The
    # <pre> must neither shrink nor scroll itself (JupyterLab styles pre with overflow:auto,
    # which made it a flex item that shrinks to the box and shows its first lines)
    return (f'<div class="gpujobs-logs" style="max-height:14em;overflow:auto;font-size:85%;'
            f'background:#f6f8fa;margin:2px 0;display:flex;flex-direction:column-reverse">'
            f'<pre style="margin:0;flex:none;overflow:visible">{esc(tail)}</pre></div>')


def last_line_html(logs_tail: str) -> str:
    """The newest log line, for the compact widget."""
    lines = [ln for ln in logs_tail.rstrip("\n").splitlines() if ln.strip()]
    if not lines:
        return ""
    return (f'<div class="gpujobs-last-line" style="font-family:monospace;font-size:85%;'
            f'color:#57606a;white-space:nowrap;overflow:hidden;text-overflow:ellipsis">'
            f'{esc(lines[-1])}</div>')


def result_html(result_text: str) -> str:
    if not result_text:
        return ""
    return f'<div class="gpujobs-result">result: <code>{esc(result_text)}</code></div>'


def render_job_html(status: JobStatus, history: History | None = None, logs_tail: str = "",
                    result_text: str = "") -> str:
    """The whole job card as one static HTML block."""
    parts = [header_html(status), progress_html(status), metrics_html(status, history),
             result_html(result_text)]
    tl = timeline_html(status)
    if tl:
        parts.append(f"<details><summary>timeline</summary>{tl}</details>")
    lg = logs_html(logs_tail)
    if lg:
        parts.append(f"<details open><summary>logs</summary>{lg}</details>")
    body = "".join(p for p in parts if p)
    return f'<div class="gpujobs-job" data-phase="{esc(status.phase)}">{body}</div>'
