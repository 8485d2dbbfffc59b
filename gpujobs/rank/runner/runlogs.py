"""A rank's log kept beside its checkpoints (Kubernetes), so a later run shows the earlier ones'.

A preempted run's pods, and their logs, are deleted with it. On Kubernetes each rank also keeps
what it prints (stdout and stderr, gpujobs' own marker lines left out) in
``<checkpoint folder>/.gpujobs-logs/rank<R>-<start ns>.log``; where that folder is on a claim, the
next run of the job starts by printing the earlier runs' lines of its rank, each as
``GPUJOBS-EARLIER-RUN [rank R] <line>``, so the new pod's log carries them and every reader
(``gpujobs logs``, a later process, the archive) shows them first, marked. Without a claim the
folder goes with the pod (nothing to show). Bounded: the last :data:`REPLAY_BYTES` of each run.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from ..wire import EARLIER_MARKER, is_marker_line

DIR_NAME = ".gpujobs-logs"
REPLAY_BYTES = 256 * 1024


def replay_and_keep(checkpoint_dir: Path, rank: int) -> None:
    """Print the earlier runs' kept lines of ``rank`` (marked), then keep this run's output."""
    d = Path(checkpoint_dir) / DIR_NAME
    try:
        earlier = sorted(d.glob(f"rank{rank}-*.log"))
    except OSError:
        earlier = []
    out = sys.stdout
    for path in earlier:
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(path) - REPLAY_BYTES))
                data = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        for line in data.splitlines():
            out.write(f"{EARLIER_MARKER} [rank {rank}] {line}\n")
    out.flush()
    try:
        d.mkdir(parents=True, exist_ok=True)
        keep = open(d / f"rank{rank}-{time.time_ns():020d}.log", "a", encoding="utf-8", buffering=1)
    except OSError:
        return  # a read-only or full folder: this run's lines are not kept
    sys.stdout = _Tee(sys.stdout, keep)
    sys.stderr = _Tee(sys.stderr, keep)


class _Tee:
    """A text stream that also copies whole lines (not gpujobs' marker lines) to ``keep``."""

    def __init__(self, stream: IO[str], keep: IO[str]):
        self._stream, self._keep, self._part = stream, keep, ""

    def write(self, text: str) -> int:
        n = self._stream.write(text)
        try:
            *lines, self._part = (self._part + text).split("\n")
            kept = [ln for ln in lines if not is_marker_line(ln)]
            if kept:
                self._keep.write("\n".join(kept) + "\n")
        except (OSError, ValueError):
            pass  # the folder went away: the run goes on
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
