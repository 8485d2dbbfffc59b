"""Live Python stacks of a local job's ranks, without ptrace.

Every rank's runner registers ``faulthandler`` on SIGUSR2 with ``all_threads=True``, writing
into ``results/stacks-<rank>.txt``, and records the pid to signal in
``results/stackpid-<rank>.json`` (see :func:`gpujobs.rank.runner.enable_faulthandler`). Asking
for the stacks signals those pids (only them: a launcher such as mpirun has no handler and
would die of SIGUSR2) and reads what each dump appended. The dump runs in the C signal
handler, so a rank blocked in C code (a collective, a sleep, a lock) answers too.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from ...rank.contract import STACKPID, STACKS
from ...progress import innermost_frame as where  # noqa: F401 - the one parser (liveness)

SETTLE_S = 0.05  # a dump is complete once its file stopped growing for this long


def stack_pids(result_dir: Path) -> dict[int, int]:
    """{rank: pid} of the ranks that registered for stack dumps and are still alive."""
    out: dict[int, int] = {}
    for p in Path(result_dir).glob(STACKPID.glob):
        try:
            doc = json.loads(p.read_text())
            rank, pid = int(doc["rank"]), int(doc["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _same_process(pid, doc.get("created")):
            out[rank] = pid
    return out


def _same_process(pid: int, created: float | None) -> bool:
    """The pid is alive and still the rank's (a reused pid is another program: never signal it)."""
    try:
        import psutil
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return created is None or abs(proc.create_time() - float(created)) < 1.0
    except ImportError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    except Exception:  # noqa: BLE001 - NoSuchProcess, AccessDenied
        return False


def dump_stacks(result_dir: Path, ranks: list[int] | None = None,
                timeout: float = 5.0) -> dict[int, str]:
    """{rank: the Python stacks of all its threads}; ranks that do not answer in ``timeout``
    seconds (or have ended) are left out."""
    result_dir = Path(result_dir)
    pids = stack_pids(result_dir)
    if ranks is not None:
        pids = {r: p for r, p in pids.items() if r in ranks}
    start: dict[int, int] = {}
    for rank, pid in pids.items():
        path = result_dir / STACKS.name(rank)
        try:
            start[rank] = path.stat().st_size
        except OSError:
            start[rank] = 0
        try:
            os.kill(pid, signal.SIGUSR2)
        except OSError:
            start.pop(rank)
    out: dict[int, str] = {}
    seen: dict[int, tuple[int, float]] = {}
    deadline = time.monotonic() + timeout
    while start and time.monotonic() < deadline:
        for rank in list(start):
            path = result_dir / STACKS.name(rank)
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size <= start[rank]:
                continue
            now = time.monotonic()
            prev = seen.get(rank)
            if prev is None or prev[0] != size:
                seen[rank] = (size, now)
            elif now - prev[1] >= SETTLE_S:
                with open(path, "rb") as fh:
                    fh.seek(start.pop(rank))
                    out[rank] = fh.read().decode("utf-8", "replace")
        time.sleep(0.01)
    return dict(sorted(out.items()))

