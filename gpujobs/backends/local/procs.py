"""Whether a process has ended, counting a zombie as ended: the detached agent, its zygotes and
orphaned ranks are reaped by PID 1 when it likes (a container's PID 1 may never), so neither
``is_running()`` nor ``wait()`` says when they stopped."""
from __future__ import annotations

import time
from typing import Any


def running(proc: Any) -> bool:
    """The psutil ``proc`` still runs: it exists (the same process: ``is_running`` checks the pid
    was not reused) and is not a zombie."""
    import psutil
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def exited(proc: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` s until the psutil ``proc`` no longer :func:`runs <running>`; True
    if so. No ``proc.wait()``: it would wait for the reap."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while running(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True
