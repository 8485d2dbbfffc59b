"""Progress and stall detection for one running local gang (called each metrics round).

The agent's sampler calls :meth:`GangWatch.observe` once per round, outside the agent's
lock; it reads the ranks' ``progress-*.log`` files (new lines only), the sizes of their
logs, their CPU time (psutil, process tree) and the GPU use of the round's samples.

A rank is *quiet* while it reports no progress (any rank's report counts for all: the
ranks of a gang move in lockstep), writes no output, and uses under ``BUSY_PCT`` % of a
CPU (and of its GPUs, where sampled). A rank whose GPUs only wait (NVML calls them busy
but few SMs are: ``progress.gpu_activity``) is quiet whatever its CPU does: its host
thread spins in a synchronize behind a collective that waits for a peer. A rank quiet for longer than
``max(floor, factor x usual interval)`` is *stalled*; the usual interval is the median
gap between the job's own progress reports (without any, the floor alone). Settings, from
the job's env (``.env(...)``) first, then the agent's: ``GPUJOBS_STALL_FLOOR_S`` (default
60), ``GPUJOBS_STALL_FACTOR`` (default 5); ``GPUJOBS_STALL_FLOOR_S=0`` turns it off.
Stalls are flagged (``JobStatus.stalled_since`` and a message naming the ranks and where
they sit, from a stack dump), never acted on.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ...rank.contract import JobFolder
from ...metrics import JobMetrics, ranks_of_gang
from ...progress import (BUSY_PCT, ProgressTail, gpu_activities, stall_message, stall_settings, usual_interval,
                         waiting_sm_pct)
from ...status import JobEvent, Progress
from .records import Rec, agent_log, read_phase
from .stacks import dump_stacks, where


class GangWatch:
    def __init__(self, job_dir: Path | str, pids: dict[int, int], env: dict[str, str] | None = None,
                 now: float | None = None, since: float | None = None):
        self.job_dir = Path(job_dir)
        self.folder = JobFolder(self.job_dir)
        self.tail = ProgressTail(self.folder.result_dir, since=since)  # since: this run's start
        self.pids = dict(pids)
        self.floor, self.factor = stall_settings(env or {})
        self.sm_pct = waiting_sm_pct(env or {})
        now = time.time() if now is None else now
        self.active: dict[int, float] = {r: now for r in self.pids}  # last sign of life
        self._log_size: dict[int, int] = {}
        self._cpu: dict[int, tuple[float, float]] = {}  # rank -> (cpu seconds, wall)
        self.stalled: dict[int, float] = {}  # rank -> quiet since
        self.waiting: set[int] = set()  # ranks whose GPUs only waited in the last round
        self.where: dict[int, str] = {}
        self._dumped = False

    # ------------------------------------------------------------ readings
    def _cpu_busy(self, rank: int, pid: int, now: float) -> bool:
        try:
            import psutil

            from ...rank.cpu import descendants
            proc = psutil.Process(pid)
            kids = descendants(pid)
            procs = [proc, *(proc.children(recursive=True) if kids is None else kids)]
            total = 0.0
            for p in procs:
                try:
                    t = (psutil.Process(p) if isinstance(p, int) else p).cpu_times()
                    total += t.user + t.system
                except psutil.Error:
                    pass
        except Exception:  # noqa: BLE001 - gone, or psutil missing: no CPU evidence
            return False
        prev = self._cpu.get(rank)
        self._cpu[rank] = (total, now)
        if prev is None or now <= prev[1]:
            return True  # first reading: assume alive
        return 100.0 * (total - prev[0]) / (now - prev[1]) > BUSY_PCT

    def _log_grew(self, rank: int) -> bool:
        try:
            size = self.folder.rank_log(rank).stat().st_size
        except OSError:
            return False
        grew = size != self._log_size.get(rank, size)
        self._log_size[rank] = size
        return grew

    def threshold(self) -> float:
        usual = usual_interval(self.tail.reports[-200:])
        return max(self.floor, self.factor * usual) if usual else self.floor

    # --------------------------------------------------------------- round
    def observe(self, samples: tuple = (), now: float | None = None) -> tuple[Progress | None, float | None, str]:
        """(progress, stalled_since, message) after one round."""
        now = time.time() if now is None else now
        new = self.tail.read()
        progress = self.tail.latest()
        said, self.waiting = gpu_activities([s for s in samples if not s.is_cpu], self.sm_pct, self.waiting)
        gpu_busy = {s.rank for s, says in said if says == "busy"}
        for rank, pid in self.pids.items():
            alive = bool(new) or self._log_grew(rank) or rank in gpu_busy
            cpu = self._cpu_busy(rank, pid, now)  # always read, to keep the delta
            alive = alive or (cpu and rank not in self.waiting)
            if alive:
                self.active[rank] = now
        if self.floor <= 0:
            return progress, None, ""
        limit = self.threshold()
        stalled = {r: t for r, t in self.active.items() if now - t > limit}
        if not stalled:
            self.stalled, self.where, self._dumped = {}, {}, False
            return progress, None, ""
        if not self._dumped or set(stalled) != set(self.stalled):
            self._dumped = True
            self.where = self._locate(sorted(stalled))
        self.stalled = stalled
        since = min(stalled.values())
        return progress, since, self._message(stalled, now, limit)

    def _locate(self, ranks: list[int]) -> dict[int, str]:
        try:
            dumps = dump_stacks(self.folder.result_dir, ranks, timeout=2.0)
        except Exception:  # noqa: BLE001 - where they sit is a nicety
            return {}
        return {r: w for r, text in dumps.items() if (w := where(text))}

    def _message(self, stalled: dict[int, float], now: float, limit: float) -> str:
        """The same text for as long as the same ranks sit in the same places (no running
        count: a new text is a new event and a stored status)."""
        return stall_message(stalled, limit, self.where, self.waiting)


class GangWatcher:
    """The agent's view of its running gangs: metrics sampled each round, progress and stalls
    (:class:`GangWatch`), the driver's start-up phase, all pushed as status [metrics]
    [progress]. Given the agent's lock, how to push a record (``emit``) and the set of
    records to store (``dirty``)."""

    def __init__(self, lock: Any, emit: Callable[[Rec], None], dirty: set[str]):
        self.lock = lock
        self.emit = emit
        self.dirty = dirty

    def sample(self, rec: Rec, devices: Any) -> None:
        """Sample the gang's ranks (NVML, or psutil CPU) into a bounded history + metrics.log."""
        try:
            ranks = ranks_of_gang(rec.gang, devices)
            jm = JobMetrics(ranks, path=JobFolder(rec.runtime["job_dir"]).metrics_log,
                            use_nvml=any(devs for _, devs in ranks.values()))  # CPU ranks: no NVML
        except Exception:  # noqa: BLE001 - metrics never stop a job
            agent_log(traceback.format_exc())
            return
        try:
            rec.watch = GangWatch(rec.runtime["job_dir"], {r: pid for r, (pid, _) in ranks.items()},
                                  rec.spec.env_dict(), since=rec.status.started_at)
        except Exception:  # noqa: BLE001 - progress never stops a job
            traceback.print_exc()
        jm.on_update = lambda latest: self.on_metrics(rec, jm, latest)
        rec.metrics = jm.start()

    def on_metrics(self, rec: Rec, jm: Any, latest: tuple) -> None:
        seen = observe(rec, latest)  # file reads (and a stack dump) outside the lock
        phase = read_phase(rec)
        with self.lock:
            if rec.metrics is jm and not rec.status.terminal:
                changes: dict[str, Any] = {"metrics": latest}
                starting = rec.status.extra.get("starting")
                if phase != starting:  # "starting Ray head ..." while fn has not started; then ""
                    extra = {k: v for k, v in rec.status.extra.items() if k != "starting"}
                    changes["extra"] = {**extra, "starting": phase} if phase else extra
                    changes["message"] = phase or ""
                if seen is not None:
                    stall_changes(rec, seen, changes, phase)
                if "events" in changes:
                    self.dirty.add(rec.id)  # flagged / unflagged: stored, in the events
                rec.status = rec.status.with_(**changes)  # pushed, not stored each round
                self.emit(rec)


def stall_changes(rec: Rec, seen: tuple, changes: dict[str, Any], phase: str | None) -> None:
    """A round's progress and stall flag into ``changes``: one ``stalled`` event when the
    flag is raised, one ``moving`` when it clears (stored then); while flagged the text is
    the status message too (updated when other ranks stall, without an event)."""
    progress, since, message = seen
    changes.update(progress=progress or rec.status.progress, stalled_since=since)
    extra = changes.get("extra", rec.status.extra)
    if message != extra.get("stall", ""):
        changes["extra"] = {**extra, "stall": message}
    was = rec.status.stalled_since is not None
    if (since is not None) != was:
        changes["events"] = rec.status.events + (JobEvent(
            time.time(), "stalled" if message else "moving",
            message or "the quiet ranks move again"),)
    if message:
        changes["message"] = message
    elif was:
        changes["message"] = phase or ""


def observe(rec: Rec, latest: tuple) -> Any:
    """One round of the gang's :class:`GangWatch` (None without one, or when it fails)."""
    watch = rec.watch
    if watch is None:
        return None
    try:
        return watch.observe(latest)
    except Exception:  # noqa: BLE001 - progress never stops a job
        traceback.print_exc()
        return None


def final_progress(rec: Rec) -> dict:
    """The job's last progress report (written when its function returned)."""
    watch, rec.watch = rec.watch, None
    if watch is None:
        return {}
    try:
        watch.tail.read()
        latest = watch.tail.latest()
    except Exception:  # noqa: BLE001
        return {}
    return {"progress": latest, "stalled_since": None} if latest is not None else \
        {"stalled_since": None}
