"""The panel's job feed: one shared refresh loop over ``gpujobs.jobs()`` for every page.

Each refresh is one ``gpujobs.jobs()`` call (one request to the backend whatever the number of
jobs); pages read the latest snapshot and follow its changes (:meth:`JobFeed.subscribe`), so
they never poll per job. The loop runs only while someone listens.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any, Callable

import gpujobs

from ..rank import contract
from ..status import range_text, start_text

DEFAULT_REFRESH_S = 2.0
UTIL_POINTS = 30  # utilisation points kept per job for the panel's sparkline


def refresh_interval() -> float:
    """Seconds between refreshes: ``GPUJOBS_LAB_REFRESH_S`` (default 2)."""
    raw = os.environ.get(contract.LAB_REFRESH_S, "").strip()
    if not raw:
        return DEFAULT_REFRESH_S
    try:
        value = float(raw)
    except ValueError:
        raise gpujobs.SpecError(contract.LAB_REFRESH_S, f"{raw!r} is not a number of seconds",
                                f"export {contract.LAB_REFRESH_S}=2") from None
    if value <= 0:
        raise gpujobs.SpecError(contract.LAB_REFRESH_S, f"{raw!r} must be above 0",
                                f"export {contract.LAB_REFRESH_S}=2")
    return value


def job_row(st: gpujobs.JobStatus) -> dict[str, Any]:
    """The panel's JSON for one job (the API's list item)."""
    pr = st.progress
    progress = None if pr is None else {
        "step": pr.step, "total": pr.total, "fraction": pr.fraction, "rate": pr.rate,
        "expected_end": pr.expected_end,
        "text": pr.short_text(ended=True) if st.terminal else pr.text()}
    return {
        "job_id": st.job_id, "name": st.name, "backend": st.backend, "queue": st.queue,
        "phase": st.phase, "terminal": st.terminal, "queue_position": st.queue_position,
        "position": st.position_text(), "reason": st.reason, "blocked_by": list(st.blocked_by),
        "expected_start": st.expected_start, "not_before": st.not_before,
        "expected_start_range": list(st.expected_start_range) if st.expected_start_range else None,
        "start": start_words(st),
        "progress": progress, "gang_ready": st.gang_ready, "gang_size": st.gang_size,
        "stalled": st.stalled_since is not None, "stale": st.stale_note, "message": st.message, "gpus": st.gpus,
        "cpu_ranks": st.cpu_ranks, "submitted_at": st.submitted_at, "started_at": st.started_at,
        "finished_at": st.finished_at,
    }


def mean_util(st: gpujobs.JobStatus) -> tuple[float, str] | None:
    """The mean utilisation (percent) of a job's latest samples and 'GPU' or 'CPU' (psutil)."""
    utils = [m.util for m in st.metrics if m.util is not None]
    if not utils:
        return None
    cpu = all(m.source == "psutil" for m in st.metrics)
    return sum(utils) / len(utils), "CPU" if cpu else "GPU"


def start_words(st: gpujobs.JobStatus) -> str:
    """A queued job's 'starts in ~12 min (14:05), between 14:02 and 14:40'; '' otherwise."""
    if st.phase != "queued":
        return ""
    words = start_text(st.expected_start, not_before=st.not_before)
    if st.expected_start_range is not None:
        words += f", {range_text(st.expected_start_range)}"
    return words


def ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The panel's order: running (and starting) jobs by submission, then the queued ones by queue
    position, then the finished ones, newest first."""
    active = sorted((r for r in rows if not r["terminal"]),
                    key=lambda r: (r["phase"] == "queued", r["queue_position"] is None,
                                   r["queue_position"] or 0, r["submitted_at"] or 0.0))
    done = sorted((r for r in rows if r["terminal"]),
                  key=lambda r: -(r["finished_at"] or r["submitted_at"] or 0.0))
    return active + done


def changes(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """``{"upsert": [rows], "removed": [ids], "order": [every id, panel order]}`` from one
    snapshot to the next; None if nothing changed."""
    upsert = [row for jid, row in new.items() if old.get(jid) != row]
    removed = [jid for jid in old if jid not in new]
    if not upsert and not removed:
        return None
    return {"upsert": upsert, "removed": removed, "order": [r["job_id"] for r in ordered(list(new.values()))]}


class JobFeed:
    """The latest snapshot of every job and a change stream for subscribers.

    ``source`` lists the jobs (``gpujobs.jobs`` by default); it is called from a worker thread,
    at most once per ``interval`` seconds however many pages ask.
    """

    def __init__(self, source: Callable[[], list[gpujobs.JobStatus]] | None = None,
                 interval: float | None = None):
        self._source = source or gpujobs.jobs
        self.interval = refresh_interval() if interval is None else interval
        self.rows: dict[str, dict[str, Any]] = {}
        self.refreshed_at: float | None = None
        self.error: str | None = None
        self.refreshes = 0  # backend listings made (each is one backend request)
        self._lock: asyncio.Lock | None = None
        self._subscribers: set[asyncio.Queue] = set()
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._util: dict[str, deque[float]] = {}
        self._util_seen: dict[str, tuple] = {}

    def snapshot_list(self) -> list[dict[str, Any]]:
        return ordered(list(self.rows.values()))

    def _fresh(self, max_age: float) -> bool:
        return self.refreshed_at is not None and time.monotonic() - self.refreshed_at < max_age

    async def refresh(self, max_age: float = 0.0) -> None:
        """List the jobs once (one backend request) and publish what changed; callers that
        queued behind a refresh younger than ``max_age`` share it instead."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if max_age > 0 and self._fresh(max_age):
                return
            try:
                statuses = await asyncio.to_thread(self._source)
            except gpujobs.GpuJobsError as exc:
                self.error = str(exc)
                self.refreshed_at = time.monotonic()
                return
            self.refreshes += 1
            self.error = None
            new = {st.job_id: self._with_util(st, job_row(st)) for st in statuses}
            for gone in set(self._util) - set(new):
                self._util.pop(gone, None)
                self._util_seen.pop(gone, None)
            diff = changes(self.rows, new)
            self.rows = new
            self.refreshed_at = time.monotonic()
        if diff is not None:
            for q in list(self._subscribers):
                q.put_nowait(diff)

    def _with_util(self, st: gpujobs.JobStatus, row: dict[str, Any]) -> dict[str, Any]:
        """Adds ``util`` (the recent utilisation points, one per new sample) and ``util_kind``."""
        mean = mean_util(st)
        if mean is not None:
            stamp = tuple(sorted((m.rank, m.device, m.time) for m in st.metrics))
            if self._util_seen.get(st.job_id) != stamp:  # a new sample, not the same one again
                self._util_seen[st.job_id] = stamp
                self._util.setdefault(st.job_id, deque(maxlen=UTIL_POINTS)).append(round(mean[0], 1))
        row["util"] = list(self._util.get(st.job_id, ()))
        row["util_kind"] = mean[1] if mean is not None else ""
        return row

    async def current(self, max_age: float | None = None) -> list[dict[str, Any]]:
        """The jobs, refreshed first when the snapshot is older than ``max_age`` (the interval)."""
        age = self.interval if max_age is None else max_age
        if not self._fresh(age):
            await self.refresh(age)
        if self.error is not None and not self.rows:
            raise gpujobs.BackendUnavailable(self.error)
        return self.snapshot_list()

    def kick(self) -> None:
        """Refresh now (after a cancel) instead of at the next tick."""
        if self._wake is not None:
            self._wake.set()

    def subscribe(self) -> asyncio.Queue:
        """A queue of change dicts; the loop runs while at least one is subscribed."""
        q: asyncio.Queue = asyncio.Queue()
        self._subscribers.add(q)
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.ensure_future(self._loop())
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    async def _loop(self) -> None:
        assert self._wake is not None
        while self._subscribers:
            await self.refresh()
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def close(self) -> None:
        self._subscribers.clear()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
