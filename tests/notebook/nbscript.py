"""Scripted statuses and a scripted job source for the notebook tests (no backend)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from gpujobs.status import GpuSample, JobEvent, JobStatus


class RecordingComm:
    """Stands in for a kernel comm: keeps every message a widget sends."""
    log: list = []

    def __init__(self, **kwargs: Any):
        self.comm_id = kwargs.get("comm_id") or f"c{id(self)}"
        self.kernel = "recording"
        self.messages: list = []

    def send(self, data=None, metadata=None, buffers=None):
        self.messages.append(data)
        RecordingComm.log.append((self, data))

    def open(self, *a, **k): ...
    def on_msg(self, *a, **k): ...
    def close(self, *a, **k): ...


def status(phase: str, **kw: Any) -> JobStatus:
    base = dict(job_id="train-abc123", name="train", queue="team-a", user="ada", gpus=2,
                gang_size=2, submitted_at=1000.0)
    base.update(kw)
    return JobStatus(phase=phase, **base)


def sample(t: float, rank: int, util: float, used: float, source: str = "nvml") -> GpuSample:
    return GpuSample(time=t, rank=rank, device=0, util=util, mem_used=used, mem_total=16 * 2**30,
                     source=source)


def script() -> list[JobStatus]:
    """queued 2nd → queued 1st → admitted → starting 1/2 → running 2/2 (metrics) → succeeded."""
    ev = (JobEvent(1000.0, "submitted"),)
    return [
        status("queued", queue_position=2, events=ev),
        status("queued", queue_position=1, events=ev),
        status("admitted", events=ev + (JobEvent(1001.0, "admitted"),)),
        status("starting", gang_ready=1, events=ev + (JobEvent(1001.0, "admitted"),)),
        status("running", gang_ready=2, started_at=1002.0,
               events=ev + (JobEvent(1001.0, "admitted"), JobEvent(1002.0, "started")),
               metrics=(sample(1003.0, 0, 50, 2**30), sample(1003.0, 1, 60, 2**30))),
        status("running", gang_ready=2, started_at=1002.0,
               metrics=(sample(1005.0, 0, 90, 3 * 2**30), sample(1005.0, 1, 95, 3 * 2**30))),
        status("succeeded", gang_ready=2, started_at=1002.0, finished_at=1010.0, exit_code=0,
               events=ev + (JobEvent(1010.0, "finished", "succeeded"),)),
    ]


class ScriptedJob:
    """A job-like source (the handle's subscribe/status/logs/result/cancel) that plays a
    list of statuses through subscribers; no backend involved."""

    def __init__(self, statuses: list[JobStatus], value: Any = 42, logs: str = "[rank 0] hi\n"):
        self.statuses = list(statuses)
        self.current = self.statuses[0]
        self.value = value
        self._logs = logs
        self.subscribers: list[Callable[[JobStatus], Any]] = []
        self.cancelled = False
        self.polls = 0

    def subscribe(self, cb):
        self.subscribers.append(cb)
        return lambda: self.subscribers.remove(cb)

    def status(self) -> JobStatus:
        self.polls += 1
        return self.current

    def logs(self, follow: bool = False, rank: int | None = None) -> str:
        return self._logs

    def result(self, timeout=None):
        return self.value

    def exception(self, timeout=None):
        return None if self.current.phase == "succeeded" else RuntimeError("boom\nmore")

    def cancel(self) -> None:
        self.cancelled = True
        self.emit(self.current.with_(phase="cancelled"))

    def emit(self, st: JobStatus) -> None:
        self.current = st
        for cb in list(self.subscribers):
            cb(st)

    def play(self, gap: float = 0.0, start_delay: float = 0.05) -> threading.Thread:
        def run():
            time.sleep(start_delay)
            for st in self.statuses[1:]:
                self.emit(st)
                if gap:
                    time.sleep(gap)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t
