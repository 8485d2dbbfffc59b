"""Progress reports from inside a job: ``ctx.progress(step, total=None, **metrics)``.

In the rank, :class:`ProgressReporter` keeps the latest report and writes at most one
``GPUJOBS-PROGRESS {json}`` line per ``GPUJOBS_PROGRESS_INTERVAL`` seconds (default 1):
the hot path of a call that is not written is one clock read and a comparison. The line
goes where the rank's status already travels:

- local backend (``dir:`` result sink): appended to ``<result dir>/progress-<rank>.log``,
  which the agent reads each metrics round into ``JobStatus.progress``;
- Kubernetes (``log`` sink): printed on stdout, so it is in the pod log the client
  already reads for metrics and results (no extra permission).

The last report of a rank is always written when the function returns (``flush``), so
the final status holds the final step.

Line format (one JSON object; keys kept short)::

    GPUJOBS-PROGRESS {"v":1,"r":0,"t":1764431100.5,"s":40,"n":100,"m":{"loss":0.31}}

``r`` rank, ``t`` epoch seconds of the report, ``s`` step, ``n`` total (absent when
unknown), ``m`` the keyword metrics (numbers, or their ``repr`` cut to 200 characters).
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from .status import Progress
from . import contract
from .filemodes import open_private

PROGRESS_MARKER = "GPUJOBS-PROGRESS"
FORMAT_VERSION = 1
DEFAULT_INTERVAL_S = 1.0
RATE_WINDOW = 20  # reports the rate is measured over


def _jsonable(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return v if v == v else None  # NaN -> null
    if isinstance(v, str):
        return v[:200]
    try:  # numpy / torch scalars (item(): no autograd warning, no sync beyond the value)
        return float(v.item() if hasattr(v, "item") else v)
    except (TypeError, ValueError):
        return repr(v)[:200]


def format_progress_line(rank: int, step: float, total: float | None, metrics: dict,
                         now: float) -> str:
    doc: dict[str, Any] = {"v": FORMAT_VERSION, "r": rank, "t": round(now, 3), "s": _jsonable(step)}
    if total is not None:
        doc["n"] = _jsonable(total)
    if metrics:
        doc["m"] = {str(k): _jsonable(v) for k, v in metrics.items()}
    return f"{PROGRESS_MARKER} {json.dumps(doc, separators=(',', ':'))}"


def parse_progress_line(line: str) -> dict | None:
    """The report of a progress line (the marker may follow a ``[rank N]`` prefix), else None."""
    i = line.find(PROGRESS_MARKER + " ")
    if i < 0:
        return None
    try:
        doc = json.loads(line[i + len(PROGRESS_MARKER) + 1:].strip())
        return {"rank": int(doc.get("r", 0)), "time": float(doc["t"]), "step": float(doc["s"]),
                "total": None if doc.get("n") is None else float(doc["n"]),
                "metrics": dict(doc.get("m") or {})}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def interval_s() -> float:
    try:
        return max(0.0, float(os.environ.get(contract.PROGRESS_INTERVAL) or DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S


class ProgressReporter:
    """The in-rank side of ``ctx.progress``: throttled writes of the latest report."""

    def __init__(self, rank: int, path: Path | str | None = None, stream: Any = None,
                 interval: float | None = None):
        self.rank = rank
        self.path = Path(path) if path is not None else None
        self.stream = stream
        self.interval = interval_s() if interval is None else interval
        self._next = 0.0  # monotonic time of the next allowed write
        self._pending: tuple | None = None  # the latest report not written yet
        self._lock = threading.Lock()
        self.writes = 0

    def report(self, step: float, total: float | None = None, metrics: dict | None = None) -> None:
        now = time.monotonic()
        if now < self._next:  # the hot path: remember, do not write
            self._pending = (step, total, metrics)
            return
        self._next = now + self.interval
        self._pending = None
        self._write(step, total, metrics or {}, time.time())

    def flush(self) -> None:
        """Write the latest report if it was throttled away (at the end of the function; it
        is stamped with the flush time, at most one interval after the call)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            step, total, metrics = pending
            self._write(step, total, metrics or {}, time.time())

    def _write(self, step: float, total: float | None, metrics: dict, t: float) -> None:
        line = format_progress_line(self.rank, step, total, metrics, t) + "\n"
        with self._lock:
            try:
                if self.path is not None:
                    with open_private(self.path, "a") as fh:
                        fh.write(line)
                else:
                    out = self.stream or sys.stdout
                    out.write(line)
                    out.flush()
                self.writes += 1
            except (OSError, ValueError):  # progress never fails a training step
                pass


def for_environment(rank: int) -> ProgressReporter:
    """The reporter of this rank: a file in the local result dir, else stdout (pod log)."""
    directory = contract.result_sink_dir(contract.RankEnv.from_env().result_sink)
    if directory is not None:
        return ProgressReporter(rank, path=directory / contract.PROGRESS.name(rank))
    return ProgressReporter(rank)


# ------------------------------------------------------------------ reading side
def summarize(reports: Iterable[dict], since: float | None = None) -> Progress | None:
    """The latest report as a :class:`~gpujobs.status.Progress`, with rate and expected end.

    The rate is measured over the last ``RATE_WINDOW`` reports of the same rank as the
    latest (steps per second of report time), made at or after ``since`` (the current run's
    start: after a preemption the rate must not span the time spent queued); it restarts
    when the step goes backwards (a restarted job resuming from a checkpoint)."""
    reports = [r for r in reports if r is not None]
    if not reports:
        return None
    last = max(enumerate(reports), key=lambda ir: (ir[1]["time"], ir[0]))[1]  # ties: the later line
    same = sorted((r for r in reports if r["rank"] == last["rank"]), key=lambda r: r["time"])
    window: list[dict] = []
    for r in same:
        if since is not None and r["time"] < since:
            continue
        if window and r["step"] < window[-1]["step"]:
            window = []
        window.append(r)
    window = window[-RATE_WINDOW:]
    rate = None
    if len(window) >= 2 and window[-1]["time"] > window[0]["time"]:
        rate = (window[-1]["step"] - window[0]["step"]) / (window[-1]["time"] - window[0]["time"])
        rate = rate if rate > 0 else None
    expected = None
    if rate and last["total"] is not None:
        expected = last["time"] + max(0.0, last["total"] - last["step"]) / rate
    return Progress(step=last["step"], total=last["total"], rate=rate, expected_end=expected,
                    metrics=dict(last["metrics"]), updated=last["time"], rank=last["rank"])


# ------------------------------------------------------------------- stalls
DEFAULT_STALL_FLOOR_S = 60.0
DEFAULT_STALL_FACTOR = 5.0
BUSY_PCT = 5.0  # CPU (% of one core) or GPU use above this is a sign of life


def _setting(name: str, env: dict[str, str], default: float) -> float:
    raw = env.get(name, os.environ.get(name, ""))
    try:
        return float(raw) if str(raw).strip() else default
    except ValueError:
        return default


def stall_settings(env: dict[str, str]) -> tuple[float, float]:
    """(floor seconds, factor): the job's env first, then this process's, then the defaults
    (``GPUJOBS_STALL_FLOOR_S`` 60, ``GPUJOBS_STALL_FACTOR`` 5; a floor of 0 turns it off)."""
    return (_setting(contract.STALL_FLOOR_S, env, DEFAULT_STALL_FLOOR_S),
            _setting(contract.STALL_FACTOR, env, DEFAULT_STALL_FACTOR))


_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


def _library_dirs() -> tuple[str, ...]:
    """Folders of code that is not the user's: the standard library, installed packages
    (torch, …) and gpujobs itself."""
    import sysconfig
    dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.path.abspath(__file__)))  # gpujobs (not imported: this ships to pods)
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def innermost_frame(dump: str) -> str:
    """Where a rank sits, from its stack dump (faulthandler's format; both backends): the
    innermost frame of its main thread in the user's own code (not the standard library, an
    installed package such as torch, or gpujobs), else the innermost outside threading and the
    runner, as ``fn (file:line)``; '' when unknown."""
    blocks = [b for b in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump.strip()) if b]
    if not blocks:
        return ""
    frames = [m for line in blocks[-1].splitlines() if (m := _FRAME.match(line))]  # main thread last
    libs = _library_dirs()
    own = [m for m in frames if not os.path.realpath(m.group("file")).startswith(libs)
           and "/site-packages/" not in m.group("file") and "/dist-packages/" not in m.group("file")]
    rest = [m for m in frames
            if not m.group("file").endswith(("threading.py", "gpujobs/runner/__init__.py"))]
    for m in own[:1] or rest[:1]:
        return f"{m.group('fn')} ({os.path.basename(m.group('file'))}:{m.group('line')})"
    return ""


def stall_message(stalled: dict[int, float], limit: float, where: dict[int, str]) -> str:
    """The stall flag's text on both backends (the local agent's event and status, the
    Kubernetes status().message): the quiet ranks (rank -> their last sign of life, epoch s),
    the threshold and the function each sits in (``where``: rank -> frame). The same text for
    as long as the same ranks sit in the same places (no running count)."""
    ranks = sorted(stalled)
    last = max(stalled.values())  # the stalled ranks' last sign of life
    head = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    sits = "; ".join(f"rank {r} in {where[r]}" for r in ranks if where.get(r))
    return (f"stalled? {head} quiet since {time.strftime('%H:%M:%S', time.localtime(last))}"
            f" (no progress, no output, CPU/GPU idle for over {limit:.3g} s)"
            + (f": {sits}" if sits else "") + "; see job.stacks() / gpujobs stack")


def usual_interval(reports: list[dict]) -> float | None:
    """The median seconds between a rank's successive reports (the stall detector's unit)."""
    times = sorted(r["time"] for r in reports)
    gaps = sorted(b - a for a, b in zip(times, times[1:]) if b > a)
    return gaps[len(gaps) // 2] if gaps else None


class ProgressTail:
    """Reads ``progress-*.log`` files of a local job incrementally (the agent, the client)."""

    def __init__(self, result_dir: Path | str, keep: int = 10_000, since: float | None = None):
        self.dir = Path(result_dir)
        self.keep = keep
        self.since = since  # the current run's start: rates count only its reports
        self._offsets: dict[str, int] = {}
        self.reports: list[dict] = []

    def read(self) -> list[dict]:
        """New reports since the last call (also kept in ``reports``, bounded)."""
        new: list[dict] = []
        try:
            paths = sorted(self.dir.glob(contract.PROGRESS.glob))
        except OSError:
            return new
        for path in paths:
            off = self._offsets.get(path.name, 0)
            try:
                with open(path, "r", errors="replace") as fh:
                    fh.seek(off)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind("\n") + 1  # a line still being written waits for the next read
            self._offsets[path.name] = off + len(data[:end].encode())
            for line in data[:end].splitlines():
                rep = parse_progress_line(line)
                if rep is not None:
                    new.append(rep)
        if new:
            self.reports.extend(new)
            if len(self.reports) > self.keep:
                del self.reports[:len(self.reports) - self.keep]
        return new

    def latest(self) -> Progress | None:
        return summarize(self.reports[-RATE_WINDOW * 8:], self.since)


def progress_frame(reports: Iterable[dict]):
    """The progress history as a pandas DataFrame: time, rank, step, total, one column per metric."""
    import pandas as pd
    rows = []
    for r in sorted(reports, key=lambda r: (r["time"], r["rank"])):
        row = {"time": pd.to_datetime(r["time"], unit="s"), "rank": r["rank"], "step": r["step"],
               "total": r["total"]}
        row.update(r["metrics"])
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else ["time", "rank", "step", "total"])
