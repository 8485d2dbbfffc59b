"""Ranks the agent did not start itself: those of a previous agent (crashed or stopped) that
a new agent re-adopts, watched by pid and judged by the exit files the zygote writes."""
from __future__ import annotations

from ...contract import EXIT
import os
import signal
import time
from pathlib import Path

from .gang import GangExit, describe_returncode, first_failed

EXIT_FILE_GRACE_S = 3.0  # the zygote reaps a rank, then writes its exit file


class Adopted:
    """Ranks of a previous agent still running: watched by pid, ended by signal.

    A rank's pid vanishes when the zygote reaps it, a moment before the zygote writes its
    exit file; so a gang whose ranks are all gone but whose exit files are missing waits up
    to ``grace`` seconds for them before it is called lost.
    """

    def __init__(self, pids: list[int], result_dir: Path, world_size: int,
                 grace: float = EXIT_FILE_GRACE_S):
        import psutil
        self.grace = grace
        self._gone_at: float | None = None  # when no rank was alive any more
        self.procs = {}
        for r, pid in enumerate(pids):
            try:
                self.procs[r] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
        self.world_size = world_size  # ranks (exit files), not launcher pids (mpirun, a driver)
        self.result_dir = result_dir

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def _alive(self) -> bool:
        import psutil
        for p in self.procs.values():
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    return True
            except psutil.NoSuchProcess:
                pass
        return False

    def all_exited(self) -> bool:
        return not self._alive()

    def ended(self) -> bool:
        return self.poll() is not None

    def poll(self) -> GangExit | None:
        """None while a rank lives, or while exit files may still be on their way."""
        if self._alive():
            return None
        done = exit_from_files(self.result_dir, self.world_size)
        if done.message != "lost":
            return done
        now = time.monotonic()
        if self._gone_at is None:
            self._gone_at = now
        return done if now - self._gone_at >= self.grace else None

    def signal_all(self, sig: int) -> None:
        for p in self.procs.values():
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def terminate(self, grace: float = 0.0) -> None:
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.signal_all(signal.SIGKILL)
        deadline = time.monotonic() + 5.0  # gone before their slots are handed out again
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.02)


def exit_from_files(result_dir: Path, world: int) -> GangExit:
    """How ranks ended, from the exit files the zygote writes; missing ones are 'lost'."""
    codes: dict[int, int] = {}
    for r in range(world):
        try:
            codes[r] = int((result_dir / EXIT.name(r)).read_text())
        except (OSError, ValueError):
            return GangExit(False, codes, r, "lost")
    bad = [r for r, c in codes.items() if c != 0]
    if bad:
        first = first_failed(result_dir, bad)
        return GangExit(False, codes, first, f"rank {first} {describe_returncode(codes[first])}")
    return GangExit(True, codes)
