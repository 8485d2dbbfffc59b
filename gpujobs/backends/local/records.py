"""The agent's record of one job (:class:`Rec`) and the files a gang leaves that the agent
reads: its start-up phase, its end during a preemption grace period, restart marks; plus the
agent's own log line."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...rank.checkpoint import Preempted
from ...rank.contract import FAILURE, RANK_LOG, JobFolder
from ...spec import JobSpec
from ...status import JobStatus
from .gang import GangExit

STOP_MESSAGES = {  # exit_reason -> what a job still running is told (idle: none are running)
    "stop": "the agent was stopped (gpujobs agent stop)",
    "sigterm": "the agent was stopped (SIGTERM)",
    "idle": "the agent was stopped (idle)",
}


@dataclass
class Rec:
    """One job as the agent holds it."""
    id: str
    seq: int
    status: JobStatus
    spec: JobSpec
    runtime: dict = field(default_factory=dict)  # cwd, devices, pids, restarts, job_dir
    gang: Any = None
    stopping: str = ""  # "", "preempt", "cancel", "stop"
    deadline: float = 0.0
    metrics: Any = None  # gpujobs.metrics.JobMetrics of the running gang [metrics]
    ending: bool = False  # its gang is being cleaned up outside the lock (see Agent.step)
    starting: bool = False  # its gang is being started outside the lock (see Agent.step)
    watch: Any = None  # .liveness.GangWatch: progress reports and stall detection [progress]
    held: bool = False  # its ranks wait at their start gate until its start is stored


def read_phase(rec: Rec) -> str | None:
    """The start-up phase the gang's driver reports (launch_ray.PHASE_FILE), None when none."""
    job_dir = rec.runtime.get("job_dir")
    if not job_dir:
        return None
    try:
        return JobFolder(job_dir).phase_file.read_text()[:200].strip() or None
    except OSError:
        return None


PREEMPTED_TYPES = (f"{Preempted.__module__}.{Preempted.__qualname__}", "gpujobs.checkpoint.Preempted")
"""A rank's failure marker type that means "stopped for preemption, state saved" (the second: the
class's name before the rank package, in ranks an older agent started)."""


def ended_during_grace(done: GangExit | None, result_dir: Path) -> GangExit | None:
    """How a preempted gang that ended within its grace period is to be taken: its own
    success or failure (a GangExit: the job finishes), or None (requeued): it left through a
    resumable loop (``Preempted``), was killed, or left no exit status."""
    if done is None or done.message == "lost":
        return None
    if done.ok:
        return done
    if done.failed_rank is None:
        return None  # no rank to blame: it left no exit status of its own
    try:
        marker = json.loads((result_dir / FAILURE.name(done.failed_rank)).read_text())
    except (OSError, ValueError):
        return None  # killed, or exited without an exception of its own
    if marker.get("collateral") or marker.get("type") in PREEMPTED_TYPES:
        return None
    return done


def mark_restart(job_dir: Path, restarts: int, by: str) -> None:
    """A line in every rank log: the next lines come from a new run of the job."""
    why = f"preempted by {by}" if by else "preempted"
    line = (f"--- gpujobs: {why}; restart {restarts} starts the job again "
            f"(from its checkpoint_dir) ---\n")
    for log in JobFolder(job_dir).log_dir.glob(RANK_LOG.glob):
        try:
            with open(log, "a") as fh:
                fh.write(line)
        except OSError:
            pass


def agent_log(text: str) -> None:
    """A line in the agent's log (its stderr: GPUJOBS_HOME/agent.log)."""
    try:
        sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} gpujobs-agent[{os.getpid()}]: "
                         f"{text.rstrip()}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def create_time(pid: int) -> float:
    import psutil
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return 0.0
