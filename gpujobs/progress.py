"""Progress reports, the reading side: rates, expected ends, stalls, the local files' tail.

The ranks write ``GPUJOBS-PROGRESS`` lines (:mod:`gpujobs.rank.progress`, format in
:mod:`gpujobs.rank.wire`); this module turns them into :class:`~gpujobs.status.Progress`
(:func:`summarize`), flags stalls and reads a local job's ``progress-*.log`` files
(:class:`ProgressTail`).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Iterable

from .rank import contract
from .rank.wire import GpuSample, parse_progress_line
from .status import Progress

RATE_WINDOW = 20  # reports the rate is measured over


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
RESIDENT_PCT = 95.0
"""NVML utilisation from which a kernel was resident the whole sampling window (a spinning
kernel reads 100 %; back-to-back matrix products read 93 % on an H200)."""
DEFAULT_WAITING_SM_PCT = 50.0
"""A GPU with a kernel resident the whole window (:data:`RESIDENT_PCT`) but fewer SMs than
this busy (percent, over the round) only waits: NCCL's kernels spin while a collective waits
for a peer, and the host spins with them in a synchronize. On an H200 a one-thread spinning
kernel read 0.8 % of SMs and matrix products 96 % (benchmarks/RESULTS.md). NCCL runs one
block per channel, up to 64 channels (MAXCHANNELS in its device.h), so a wait reads at most
about 48 % of a 132-SM GPU; no real NCCL wait has been measured here. A job of small kernels
back to back can read under 50 % too: it is flagged only if it also reports no progress and
prints nothing for the stall time. ``GPUJOBS_STALL_SM_PCT`` sets it (0 turns the rule off)."""


def waiting_sm_pct(env: dict[str, str]) -> float:
    """The SM percentage under which a resident GPU only waits (``GPUJOBS_STALL_SM_PCT``: the
    job's env first, then this process's, default :data:`DEFAULT_WAITING_SM_PCT`)."""
    return _setting(contract.STALL_SM_PCT, env, DEFAULT_WAITING_SM_PCT)


def gpu_activity(sample: GpuSample, sm_pct: float = DEFAULT_WAITING_SM_PCT) -> str:
    """What one GPU sample says of its rank: ``"busy"`` (it computes), ``"waiting"`` (a
    kernel resident the whole window but under ``sm_pct`` % of SMs busy: see
    :data:`DEFAULT_WAITING_SM_PCT`) or ``"idle"``. Without SM readings (no GPM, a CPU
    sample) NVML's utilisation alone decides."""
    util = sample.util or 0
    if util <= BUSY_PCT:
        return "idle"
    if (util >= RESIDENT_PCT and sample.sm_util is not None and not sample.is_cpu
            and sample.sm_util < sm_pct):
        return "waiting"
    return "busy"


def gpu_activities(samples: Iterable[GpuSample], sm_pct: float,
                   waiting: Iterable[int] = ()) -> tuple[list[tuple[GpuSample, str]], set[int]]:
    """Each sample with what it says (:func:`gpu_activity`), in time order, and the ranks that
    wait after them (at a rank's latest time some GPU of it waits and none computes).
    ``waiting``: the ranks whose GPUs waited before these samples. A sample without an SM
    reading, of a GPU still resident, keeps its rank waiting: one failed GPM read does not end
    a wait."""
    still = set(waiting)
    out = []
    latest: dict[int, tuple[float, set[str]]] = {}  # rank -> (time, what its samples said then)
    for s in sorted(samples, key=lambda s: s.time):
        says = gpu_activity(s, sm_pct)
        if (says == "busy" and s.sm_util is None and not s.is_cpu and s.rank in still
                and (s.util or 0) >= RESIDENT_PCT):
            says = "waiting"
        (still.add if says == "waiting" else still.discard)(s.rank)
        out.append((s, says))
        t, seen = latest.get(s.rank, (float("-inf"), set()))
        if s.time > t:
            latest[s.rank] = (s.time, {says})
        else:  # the same time (in time order)
            seen.add(says)
    return out, {r for r, (_, says) in latest.items() if "waiting" in says and "busy" not in says}


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
            if not m.group("file").endswith(("threading.py", "gpujobs/rank/runner/__init__.py"))]
    for m in own[:1] or rest[:1]:
        return f"{m.group('fn')} ({os.path.basename(m.group('file'))}:{m.group('line')})"
    return ""


def stall_message(stalled: dict[int, float], limit: float, where: dict[int, str],
                  waiting: Iterable[int] = ()) -> str:
    """The stall flag's text on both backends (the local agent's event and status, the
    Kubernetes status().message): the quiet ranks (rank -> their last sign of life, epoch s),
    the threshold, the function each sits in (``where``: rank -> frame) and the ranks whose
    GPUs only wait (``waiting``). The same text for as long as the same ranks sit in the same
    places (no running count)."""
    ranks = sorted(stalled)
    last = max(stalled.values())  # the stalled ranks' last sign of life
    head = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    sits = "; ".join(f"rank {r} in {where[r]}" for r in ranks if where.get(r))
    waits = sorted(set(waiting) & set(ranks))
    idle = "CPU/GPU idle" if not waits else (
        ("GPU" if len(ranks) == 1 else "GPUs of " + ", ".join(f"rank {r}" for r in waits))
        + " waiting: a kernel resident, few SMs busy (a collective waiting for a peer?)")
    return (f"stalled? {head} quiet since {time.strftime('%H:%M:%S', time.localtime(last))}"
            f" (no progress, no output, {idle} for over {limit:.3g} s)"
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
