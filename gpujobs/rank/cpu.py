"""CPU readings of a rank's process tree (psutil), used when there is no GPU to read.

These samples say ``source="psutil"`` and ``device=-1``: every view labels them
CPU. ``util`` is CPU percent summed over the tree (100 = one core busy, as in
``top``), ``mem_used`` the tree's resident memory, ``mem_total`` the machine's.
"""
from __future__ import annotations

import os
import time

from .wire import CPU_DEVICE, GpuSample


def descendants(pid: int) -> list[int] | None:
    """The pids of ``pid``'s living descendants, from the kernel's per-thread ``children``
    lists (/proc/PID/task/TID/children, Linux 3.5+): a few reads per process of the tree,
    where psutil's ``children(recursive=True)`` reads the stat file of every process on the
    machine (most of a sampling round's CPU on a busy machine). None when the kernel keeps no
    such lists (the caller asks psutil); [] when ``pid`` is gone."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        return None
    out: list[int] = []
    todo = [pid]
    seen = {pid}
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # gone
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as fh:
                    kids = fh.read().split()
            except OSError:
                continue  # the thread ended meanwhile
            for kid in map(int, kids):
                if kid not in seen:
                    seen.add(kid)
                    out.append(kid)
                    todo.append(kid)
    return out


class CpuReader:
    """Keeps one psutil.Process per pid so ``cpu_percent`` measures between calls."""

    def __init__(self) -> None:
        import psutil  # ImportError here: the caller reports "no psutil" instead of CPU numbers
        self._psutil = psutil
        self._procs: dict = {}
        self._new: set[int] = set()  # roots first seen this round: no CPU % yet
        self._total = float(psutil.virtual_memory().total)
        self._gone = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)

    def _proc(self, pid: int):
        p = self._procs.get(pid)
        if p is None or not p.is_running():  # is_running also catches pid reuse
            p = self._procs[pid] = self._psutil.Process(pid)
            p.cpu_percent(None)  # first call primes the counter
            self._new.add(pid)
        return p

    def tree(self, pid: int) -> list:
        """The process and its living descendants ([] when it is gone).

        Every call starts a new round: ``_new`` holds the pids first seen in it, and dead
        processes are forgotten, whichever path (CPU ``read`` or GPU ``pids``) asked.
        """
        self._new.clear()
        try:
            root = self._proc(pid)
            kids = descendants(pid)
            if kids is None:
                kids = [k.pid for k in root.children(recursive=True)]
        except self._gone:
            return []
        out = [root]
        for k in kids:
            try:
                out.append(self._proc(k))
            except self._gone:
                pass
        self._forget_dead()
        return out

    def pids(self, pid: int) -> list[int]:
        return [p.pid for p in self.tree(pid)]

    def read(self, rank: int, pid: int, host: str = "", now: float | None = None) -> list[GpuSample]:
        now = time.time() if now is None else now
        procs = self.tree(pid)
        if not procs:
            return []
        primed = pid not in self._new
        cpu = rss = 0.0
        for p in procs:
            try:
                with p.oneshot():
                    cpu += p.cpu_percent(None)
                    rss += p.memory_info().rss
            except self._gone:
                continue
        return [GpuSample(time=now, rank=rank, device=CPU_DEVICE, util=cpu if primed else None,
                          mem_used=rss, mem_total=self._total, source="psutil", host=host)]

    def _forget_dead(self) -> None:
        if len(self._procs) > 256:
            self._procs = {pid: p for pid, p in self._procs.items() if p.is_running()}
