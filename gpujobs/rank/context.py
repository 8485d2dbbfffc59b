"""``gpujobs.context()``: what a function needs to know about the rank it runs in."""
from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class JobContext:
    """The running rank. Outside a job, a one-rank stand-in (``in_job`` False)."""
    job_id: str
    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    device: str
    checkpoint_dir: Path
    framework: str
    in_job: bool = True
    restarts: int = 0
    # a plain flag, not a threading.Event: request_stop runs in a SIGTERM handler, and a
    # second SIGTERM arriving inside Event.set() (which holds the Event's lock) deadlocked the
    # rank, so it never printed its traceback
    _stop_requested: bool = field(default=False, repr=False)
    _progress: Any = field(default=None, repr=False)

    def progress(self, step: float, total: float | None = None, *, rank: int | None = 0,
                 **metrics: Any) -> None:
        """Report how far the job is: ``ctx.progress(step, total=1000, loss=0.3)``.

        Cheap and throttled (at most one write per ``GPUJOBS_PROGRESS_INTERVAL`` s, default
        1; a call in between only keeps the values), so it may be called every step. Only
        rank 0 reports by default; ``rank=None`` lets every rank report (their reports are
        kept apart by rank), ``rank=k`` picks another one. Shows up as
        ``job.status().progress``, ``job.progress()``, progress bars and ``gpujobs status``.
        """
        if rank != self.rank and rank is not None:
            return
        reporter = self._progress
        if reporter is None:
            from .progress import for_environment
            reporter = self._progress = for_environment(self.rank) if self.in_job else \
                _NullReporter()
        reporter.report(step, total, metrics)

    def _flush_progress(self) -> None:
        if self._progress is not None:
            self._progress.flush()

    def should_stop(self) -> bool:
        """True once preemption or cancellation is announced: save a checkpoint and return."""
        return self._stop_requested

    def request_stop(self) -> None:
        """Announce the stop; safe in a signal handler, also one that interrupts itself."""
        self._stop_requested = True

    # Small checkpoint helpers; torch users can torch.save into checkpoint_dir directly.
    def save(self, obj: Any, name: str = "state") -> Path:
        """Atomically write ``obj`` to ``checkpoint_dir/name.pt`` (torch.save when torch is loaded)."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = self.checkpoint_dir / f"{name}.pt"
        fd, tmp = tempfile.mkstemp(dir=self.checkpoint_dir, prefix=f".{name}.")
        with os.fdopen(fd, "wb") as fh:
            torch = _loaded_torch()
            if torch is not None:
                torch.save(obj, fh)
            else:
                pickle.dump(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    def load(self, name: str = "state", default: Any = None) -> Any:
        """Read what :meth:`save` wrote, or ``default`` when there is no checkpoint yet."""
        path = self.checkpoint_dir / f"{name}.pt"
        if not path.exists():
            return default
        torch = _loaded_torch()
        with open(path, "rb") as fh:
            if torch is not None:
                return torch.load(fh, weights_only=False)
            return pickle.load(fh)


class _NullReporter:
    """Outside a job progress goes nowhere (the function runs in the notebook)."""

    def report(self, *a: Any) -> None:
        pass

    def flush(self) -> None:
        pass


def _loaded_torch():
    import sys
    return sys.modules.get("torch")


_current: JobContext | None = None


def context() -> JobContext:
    """The context of the rank this code runs in (a rank-0-of-1 stand-in outside jobs)."""
    global _current
    if _current is None:
        _current = JobContext(job_id="", rank=0, world_size=1, local_rank=0, node_rank=0,
                              device="cpu", checkpoint_dir=Path(tempfile.gettempdir()) / "gpujobs-ckpt",
                              framework="none", in_job=False)
    return _current


def _set_current(ctx: JobContext | None) -> None:
    global _current
    _current = ctx
