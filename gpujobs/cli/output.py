"""Output for the CLI: tables (squeue/kubectl style), -o json|yaml|wide|name, wait progress."""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Iterable, TextIO

import yaml

from ..status import JobStatus, Plan, range_text, restarts_text, start_text, start_when


def age(seconds: float | None) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Plain aligned columns (pipes and greps stay easy)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def reason(st: JobStatus) -> str:
    if st.phase == "queued":
        return st.reason or st.position_text() or st.message
    return st.reason or (st.message if st.phase in ("failed", "cancelled", "preempted") else "")


def short(text: str, width: int = 40) -> str:
    """``text`` in at most ``width`` characters for a table cell: cut after its last whole clause
    ('; ', else ', ') that fits, with '…' (``-o wide`` shows it all)."""
    if len(text) <= width:
        return text
    head = text[:width - 1]
    for sep in ("; ", ", "):
        i = head.rfind(sep)
        if i >= width // 3:
            return head[:i] + "…"
    return head.rstrip() + "…"


def clock(t: float, now: float) -> str:
    """HH:MM:SS today, else 'Dec 02 14:05'."""
    lt, ln = time.localtime(t), time.localtime(now)
    if lt[:3] == ln[:3]:
        return time.strftime("%H:%M:%S", lt)
    return time.strftime("%b %d %H:%M", lt)


def start(st: JobStatus, now: float) -> str:
    """START (squeue --start): the forecast for queued jobs ('N/A' with nothing to go on),
    the actual start for the others."""
    if st.phase == "queued":
        if st.expected_start is None and not (st.not_before and st.not_before > now + 1):
            return "N/A"
        return start_when(st.expected_start, now, st.not_before)
    return clock(st.started_at, now) if st.started_at else "-"


def job_rows(statuses: Iterable[JobStatus], wide: bool, now: float | None = None) -> tuple[list[str], list[list[str]]]:
    now = now or time.time()
    headers = ["JOBID", "NAME", "USER", "QUEUE", "GPUS", "PHASE", "POS", "AGE", "START", "REASON",
               "PROGRESS"]
    if wide:
        headers += ["PRIORITY", "GANG", "BACKEND", "MESSAGE"]
    rows = []
    for st in statuses:
        row = [st.job_id, st.name or "-", st.user or "-", st.queue or "-", str(st.gpus), st.phase,
               str(st.queue_position) if st.queue_position and st.phase == "queued" else "-",
               age(now - st.submitted_at if st.submitted_at else None), start(st, now),
               short(reason(st) or "-") if not wide else (reason(st) or "-"),
               progress_cell(st, now)]
        if wide:
            row += [st.priority or "-", f"{st.gang_ready}/{st.gang_size}" if st.gang_size else "-",
                    st.backend, st.message or "-"]
        rows.append(row)
    return headers, rows


def progress_cell(st: JobStatus, now: float | None = None) -> str:
    """'40/100 3.2/s 19s' (step/total, rate, time left); 'STALLED' while flagged; '-' without."""
    p = st.progress
    if st.stalled_since is not None and not st.terminal:
        return "STALLED " + age((now or time.time()) - st.stalled_since)
    if p is None:
        return "-"
    step = f"{p.step:g}" + (f"/{p.total:g}" if p.total else "")
    rate = f" {p.rate:.2g}/s" if p.rate and not st.terminal else ""
    left = f" {age(p.expected_end - (now or time.time()))}" if p.expected_end and not st.terminal \
        and p.expected_end > (now or time.time()) else ""
    return step + rate + left


def sort_jobs(statuses: list[JobStatus]) -> list[JobStatus]:
    """Queued first (by queue, position), then the rest newest first."""
    queued = sorted((s for s in statuses if s.phase == "queued"),
                    key=lambda s: (s.queue, s.queue_position or 10**9, s.submitted_at or 0))
    rest = sorted((s for s in statuses if s.phase != "queued"), key=lambda s: -(s.submitted_at or 0))
    return queued + rest


def dump(data: Any, fmt: str, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        out.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        out.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False))


def status_lines(st: JobStatus) -> str:
    rows = [("Job", st.job_id), ("Name", st.name), ("Phase", st.phase), ("Backend", st.backend),
            ("Queue", st.queue), ("Priority", st.priority or "-"), ("User", st.user), ("GPUs", str(st.gpus))]
    if st.phase == "queued":
        rows.append(("Position", st.position_text() or "-"))
        rows.append(("Start", start_text(st.expected_start, not_before=st.not_before)
                     + (f" · {st.expected_start_basis}" if st.expected_start_basis else "")))
        if st.expected_start_range is not None:
            rows.append(("Range", range_text(st.expected_start_range, time.time())))
        if st.blocked_by:
            rows.append(("Blocked by", ", ".join(st.blocked_by)))
    if st.gang_size:
        rows.append(("Gang", f"{st.gang_ready}/{st.gang_size} ready"))
    if st.cpu_ranks:
        rows.append(("Devices", "ranks run on CPU (no GPU found)"))
    if st.submitted_at:
        rows.append(("Age", age(time.time() - st.submitted_at)))
    if st.elapsed is not None:
        rows.append(("Running for", age(st.elapsed)))
    if st.progress is not None:
        p = st.progress
        rows.append(("Progress", p.text() if not st.terminal else p.text().split(" · ")[0]))
        if p.metrics:
            rows.append(("Metrics", ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                               for k, v in p.metrics.items())))
        rows.append(("Reported", age(time.time() - p.updated) + " ago"))
    if st.stalled_since is not None and not st.terminal:
        rows.append(("Stalled", f"since {age(time.time() - st.stalled_since)}: "
                                f"{st.extra.get('stall', '')}"))
    if st.restarts:
        rows.append(("Restarts", restarts_text(st)))
    if st.exit_code is not None:
        rows.append(("Exit code", str(st.exit_code)))
    if st.reason:
        rows.append(("Reason", st.reason))
    if st.message:
        rows.append(("Message", st.message))
    out = "\n".join(f"{k + ':':<13}{v or '-'}" for k, v in rows)  # an unknown user: "-", not blank
    if st.events:
        out += "\nEvents:\n" + "\n".join(
            f"  {time.strftime('%H:%M:%S', time.localtime(e.time))}  {e.kind:<10} {e.message}".rstrip()
            for e in st.events)
    return out


def plan_lines(name: str, p: Plan) -> str:
    """`gpujobs plan` output: the summary, then the fields."""
    now = time.time()
    rows = [("Admit now", "yes" if p.admit_now else "no"),
            ("Position", str(p.position) if p.position else "-"),
            ("Preempts", ", ".join(p.preempts) or "-"),
            ("Start", "never" if p.never else
             start_text(p.expected_start, now, p.not_before)),
            ("Range", range_text(p.expected_start_range, now) if p.expected_start_range else "-"),
            ("Basis", p.basis or "-"), ("Reason", p.reason or "-")]
    if p.blocked_by:
        rows.append(("Blocked by", ", ".join(p.blocked_by)))
    return f"{name}: {p.summary()}\n" + "\n".join(f"  {k + ':':<12}{v}" for k, v in rows)


class Progress:
    """One live line on a terminal (rich); plain lines on each change otherwise."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._lock = threading.Lock()
        self._last = ""
        self._status = None
        if self.live:
            try:
                from rich.console import Console
                self._status = Console(file=self.stream).status("submitting …")
                self._status.start()
            except Exception:  # rich missing or no terminal after all: plain lines
                self.live = False

    def update(self, st: JobStatus) -> None:
        if self.live and (st.progress is not None or self._bar is not None):
            return self._update_bar(st)
        text = st.summary()
        with self._lock:
            if self._status is not None:
                extra = f" · {age(st.elapsed)}" if st.elapsed is not None and not st.terminal else ""
                self._status.update(text + extra)
            elif text != self._last:
                self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
                self.stream.flush()
            self._last = text

    _bar = None

    def _update_bar(self, st: JobStatus) -> None:
        """The job reports progress: a bar (tqdm if installed, else rich) replaces the spinner."""
        with self._lock:
            if self._status is not None:
                self._status.stop()
                self._status = None
            if self._bar is None:
                from ..views.terminal import ProgressDisplay
                self._bar = ProgressDisplay(self.stream, live=True)
        self._bar.update(st)

    def close(self) -> None:
        with self._lock:
            if self._status is not None:
                self._status.stop()  # the command prints the final summary itself
                self._status = None
            if self._bar is not None:
                self._bar.close()
                self._bar = None
